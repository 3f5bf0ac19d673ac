// 8-bit training: the GEMM-like ops of a tape with an Fp8Context read their operands in 8 bits
// (Note [8-bit training]).
//
// Note [8-bit training]
// Under the fp8 policy (nn/precision.h) the model runs the bf16 mixed policy, and every GEMM-like
// op on a tape that carries an Fp8Context quantizes both operands of each of its GEMMs
// (tensor/ops/quantize.h) and multiplies the codes in fp32 (scaled_matmul_nt):
//   fprop  y  = x w^T        x: input,  w: weight        (K = in_features)
//   dgrad  dx = dy w         dy: grad,  w^T: weight      (K = out_features)
//   wgrad  dw = dy^T x       dy^T: grad, x^T: input      (K = the rows of the batch)
// Each operand is quantized for its own GEMM, with blocks along that GEMM's K, from the bf16
// tensor the op saved (a per-tensor scale gives the same codes each time). What each role gets:
//   recipe    input / grad scales                   weight scales           rule
//   current   per tensor, from its own amax         per tensor              amax (TE Float8CurrentScaling)
//   delayed   per tensor, from the amax history     per tensor              amax (TE DelayedScaling)
//   rowwise   one per row of the operand            one per row             amax (torchao rowwise)
//   mx        1 x 32 along K, E8M0                  1 x 32 along K          pow2_floor or pow2_up (OCP MX)
//   block     1 x 128 along K                       128 x 128               pow2_up (DeepSeek-V3)
//   nvfp4     1 x 16 along K                        16 x 16                 nvfp4 (NVIDIA's NVFP4)
// Formats: input and weight in forward_format (E4M3), gradients in grad_format (E5M2): the field's
// HYBRID; MX takes mx_element for the input and weight, nvfp4 E2M1. Under nvfp4 the gradients
// keep grad_format with the same two-level scales (NVIDIA's recipe stores them in E2M1 with
// stochastic rounding and a random Hadamard transform before the wgrad GEMM, which mixtape does
// not do). With per-operator gradient scaling (a
// ScalingRule on the tape: --loss-scale gradient) the gradient operand is not scaled by its own
// amax: the rule's cast model picks the node's power-of-two beta for the cast of dY to the 8-bit
// format, with that format's lambda_min and lambda_max (Note [Gradient scaling in 8 bits] in
// fp8.cpp), and dY is quantized with s = 1. The bias, the gradients passed between ops, and
// everything that is not a GEMM operand stay in the mixed policy underneath.
//
// A tensor is quantized once per layout per step: the unrolled LSTM reads the same recurrent weight
// at every time step, and a per-tensor operand's codes serve both orientations (x for fprop and
// x^T for wgrad are the same codes, transposed: the same amax gives the same scale), as Transformer
// Engine keeps an fp8 tensor with its transpose. The context remembers each tensor by its storage
// (weakly: a freed storage matches nothing) until the next begin_step(); a tensor must not change
// in place between begin_step() and the step's optimizer update (the trainer's order).
//
// Delayed scaling keeps, for each (site, role), the amaxes of the last amax_history_len steps; a
// step quantizes with the scale the history gave at its start, records its own amax, and the
// next begin_step() rolls the history and computes the next scale (TE's order). A site is the
// n-th 8-bit GEMM op of a step's forward pass: a model must run the same ops in the same order
// each step (a site whose op changes starts a fresh history).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/op_list.h"
#include "autograd/scaled_grad.h"
#include "tensor/ops/quantize.h"
#include "tensor/tensor_dict.h"

namespace mixtape {

enum class Fp8Recipe : uint8_t { current, delayed, rowwise, mx, block, nvfp4 };
const char* fp8_recipe_name(Fp8Recipe r);  // "current", "delayed", "rowwise", "mx", "block", "nvfp4"
// Throws, listing the choices, on anything else.
Fp8Recipe fp8_recipe_from_name(const std::string& name);

struct Fp8Options {
  Fp8Recipe recipe = Fp8Recipe::current;
  DType forward_format = DType::e4m3;         // inputs and weights
  DType grad_format = DType::e5m2;            // gradients: e5m2 is HYBRID, e4m3 the all-E4M3 recipe
  DType mx_element = DType::e4m3;             // mx: inputs' and weights' element format
  ScaleRule mx_rule = ScaleRule::pow2_floor;  // mx: OCP's floor rule or the round-up rule
  int margin = 0;                             // amax rule: s = max / amax / 2^margin
  int64_t amax_history_len = 1024;            // delayed (TE's default)
  bool amax_most_recent = false;              // delayed: TE's amax_compute_algo "most_recent" (else "max")
};
// Throws naming the field on a combination that cannot work (non-8-bit formats, history < 1, ...).
void check_fp8_options(const Fp8Options& o);

enum class Fp8Role : uint8_t { input, weight, grad };
const char* fp8_role_name(Fp8Role r);  // "input", "weight", "grad"

// One quantized operand of the step (telemetry).
struct Fp8Record {
  int64_t site = 0;
  OpId op = OpId::linear;
  Fp8Role role = Fp8Role::input;
  const char* gemm = "fprop";  // "fprop", "dgrad", "wgrad"
  DType format = DType::e4m3;
  QuantStats stats;
};

class Fp8Context {
 public:
  explicit Fp8Context(Fp8Options options);
  const Fp8Options& options() const { return options_; }

