// The tape: records differentiable ops in execution order while it is active (RAII scope);
// backward walks it in reverse, which is a reverse topological order by construction.
//
//   Tape tape;                        // records until it goes out of scope
//   Variable loss = mse_loss(model(x), y);
//   tape.backward(loss, 1024.0f);     // seeds {1024 * ones, 1024}: static loss scaling
//
// Ops record only when a tape is active, no NoGrad guard is alive, and some input requires a
// gradient. Each node keeps its inputs alive (to deliver gradients) and its outputs weakly.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/op_list.h"
#include "autograd/scaling.h"
#include "autograd/variable.h"

namespace mixtape {

class Fp8Context;

// Backward of one node. dys: one ScaledGrad per output, already brought to a common scale by
// the tape (zeros where an output received nothing). needs[i]: whether input i wants a gradient.
// Returns one ScaledGrad per input (undefined where not needed).
using BackwardFn =
    std::function<std::vector<ScaledGrad>(const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs)>;

// For ops that pass the scale through: returns plain tensors, the tape attaches the scale.
using PlainBackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& dys, const std::vector<bool>& needs)>;

struct Node {
  OpId op;
  std::vector<std::shared_ptr<VarImpl>> inputs;  // nullptr where the input needs no gradient
  std::vector<std::weak_ptr<VarImpl>> outputs;
  // Shape and dtype of each output: an output nobody used may be gone by backward time, and
  // its zero gradient still needs them (a split piece that is never read).
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  BackwardFn backward;
};

// Observer of every gradient the tape produces (telemetry hooks in here; null = off, free).
class GradObserver {
 public:
  virtual ~GradObserver() = default;
  virtual void on_node_grad(const Node& node, size_t input, const ScaledGrad& g) = 0;
  virtual void on_leaf_grad(const VarImpl& leaf, const ScaledGrad& g) = 0;
};

class Tape {
 public:
  Tape();
  ~Tape();
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  static Tape* current();  // innermost active tape of this thread, or nullptr
  // The site of the next scale query of the node whose backward runs now (autograd/scaling.h's
  // gemm_beta, cast_beta and param_beta stamp it on their query).
  static GradSite next_grad_site();

  // Reverse pass from `root`, seeded with {scale * ones, scale}. Leaves receive ScaledGrads
  // (accumulated with the branch rule when they already hold one). Clears the tape, so the graph
  // runs backward once: a second backward from a root of that graph throws (ops recorded after
  // the first backward make a new graph, which can run backward in turn).
  void backward(const Variable& root, float scale = 1.0f);
  // Reverse pass from an explicit seed gradient of root's shape.
  void backward(const Variable& root, ScaledGrad seed);

  size_t size() const { return nodes_.size(); }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  void clear() { nodes_.clear(); }

  void set_scaling_rule(ScalingRule* rule) { rule_ = rule; }
  ScalingRule* scaling_rule() const { return rule_; }
  // 8-bit training (autograd/fp8.h): the GEMM-like ops recorded on this tape read 8-bit operands.
  void set_fp8(Fp8Context* fp8) { fp8_ = fp8; }
  Fp8Context* fp8() const { return fp8_; }
  void set_observer(GradObserver* obs) { observer_ = obs; }
  GradObserver* observer() const { return observer_; }

  // Used by the autograd functions.
  void push(std::unique_ptr<Node> node) { nodes_.push_back(std::move(node)); }

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  bool ran_backward_ = false;  // a backward pass has run (and freed the graph it walked)
  Tape* prev_ = nullptr;
  ScalingRule* rule_ = nullptr;
  Fp8Context* fp8_ = nullptr;
  GradObserver* observer_ = nullptr;
};

// Disables recording in its scope (evaluation, optimizer updates).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;
  static bool active();

 private:
  bool prev_;
};

// ---- recording API for autograd functions ------------------------------------------------

// True when an op over `inputs` must be recorded.
bool should_record(std::initializer_list<const Variable*> inputs);
bool should_record(const std::vector<Variable>& inputs);

// Wrap the forward result(s) and, when recording, push a node. Inputs that do not require a
// gradient are stored as nullptr and reported as needs[i] == false.
// record*: the scale passes through (the common case). record_scaled*: the node sets the
// scale of each input gradient itself (GEMM-like nodes, casts, splits).
Variable record(OpId op, const std::vector<Variable>& inputs, Tensor out, PlainBackwardFn fn);
std::vector<Variable> record_multi(OpId op, const std::vector<Variable>& inputs, std::vector<Tensor> outs,
                                   PlainBackwardFn fn);
Variable record_scaled(OpId op, const std::vector<Variable>& inputs, Tensor out, BackwardFn fn);
std::vector<Variable> record_multi_scaled(OpId op, const std::vector<Variable>& inputs, std::vector<Tensor> outs,
                                          BackwardFn fn);

}  // namespace mixtape
