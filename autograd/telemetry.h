// Precision telemetry (docs/design.md section 4): while a recorded backward pass runs, every node's
// input gradient and every parameter's gradient is measured against a 16-bit format: its
// scale, how many of its values underflow, become subnormal or overflow there, max |g|, and a
// histogram of base-2 exponents (Micikevicius et al., Figure 3; Zhao et al., Figure 2).
//
//   Telemetry telemetry({.every_n_steps = 100, .format = DType::f16});
//   for (int64_t step = 0; ...; ++step) {
//     Tape tape;
//     telemetry.begin_step(step, tape);  // attaches itself to `tape` on recorded steps only
//     Variable loss = loss_fn(model(x), y);
//     tape.backward(loss, scaler.scale());
//     telemetry.write_jsonl(metrics, step);  // writes nothing on a step that was not recorded
//   }
//
// Off by default and free when off: a Tape has no observer unless one is attached, and then
// backward only tests a null pointer per gradient. On a recorded step each gradient costs one
// extra read pass (grad_telemetry, tensor/ops/grad_telemetry.h) and, on CUDA, a small copy to
// the host. The Telemetry must outlive the backward passes of the tapes it is attached to.
//
// Note [What telemetry measures]
// A gradient arrives as a ScaledGrad {g, scale}: g holds scale x the true gradient, stored in
// the dtype of the variable it belongs to. Every statistic is taken over the values of g as
// stored, read exactly into fp32 (f64 for f64 gradients), against the target format F (f16 by
// default): "what would happen if this gradient were stored in F at this scale". Rounding to F
// is RNE, the library's only rounding.
//   underflow   fraction of the nonzero finite values that round to zero in F
//   subnormal   fraction of the nonzero finite values that round to a nonzero subnormal of F
//               (they survive with fewer significant bits)
//   overflow    count of values that are inf or NaN, or round to inf in F
//   max_abs     largest finite |g| (as stored: divide by scale for the true gradient)
//   hist        counts of floor(log2|g|) over the nonzero finite values, the stored exponent.
//               Since scales are powers of two, the true gradient's exponent is
//               e - log2(scale) exactly; F's ranges are fixed in these units (f16: normal
//               exponents [-14, 15], subnormal [-24, -15]), and loss scaling shows as the
//               histogram moving right against them.
// What this says depends on the dtype g is stored in:
//   - f32 (fp32 training, fp32 master-weight gradients behind a cast, fp32 loss/softmax
//     gradients): the counts are a prediction, exactly what rounding this tensor to F would
//     lose. On an fp32 run this answers "would fp16 training survive at this scale?".
//   - the other 16-bit format (a bf16 run measured against f16, or the reverse): also a
//     prediction, since every bf16 value is exact in fp32.
//   - F itself (f16 gradients measured against f16): rounding is the identity, so underflow is
//     0 and overflow counts the infs the op already produced. The loss already happened inside
//     the op that computed g (it computed in fp32 and rounded once), and that fp32 value is gone.
//     What remains informative: the fraction of exact zeros (1 - nonzero / numel: relu masks and
//     underflowed values together), the subnormal fraction (values at the edge, with reduced
//     precision), and the histogram, whose mass near exponent -24 shows how close the gradient
//     sits to the cliff. To see the underflow itself, measure the same model in fp32 against f16.
//
// Note [Measured rounding per node]
// What a stored 16-bit gradient cannot show (its underflow happened inside the op), the rounding
// census (tensor/core/rounding_census.h) counts as it happens. When a census is open during the
// backward pass (PrecisionTrainer opens one on sampled steps), the census's counts between one
// node's report and the next are that node's: every value its backward rounded to 16 bits, for
// all of its inputs (and any branch sum the tape formed on the way). Node records carry them as
// "rounded", "measured_underflow" (fraction of the nonzero results that became 0) and
// "measured_subnormal"; each record of a node repeats the node's counts.
//
// Note [Telemetry names]
// A node record describes the gradient a node's backward produced for one of its inputs, i.e.
// the gradient of that input variable. Its name is the input variable's name when it has one
// (parameters are named by nn::Module with dotted paths such as "features.0.weight"; in mixed
// precision the cast of a parameter is the node whose input is named), otherwise
// "<op>#<k>:<i>": input i of the k-th node of the backward pass (k = 0 is the node nearest the
// loss; nodes that received no gradient are not counted). For a fixed model and input shapes
// the backward order is the same every step, so these names are stable across steps.
// A param record is a leaf's gradient after the pass (accumulated with what it already held);
// its name is the leaf's name, or "param#<j>" for the j-th unnamed leaf of the pass.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/tape.h"
#include "tensor/ops/grad_telemetry.h"