  // Starts a step: sites count from 0 again, this step's records are cleared, and delayed
  // scaling's histories take the last step's amaxes and give this step's scales.
  void begin_step();
  // The site of the next 8-bit GEMM op of the forward pass.
  int64_t next_site();
  // x (a [rows, K] matrix) quantized for its role at a site; with `per_operator_scaled` (a grad whose
  // scale is a ScalingRule's beta) it is quantized per tensor with s = 1. Records the operand.
  Quantized quantize(int64_t site, OpId op, Fp8Role role, const char* gemm, const Tensor& x,
                     bool per_operator_scaled = false);
  // The format a role is stored in.
  DType format(Fp8Role role) const;
  // Whether a role's operands (not per-operator scaled) get one scale per tensor (current and
  // delayed scaling): their codes then do not depend on the operand's shape or layout.
  bool per_tensor(Fp8Role role) const;
  // The QuantSpec of a role's operands (without delayed scaling's given scale), for a kernel that
  // quantizes them itself; record() then counts and records what it did, as quantize() would.
  QuantSpec operand_spec(Fp8Role role) const { return spec(role, false); }
  void record(int64_t site, OpId op, Fp8Role role, const char* gemm, DType format, const QuantStats& stats);

  const std::vector<Fp8Record>& records() const { return records_; }  // this step's
  // What every operand of a role quantized since the context was made (count, saturated, flushed,
  // subnormal, nonfinite summed; amax the largest; the scale fields unused).
  const QuantStats& totals(Fp8Role role) const { return totals_[size_t(role)]; }
  // One JSON line per record of this step: {"event":"fp8","step":..,"site":..,"op":..,"role":..,
  // "gemm":..,"format":..,"count":..,"saturated":..,"flushed":..,"subnormal":..,"nonfinite":..,
  // "amax":..,"scale_inv_min":..,"scale_inv_max":..} (and "network" when given).
  std::vector<std::string> json_lines(int64_t step, const std::string& network = {}) const;

  // Delayed scaling's histories and scales (empty for the other recipes), for a resumed run.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 private:
  struct History {
    OpId op = OpId::linear;
    std::vector<float> amax;  // ring of amax_history_len steps
    int64_t next = 0;         // the slot this step's amax goes to
    float pending = 0.0f;     // this step's amax so far
    float scale = 1.0f;       // s for this step
  };
  QuantSpec spec(Fp8Role role, bool per_operator_scaled) const;
  // The codes of x if x, or x^T under a per-tensor layout, was quantized this step with spec s.
  std::optional<Quantized> cached(const Tensor& x, const QuantSpec& s) const;
  History& history(int64_t site, OpId op, Fp8Role role);

  Fp8Options options_;
  int64_t next_site_ = 0;
  std::map<std::pair<int64_t, int>, History> histories_;
  std::vector<Fp8Record> records_;
  QuantStats totals_[3];
  struct CachedOperand {
    std::weak_ptr<Storage> storage;
    int64_t offset;
    Shape shape, strides;
    DType dtype;
    QuantSpec spec;
    Quantized q;
  };
  std::vector<CachedOperand> cache_;
};

// The Fp8Context of the active tape, or nullptr (no tape, or no 8-bit training).
Fp8Context* active_fp8();

// The incoming gradient of an 8-bit GEMM-like node as its dgrad and wgrad GEMMs read it. Under
// per-operator gradient scaling (a ScalingRule on the tape) dY is multiplied by the beta of its
// cast to the grad format (Note [Gradient scaling in 8 bits]) and `per_operator` is set: the
// operand is then quantized with s = 1. Otherwise dY as it came.
struct Fp8Grad {
  ScaledGrad dy;
  bool per_operator = false;
};
Fp8Grad fp8_grad(const Fp8Context& fp8, const ScaledGrad& dy);

}  // namespace mixtape
