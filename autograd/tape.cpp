#include "autograd/tape.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "tensor/ops/optim.h"

namespace mixtape {

namespace {
thread_local Tape* g_current = nullptr;
thread_local bool g_no_grad = false;
thread_local uint64_t g_passes = 0;  // Tape::backward calls so far on this thread
thread_local GradSite g_site;        // the node whose backward runs now (node -1: none)

GradSite next_site() {
  GradSite s = g_site;
  if (g_site.node >= 0) ++g_site.query;
  return s;
}

// Marks a backward pass for GradSite; restores the enclosing state on exit (also on throw).
struct PassGuard {
  GradSite saved = g_site;
  PassGuard() { g_site = GradSite{++g_passes, -1, 0}; }
  ~PassGuard() { g_site = saved; }
  void enter(size_t node) {
    g_site.node = int64_t(node);
    g_site.query = 0;
  }
};
}  // namespace

Tape::Tape() : prev_(g_current) { g_current = this; }
Tape::~Tape() { g_current = prev_; }
Tape* Tape::current() { return g_current; }

NoGrad::NoGrad() : prev_(g_no_grad) { g_no_grad = true; }
NoGrad::~NoGrad() { g_no_grad = prev_; }
bool NoGrad::active() { return g_no_grad; }

GradSite Tape::next_grad_site() { return next_site(); }

// ---- recording ---------------------------------------------------------------------------

bool should_record(std::initializer_list<const Variable*> inputs) {
  if (!g_current || g_no_grad) return false;
  for (const Variable* v : inputs)
    if (v->defined() && v->requires_grad()) return true;
  return false;
}

bool should_record(const std::vector<Variable>& inputs) {
  if (!g_current || g_no_grad) return false;
  for (const Variable& v : inputs)
    if (v.defined() && v.requires_grad()) return true;
  return false;
}

std::vector<Variable> record_multi_scaled(OpId op, const std::vector<Variable>& inputs, std::vector<Tensor> outs,
                                          BackwardFn fn) {
  std::vector<Variable> vars;
  vars.reserve(outs.size());
  const bool rec = should_record(inputs);
  for (Tensor& t : outs) {
    Variable v(std::move(t), rec);
    v.impl().is_leaf = !rec;
    vars.push_back(std::move(v));
  }
  if (!rec) return vars;
  auto node = std::make_unique<Node>();
  node->op = op;
  for (const Variable& v : inputs) node->inputs.push_back(v.defined() && v.requires_grad() ? v.ptr() : nullptr);
  for (const Variable& v : vars) {
    node->outputs.push_back(v.ptr());
    node->output_shapes.push_back(v.shape());
    node->output_dtypes.push_back(v.dtype());
  }
  node->backward = std::move(fn);
  g_current->push(std::move(node));
  return vars;
}

namespace {
BackwardFn pass_through(PlainBackwardFn fn) {
  return [fn = std::move(fn)](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    std::vector<Tensor> plain;
    plain.reserve(dys.size());
    for (const ScaledGrad& d : dys) plain.push_back(d.g);
    std::vector<Tensor> dx = fn(plain, needs);
    std::vector<ScaledGrad> out(dx.size());
    for (size_t i = 0; i < dx.size(); ++i) out[i] = {std::move(dx[i]), dys.front().scale};
    return out;
  };
}
}  // namespace

std::vector<Variable> record_multi(OpId op, const std::vector<Variable>& inputs, std::vector<Tensor> outs,
                                   PlainBackwardFn fn) {
  return record_multi_scaled(op, inputs, std::move(outs), pass_through(std::move(fn)));
}

Variable record_scaled(OpId op, const std::vector<Variable>& inputs, Tensor out, BackwardFn fn) {
  std::vector<Tensor> outs;
  outs.push_back(std::move(out));
  return record_multi_scaled(op, inputs, std::move(outs), std::move(fn)).front();
}

Variable record(OpId op, const std::vector<Variable>& inputs, Tensor out, PlainBackwardFn fn) {
  return record_scaled(op, inputs, std::move(out), pass_through(std::move(fn)));
}

// ---- backward ----------------------------------------------------------------------------

namespace {

// The index of the first needed gradient holding an inf or NaN, or -1.
int first_nonfinite(const std::vector<ScaledGrad>& gs, const std::vector<bool>& needs) {
  for (size_t i = 0; i < gs.size(); ++i)
    if ((needs.empty() || needs[i]) && gs[i].defined() && grad_stats(gs[i].g).has_inf_nan) return int(i);
  return -1;
}

// Note [Overflow guard]
// ~~~~~~~~~~~~~~~~~~~~~
// With a scaling rule every gradient a node emits must fit its format. GEMM-like nodes, casts,
// parameter gradients and branch sums choose scales under which they cannot overflow; an op
// that passes its scale through can still grow a gradient past lambda_max (batch norm's backward
// divides by the batch's standard deviation, dropout multiplies by 1 / (1 - p)). So under a rule
// the tape checks each node's output gradients (one grad_stats pass each). When one holds an inf
// or NaN that the node's incoming gradients did not, the node's backward runs again from
// 2^-s dY for s = 8, 16, 24, and the first finite result is taken: each of its outputs then
// carries alpha 2^-s (the scale travels with the tuple, so nothing else changes). Values of dY
// below 2^s lambda_min are lost in that node only. Either way the rule hears of it
// (ScalingRule::on_overflow): a step that is still skipped is attributed to the node whose
// output overflowed. An overflow that arrives with the incoming gradient was reported upstream.
std::vector<ScaledGrad> guarded_backward(ScalingRule& rule, const Node& node, size_t k,
                                         const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs,
                                         const std::function<void()>& enter) {
  std::vector<ScaledGrad> dxs = node.backward(dys, needs);
  const int bad = first_nonfinite(dxs, needs);
  // In data-parallel training every process recomputes the node when any of them has to, with
  // the same shifts (Note [Scales agreed across processes] in gradient_scaling.cpp).
  if (!rule.any_process(bad >= 0 && first_nonfinite(dys, {}) < 0)) return dxs;
  float alpha = 1.0f;
  for (const ScaledGrad& d : dys)
    if (d.defined()) alpha = d.scale;
  OverflowEvent e{.op = node.op, .node = int64_t(k), .input = bad, .alpha = alpha};
  for (int s : {8, 16, 24}) {
    const float f = std::ldexp(1.0f, -s);
    if (rule.any_process(!is_power_of_two(double(alpha) * f))) break;
    std::vector<ScaledGrad> lower(dys.size());
    for (size_t o = 0; o < dys.size(); ++o)
      if (dys[o].defined()) lower[o] = {rescale(dys[o].g, f), dys[o].scale * f};
    enter();
    std::vector<ScaledGrad> again = node.backward(lower, needs);
    if (!rule.any_process(first_nonfinite(again, needs) >= 0)) {
      e.shift = s;
      e.recovered = true;
      rule.on_overflow(e);
      return again;
    }
  }
  rule.on_overflow(e);
  return dxs;
}

}  // namespace

void Tape::backward(const Variable& root, float scale) {
  MT_CHECK(is_power_of_two(scale), "backward: the loss scale must be a power of two, got ", scale);
  backward(root, ScaledGrad{full(root.shape(), double(scale), root.dtype(), root.device()), scale});
}

void Tape::backward(const Variable& root, ScaledGrad seed) {
  MT_CHECK(root.defined() && root.requires_grad(),
           "backward: the root does not require a gradient (was it computed inside this Tape "
           "from variables with requires_grad?)");
  MT_CHECK(seed.g.shape() == root.shape() && seed.g.dtype() == root.dtype(), "backward: seed ", seed.g.meta(),
           " does not match the root ", root.data().meta());
  MT_CHECK(is_power_of_two(seed.scale), "backward: seed scale must be a power of two, got ", seed.scale);
  // A root that is not a leaf must come out of a node of this tape: otherwise no node here leads
  // back from it and the backward pass would deliver nothing, silently. (Searched from the end:
  // a loss is almost always the last node's output.)
  if (!root.is_leaf()) {
    const bool recorded = std::any_of(nodes_.rbegin(), nodes_.rend(), [&](const std::unique_ptr<Node>& n) {
      return std::any_of(n->outputs.begin(), n->outputs.end(),
                         [&](const std::weak_ptr<VarImpl>& o) { return o.lock() == root.ptr(); });
    });
    MT_CHECK(recorded || !ran_backward_,
             "backward: this Tape already ran backward, which frees the graph that produced the root, so a "
             "second backward would deliver no gradient; record the forward pass again (to add the gradients of "
             "two losses, sum the losses and run backward once)");
    MT_CHECK(recorded,
             "backward: the root was recorded by another Tape (its graph is there, not on this one), so this "
             "backward would deliver no gradient; call backward on the Tape that recorded the forward pass");
  }

  // Every variable that receives a gradient; leaves keep theirs, the rest are cleared at the end
  // (a non-leaf recorded on another tape would otherwise hold a stale gradient).
  std::vector<std::shared_ptr<VarImpl>> touched;
  std::unordered_set<VarImpl*> seen;
  auto deliver = [&](const std::shared_ptr<VarImpl>& v, ScaledGrad g) {
    v->pending.push_back(std::move(g));
    if (seen.insert(v.get()).second) touched.push_back(v);
  };
  deliver(root.ptr(), std::move(seed));
  PassGuard pass;

  // Nodes run in reverse recording order; by then every consumer of their outputs has run.
  for (size_t k = nodes_.size(); k-- > 0;) {
    Node& node = *nodes_[k];
    std::vector<ScaledGrad> dys(node.outputs.size());
    bool any = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      auto out = node.outputs[o].lock();
      if (!out || out->pending.empty()) continue;
      dys[o] = combine_branch(std::move(out->pending), rule_ != nullptr);  // branch rule: a tensor used twice
      out->pending.clear();
      any = true;
    }
    if (!any) continue;
    // Outputs of one node (split pieces, LSTM c and h) share one scale: Algorithm 1's split rule.
    if (dys.size() > 1) {
      std::vector<ScaledGrad> present;
      for (const ScaledGrad& d : dys)
        if (d.defined()) present.push_back(d);
      const float common = common_scale(present);
      for (size_t o = 0; o < dys.size(); ++o) {
        if (dys[o].defined()) {
          dys[o] = {rescale(dys[o].g, common / dys[o].scale), common};
        } else {
          dys[o] = {zeros(node.output_shapes[o], node.output_dtypes[o], present.front().g.device()), common};
        }
      }
    }
    std::vector<bool> needs(node.inputs.size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = node.inputs[i] != nullptr;
    pass.enter(k);
    std::vector<ScaledGrad> dxs =
        rule_ ? guarded_backward(*rule_, node, k, dys, needs, [&] { pass.enter(k); }) : node.backward(dys, needs);
    MT_ASSERT(dxs.size() == node.inputs.size(), op_name(node.op), " returned ", dxs.size(), " gradients for ",
              node.inputs.size(), " inputs");
    for (size_t i = 0; i < dxs.size(); ++i) {
      if (!needs[i]) continue;
      MT_ASSERT(dxs[i].defined(), op_name(node.op), " gave no gradient for input ", i);
      MT_ASSERT(dxs[i].g.shape() == node.inputs[i]->data.shape(), op_name(node.op), " gradient ", dxs[i].g.meta(),
                " for input ", node.inputs[i]->data.meta());
      if (observer_) observer_->on_node_grad(node, i, dxs[i]);
      deliver(node.inputs[i], std::move(dxs[i]));
    }
  }

  for (const auto& leaf : touched) {
    if (leaf->pending.empty()) continue;
    if (!leaf->is_leaf) {
      leaf->pending.clear();
      continue;
    }
    if (leaf->grad) leaf->pending.push_back(std::move(*leaf->grad));
    leaf->grad = combine_branch(std::move(leaf->pending), rule_ != nullptr);
    leaf->pending.clear();
    if (observer_) observer_->on_leaf_grad(*leaf, *leaf->grad);
  }
  nodes_.clear();
  ran_backward_ = true;
}

}  // namespace mixtape