namespace mixtape {

struct TelemetryOptions {
  int64_t every_n_steps = 1;  // record the steps with step % every_n_steps == 0; 0 = never
  DType format = DType::f16;  // the 16-bit format gradients are measured against (f16 or bf16)
  bool histogram = true;      // exponent histogram per record
  bool nodes = true;          // record node (activation) gradients
  bool params = true;         // record leaf (parameter) gradients
  int64_t hist_lo = kExpHistLo;
  int64_t hist_hi = kExpHistHi;
};

struct TelemetryRecord {
  enum class Kind { node, param };
  Kind kind = Kind::node;
  std::string name;          // Note [Telemetry names]
  std::string op;            // node records: the op whose backward produced the gradient
  int64_t node = -1;         // node records: the node's position in the backward pass
  int64_t input = -1;        // node records: which input of that node
  float scale = 1.0f;        // the ScaledGrad's scale
  DType dtype = DType::f32;  // the gradient's storage dtype
  Shape shape;
  GradTelemetry stats;  // Note [What telemetry measures]
  // Node records, when a RoundingCensus was open during backward: what the node's backward
  // rounded to 16 bits (all of its input gradients together; Note [Measured rounding per node]).
  bool measured = false;
  RoundingCounts rounding;

  // Fractions of the nonzero finite values (0 when there are none).
  double underflow_rate() const;
  double subnormal_rate() const;
};

class Telemetry : public GradObserver {
 public:
  using Options = TelemetryOptions;
  explicit Telemetry(Options options = {});

  const Options& options() const { return options_; }
  bool records_step(int64_t step) const;  // whether `step` is sampled

  // Starts a step: drops the previous records and attaches this observer to `tape` when the
  // step is sampled; otherwise detaches it (when it was attached) so backward runs unobserved.
  // Returns whether the step is recorded.
  bool begin_step(int64_t step, Tape& tape);

  // The records of the current step, in the order backward produced them: node records as the
  // nodes run (nearest the loss first), then param records.
  const std::vector<TelemetryRecord>& records() const { return records_; }
  void clear();

  // One JSON object per record and line:
  //   {"event":"telemetry","step":120,"name":"fc.weight","kind":"param","dtype":"f32",
  //    "format":"f16","scale":65536,"numel":8192,"nonzero":8100,"underflow":0.0012,
  //    "subnormal":0.031,"overflow":0,"max_abs":3.5,"hist_lo":-150,"hist_hi":130,
  //    "hist":[[-9,12],[-8,40],...]}
  // Node records add "op", "node" and "input". underflow and subnormal are fractions of
  // "nonzero"; hist is sparse, [exponent, count] pairs for the nonempty bins, and is left out
  // when histograms are off.
  // `name_prefix` goes before every name ("G." for a GAN's generator).
  std::vector<std::string> json_lines(int64_t step, const std::string& name_prefix = {}) const;
  void write_jsonl(std::ostream& os, int64_t step) const;
  // For a metrics writer of the caller's own: `sink` receives each line, without the newline.
  void write_jsonl(const std::function<void(std::string_view)>& sink, int64_t step) const;

  // GradObserver.
  void on_node_grad(const Node& node, size_t input, const ScaledGrad& g) override;
  void on_leaf_grad(const VarImpl& leaf, const ScaledGrad& g) override;

 private:
  TelemetryRecord measure(const ScaledGrad& g) const;

  Options options_;
  std::vector<TelemetryRecord> records_;
  const Node* last_node_ = nullptr;  // the node whose inputs are being reported
  int64_t node_index_ = -1;          // its position in the backward pass
  int64_t unnamed_leaves_ = 0;
  // Note [Measured rounding per node]
  uint64_t census_generation_ = 0;
  RoundingCounts census_mark_;    // census counts at the previous node's report
  RoundingCounts node_rounding_;  // the current node's counts
  bool node_measured_ = false;
};

}  // namespace mixtape
