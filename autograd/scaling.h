// Where gradient scales change (docs/design.md section 4; Zhao et al., Algorithm 1).
//
// Every op passes its incoming scale through, except:
//   GEMM-like nodes  (linear, matmul, bmm, conv2d, conv_transpose2d, the LSTM GEMMs):
//                    dX is computed from beta * dY and carries beta * alpha      -> gemm_beta
//                    the weight and bias gradients get a scale of their own      -> param_grad
//   casts            (16-bit -> fp32 before softmax/loss): same, by the cast model -> cast_beta
//   branches/splits  several gradients meet: rescale to one common scale          -> combine_branch
//
// Without a ScalingRule on the tape, gemm_beta and cast_beta return 1 and param_grad keeps the
// incoming scale (scales pass through; loss scaling is exactly S times the unscaled backward);
// combine_branch always applies Algorithm 1's common-scale rule. With a rule, every gradient a
// node emits carries its own scale, chosen so that it cannot overflow its 16-bit format
// (Note [Parameter gradient scale], Note [Overflow-free branch sum], and the tape's Note
// [Overflow guard]). The paper's rule is GradientScalingRule (autograd/gradient_scaling.h).
#pragma once

#include <vector>

#include "autograd/op_list.h"
#include "autograd/scaled_grad.h"

namespace mixtape {

// Where a query comes from. The nodes leave it default; gemm_beta / cast_beta below fill it in
// from the backward pass that is running, so a rule can key per-node state (Zhao et al. reuse
// each node's beta for K steps) on (node, query).
struct GradSite {
  uint64_t pass = 0;  // numbers the Tape::backward calls of this thread from 1; 0: outside one
  int64_t node = -1;  // the querying node's position on the tape (recording order)
  int32_t query = 0;  // the query's index within that node (matmul asks once per operand)
};

// What a GEMM-like node knows when it is about to compute dX = f(beta * dY, W).
struct GemmGradQuery {
  OpId op;
  const ScaledGrad* dy;  // incoming gradient {alpha, dY}
  const Tensor* w;       // the operand dY is multiplied with (weights, or the other matrix)
  int64_t reduction;     // N: length of the dot products that form each element of dX
  GradSite site{};
};

// What a cast node knows: the incoming gradient and the dtype the gradient is cast to.
struct CastGradQuery {
  const ScaledGrad* dy;
  DType to;  // the dtype of the gradient the cast passes on (the cast's input dtype)
  GradSite site{};
};

// What a GEMM-like node knows when it has accumulated a parameter gradient (dW = X^T dY, or a
// bias gradient) in fp32 and is about to round it to `to`: the exact values, not an estimate.
struct ParamGradQuery {
  OpId op;
  const Tensor* g;  // the fp32 accumulation: alpha x the true gradient, not yet rounded
  float alpha;      // the scale g carries
  DType to;         // the 16-bit dtype it is stored in
  int32_t input;    // which input of the node it is the gradient of (1: weight, 2: bias)
  GradSite site{};
};

// Where a node's output gradient overflowed (or would have, had the tape not rescaled it):
// reported by the tape's overflow guard (Note [Overflow guard] in tape.cpp).
struct OverflowEvent {
  OpId op;
  int64_t node = -1;       // position on the tape
  int32_t input = 0;       // the node input whose gradient overflowed
  float alpha = 1.0f;      // the scale the node's incoming gradient carried
  int32_t shift = 0;       // the node's backward was recomputed from 2^-shift * dY (0: not recovered)
  bool recovered = false;  // the recomputation is finite: the step goes on
};

class ScalingRule {
 public:
  virtual ~ScalingRule() = default;
  virtual float gemm_beta(const GemmGradQuery& q) = 0;
  virtual float cast_beta(const CastGradQuery& q) = 0;
  virtual float param_beta(const ParamGradQuery& q) = 0;
  // The tape reports every overflow its guard saw (recovered or not).
  virtual void on_overflow(const OverflowEvent& e) {}
  // Whether `local` holds on any process of a data-parallel group (Note [Scales agreed across
  // processes] in gradient_scaling.cpp); one process decides alone.
  virtual bool any_process(bool local) { return local; }
};

// The local power-of-two factors, from the active tape's ScalingRule (1 when there is none).
// Each stamps q.site before asking the rule.
float gemm_beta(const GemmGradQuery& q);
float cast_beta(const CastGradQuery& q);
float param_beta(const ParamGradQuery& q);
// Whether the active tape has a ScalingRule (gradients then carry per-node scales).
bool scaling_rule_active();

// Largest finite magnitude of a gradient's dtype: lambda_max in Zhao et al.
double max_finite(DType t);

// Algorithm 1, lines 18-22: bring several scaled gradients of one tensor to a common scale and
// sum them. The common scale is the largest of their scales for which no rescaled gradient
// overflows its dtype (beta * max|g_i| / alpha_i < lambda_max), trying scales in descending
// order; the smallest scale is the fallback. Equal scales (the usual case) skip the max|g| scan.
// With `exact_sum` (a ScalingRule is active and the gradients are 16-bit), Note [Overflow-free
// branch sum]: the gradients are summed in fp32 and the common scale is chosen from the exact
// sum, so that the stored sum cannot overflow either; it is rounded once.
ScaledGrad combine_branch(std::vector<ScaledGrad> grads, bool exact_sum = false);
// The common scale alone (the first half of combine_branch).
float common_scale(const std::vector<ScaledGrad>& grads);

// g * factor for a power-of-two factor (exact unless it under/overflows); returns g when 1.
Tensor rescale(const Tensor& g, float factor);

// Note [Parameter gradient scale] (autograd/gradient_scaling.cpp): the weight or bias gradient
// of a GEMM-like node at input `input`. compute(t) evaluates it from operands in dtype t
// (accumulated in fp32 either way). Without a rule: {compute(dy's dtype), alpha}, as before.
// With a rule and a 16-bit dY: accumulated in fp32 from widened operands (exact products, the
// same fp32 sums), the rule picks beta from the exact values (param_beta), and beta * g is
// rounded once to dY's dtype, carrying alpha * beta.
template <class F>
ScaledGrad param_grad(OpId op, int32_t input, const ScaledGrad& dy, F&& compute) {
  const DType dt = dy.g.dtype();
  if (!scaling_rule_active() || !is_16bit(dt)) return {compute(dt), dy.scale};
  const Tensor g32 = compute(DType::f32);
  const float beta = param_beta(ParamGradQuery{op, &g32, dy.scale, dt, input});
  return {rescale(g32, beta).to(dt), beta * dy.scale};  // the one rounding to 16 bits
}

}  // namespace mixtape
