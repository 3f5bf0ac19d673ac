// Where gradient scales change (DESIGN.md section 4; Zhao et al., Algorithm 1).
//
// Every op passes its incoming scale through, except:
//   GEMM-like nodes  (linear, matmul, bmm, conv2d, conv_transpose2d, the LSTM GEMMs):
//                    dX is computed from beta * dY and carries beta * alpha      -> gemm_beta
//   casts            (16-bit -> fp32 before softmax/loss): same, by the cast model -> cast_beta
//   branches/splits  several gradients meet: rescale to one common scale          -> combine_branch
//
// Without a ScalingRule on the tape, gemm_beta and cast_beta return 1 (scales pass through);
// combine_branch always applies Algorithm 1's common-scale rule. The paper's rule for the two
// queries is ZhaoScalingRule (autograd/zhao.h).
#pragma once

#include <vector>

#include "autograd/op_list.h"
#include "autograd/scaled_grad.h"

namespace mixtape {

// Where a query comes from. The nodes leave it default; gemm_beta / cast_beta below fill it in
// from the backward pass that is running, so a rule can key per-node state (Zhao et al. reuse
// each node's beta for K steps) on (node, query).
struct GradSite {
  uint64_t pass = 0;   // numbers the Tape::backward calls of this thread from 1; 0: outside one
  int64_t node = -1;   // the querying node's position on the tape (recording order)
  int32_t query = 0;   // the query's index within that node (matmul asks once per operand)
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

class ScalingRule {
 public:
  virtual ~ScalingRule() = default;
  virtual float gemm_beta(const GemmGradQuery& q) = 0;
  virtual float cast_beta(const CastGradQuery& q) = 0;
};

// The local power-of-two factors, from the active tape's ScalingRule (1 when there is none).
// Both stamp q.site before asking the rule.
float gemm_beta(const GemmGradQuery& q);
float cast_beta(const CastGradQuery& q);

// Largest finite magnitude of a gradient's dtype: lambda_max in Zhao et al.
double max_finite(DType t);

// Algorithm 1, lines 18-22: bring several scaled gradients of one tensor to a common scale and
// sum them. The common scale is the largest of their scales for which no rescaled gradient
// overflows its dtype (beta * max|g_i| / alpha_i < lambda_max), trying scales in descending
// order; the smallest scale is the fallback. Equal scales (the usual case) skip the max|g| scan.
ScaledGrad combine_branch(std::vector<ScaledGrad> grads);
// The common scale alone (the first half of combine_branch).
float common_scale(const std::vector<ScaledGrad>& grads);

// g * factor for a power-of-two factor (exact unless it under/overflows); returns g when 1.
Tensor rescale(const Tensor& g, float factor);

}  // namespace mixtape
