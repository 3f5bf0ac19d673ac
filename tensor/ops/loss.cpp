#include "tensor/ops/loss.h"

#include <cmath>

#include "cuda/backend.h"
#include "tensor/cpu/loss.h"
#include "tensor/ops/common.h"

namespace mixtape {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
    case Reduction::none: return "none";
  }
  return "?";
}

namespace {

// How a front-end's Reduction reaches the kernels (tensor/cpu/loss.h).
struct ReduceArgs {
  bool reduce;
  double divisor;
};
ReduceArgs reduce_args(Reduction r, int64_t count) {
  switch (r) {
    case Reduction::mean: return {true, double(count)};
    case Reduction::sum: return {true, 1.0};
    case Reduction::none: return {false, 1.0};
  }
  return {true, 1.0};
}

// The output shape of a loss whose per-element losses have shape `elems`.
Shape loss_shape(Reduction r, const Shape& elems) { return r == Reduction::none ? elems : Shape{}; }

void check_loss_grad(const char* op, const Tensor& dy, Reduction r, const Shape& elems, const Tensor& ref) {
  ops::check_same(op, {&ref, &dy});
  MT_CHECK(dy.shape() == loss_shape(r, elems), op, " backward: gradient ", dy.meta(), " does not match the ",
           reduction_name(r), "-reduced loss of shape ", shape_str(loss_shape(r, elems)));
}

// Two inputs of one shape, device and floating dtype.
void check_pair(const char* op, const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  ops::check_same(op, {&a, &b});
  ops::check_floating(op, a);
  MT_CHECK(a.shape() == b.shape(), op, ": ", what_a, " ", a.meta(), " and ", what_b, " ", b.meta(),
           " must have the same shape");
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log_out) {
  const char* name = log_out ? "log_softmax" : "softmax";
  ops::check_same(name, {&x});
  ops::check_floating(name, x);
  MT_CHECK(x.dim() >= 1, name, ": expected at least 1 dim, got ", x.meta());
  const int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::softmax(x, d, log_out, out); }, [&] { cuda::softmax(x, d, log_out, out); });
  return out;
}

Tensor softmax_backward_impl(const Tensor& y, const Tensor& dy, int64_t dim, bool log_out) {
  const char* name = log_out ? "log_softmax backward" : "softmax backward";
  ops::check_same(name, {&y, &dy});
  MT_CHECK(y.shape() == dy.shape(), name, ": gradient ", dy.meta(), " does not match output ", y.meta());
  const int64_t d = wrap_dim(dim, y.dim(), name);
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  on_device(
      y.device(), [&] { cpu::softmax_backward(y, dy, d, log_out, dx); },
      [&] { cuda::softmax_backward(y, dy, d, log_out, dx); });
  return dx;
}

// The targets' shape for `logits`: logits' shape without the class dim 1.
Shape ce_target_shape(const Tensor& logits) {
  Shape s = logits.shape();
  s.erase(s.begin() + 1);
  return s;
}

// cross_entropy's and nll_loss's arguments; `what` names the input ("logits", "input").
void check_class_loss(const char* op, const char* what, const Tensor& logits, const Tensor& targets,
                      const ClassLossOptions& o) {
  ops::check_same(op, {&logits, &targets}, false);
  ops::check_floating(op, logits);
  MT_CHECK(targets.dtype() == DType::i64, op, ": targets must be i64 class indices, got ", targets.meta());
  MT_CHECK(logits.dim() >= 2, op, ": expected ", what, " [N, C] or [N, C, d...], got ", logits.meta());
  MT_CHECK(logits.size(1) > 0, op, ": ", what, " ", logits.meta(), " have no classes");
  MT_CHECK(targets.shape() == ce_target_shape(logits), op, ": targets ", targets.meta(), " do not match ", what, " ",
           logits.meta(), "; expected targets ", shape_str(ce_target_shape(logits)));
  if (o.weight.defined()) {
    MT_CHECK(o.weight.device() == logits.device(), op, ": weight ", o.weight.meta(), " is on another device than ",
             what, " ", logits.meta());
    MT_CHECK(is_floating(o.weight.dtype()), op, ": weight must be floating, got ", o.weight.meta());
    MT_CHECK(o.weight.dim() == 1 && o.weight.size(0) == logits.size(1), op, ": weight ", o.weight.meta(),
             " must have one entry per class of ", what, " ", logits.meta(), "; expected [", logits.size(1), "]");
  }
  MT_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           o.label_smoothing);
}

Tensor class_loss(bool log_probs, const Tensor& logits, const Tensor& targets, Reduction reduction,
                  const ClassLossOptions& o) {
  const bool reduce = reduction != Reduction::none, mean = reduction == Reduction::mean;
  Tensor out = empty(loss_shape(reduction, targets.shape()), logits.dtype(), logits.device());
  on_device(
      logits.device(),
      [&] {
    cpu::cross_entropy(logits, targets, o.weight, o.ignore_index, o.label_smoothing, log_probs, reduce, mean, out);
      },
      [&] {
    cuda::cross_entropy(logits, targets, o.weight, o.ignore_index, o.label_smoothing, log_probs, reduce, mean, out);
  });
  return out;
}

Tensor class_loss_backward(bool log_probs, const Tensor& logits, const Tensor& targets, const Tensor& dy,
                           Reduction reduction, const ClassLossOptions& o) {
  const bool reduce = reduction != Reduction::none, mean = reduction == Reduction::mean;
  Tensor dx = empty(logits.shape(), logits.dtype(), logits.device());
  on_device(
      logits.device(),
      [&] {
    cpu::cross_entropy_backward(logits, targets, o.weight, o.ignore_index, o.label_smoothing, log_probs, dy, reduce,
                                mean, dx);
      },
      [&] {
    cuda::cross_entropy_backward(logits, targets, o.weight, o.ignore_index, o.label_smoothing, log_probs, dy, reduce,
                                 mean, dx);
  });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim) {
  return softmax_backward_impl(y, dy, dim, false);
}
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim) {
  return softmax_backward_impl(y, dy, dim, true);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction,
                     const ClassLossOptions& options) {
  check_class_loss("cross_entropy", "logits", logits, targets, options);
  return class_loss(false, logits, targets, reduction, options);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy, Reduction reduction,
                              const ClassLossOptions& options) {
  check_class_loss("cross_entropy", "logits", logits, targets, options);
  check_loss_grad("cross_entropy", dy, reduction, targets.shape(), logits);
  return class_loss_backward(false, logits, targets, dy, reduction, options);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction, const ClassLossOptions& options) {
  check_class_loss("nll_loss", "input", log_probs, targets, options);
  MT_CHECK(options.label_smoothing == 0.0, "nll_loss: label_smoothing is cross_entropy's option, got ",
           options.label_smoothing);
  return class_loss(true, log_probs, targets, reduction, options);
}

Tensor nll_loss_backward(const Tensor& log_probs, const Tensor& targets, const Tensor& dy, Reduction reduction,
                         const ClassLossOptions& options) {
  check_class_loss("nll_loss", "input", log_probs, targets, options);
  check_loss_grad("nll_loss", dy, reduction, targets.shape(), log_probs);
  return class_loss_backward(true, log_probs, targets, dy, reduction, options);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, Reduction reduction) {
  const char* name = "binary_cross_entropy_with_logits";
  check_pair(name, logits, targets, "logits", "targets");
  const ReduceArgs ra = reduce_args(reduction, logits.numel());
  Tensor out = empty(loss_shape(reduction, logits.shape()), logits.dtype(), logits.device());
  on_device(
      logits.device(), [&] { cpu::bce_with_logits(logits, targets, ra.reduce, ra.divisor, out); },
      [&] { cuda::bce_with_logits(logits, targets, ra.reduce, ra.divisor, out); });
  return out;
}

LossGrads binary_cross_entropy_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy,
                                                    Reduction reduction, bool need_dlogits, bool need_dtargets) {
  const char* name = "binary_cross_entropy_with_logits";
  check_pair(name, logits, targets, "logits", "targets");
  check_loss_grad(name, dy, reduction, logits.shape(), logits);
  const ReduceArgs ra = reduce_args(reduction, logits.numel());
  LossGrads g;
  if (need_dlogits) g.da = empty(logits.shape(), logits.dtype(), logits.device());
  if (need_dtargets) g.db = empty(logits.shape(), logits.dtype(), logits.device());
  on_device(
      logits.device(), [&] { cpu::bce_with_logits_backward(logits, targets, dy, ra.reduce, ra.divisor, g.da, g.db); },
      [&] { cuda::bce_with_logits_backward(logits, targets, dy, ra.reduce, ra.divisor, g.da, g.db); });
  return g;
}

namespace {

// The pointwise two-input losses share their checks and allocation; kernel(out) and
// kernel_backward(da, db) call the device's kernels with the reduce arguments.
template <class K>
Tensor pointwise(const char* op, const char* what_a, const Tensor& a, const Tensor& b, Reduction r, K&& kernel) {
  check_pair(op, a, b, what_a, "target");
  const ReduceArgs ra = reduce_args(r, a.numel());
  Tensor out = empty(loss_shape(r, a.shape()), a.dtype(), a.device());
  kernel(ra, out);
  return out;
}

template <class K>
LossGrads pointwise_backward(const char* op, const char* what_a, const Tensor& a, const Tensor& b, const Tensor& dy,
                             Reduction r, bool need_da, bool need_db, K&& kernel) {
  check_pair(op, a, b, what_a, "target");
  check_loss_grad(op, dy, r, a.shape(), a);
  const ReduceArgs ra = reduce_args(r, a.numel());
  LossGrads g;
  if (need_da) g.da = empty(a.shape(), a.dtype(), a.device());
  if (need_db) g.db = empty(a.shape(), a.dtype(), a.device());
  kernel(ra, g);
  return g;
}

void check_beta(double beta) {
  MT_CHECK(beta >= 0.0 && std::isfinite(beta), "smooth_l1_loss: beta must be finite and >= 0, got ", beta);
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& targets, Reduction reduction) {
  return pointwise("binary_cross_entropy", "probs", probs, targets, reduction, [&](ReduceArgs ra, const Tensor& out) {
    on_device(
        probs.device(), [&] { cpu::bce(probs, targets, ra.reduce, ra.divisor, out); },
        [&] { cuda::bce(probs, targets, ra.reduce, ra.divisor, out); });
  });
}

LossGrads binary_cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dy,
                                        Reduction reduction, bool need_dprobs, bool need_dtargets) {
  return pointwise_backward("binary_cross_entropy", "probs", probs, targets, dy, reduction, need_dprobs, need_dtargets,
                            [&](ReduceArgs ra, LossGrads& g) {
    on_device(
        probs.device(), [&] { cpu::bce_backward(probs, targets, dy, ra.reduce, ra.divisor, g.da, g.db); },
        [&] { cuda::bce_backward(probs, targets, dy, ra.reduce, ra.divisor, g.da, g.db); });
  });
}

Tensor l1_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  return pointwise("l1_loss", "input", a, b, reduction, [&](ReduceArgs ra, const Tensor& out) {
    on_device(
        a.device(), [&] { cpu::l1_loss(a, b, ra.reduce, ra.divisor, out); },
        [&] { cuda::l1_loss(a, b, ra.reduce, ra.divisor, out); });
  });
}

LossGrads l1_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, bool need_da,
                           bool need_db) {
  return pointwise_backward("l1_loss", "input", a, b, dy, reduction, need_da, need_db,
                            [&](ReduceArgs ra, LossGrads& g) {
    on_device(
        a.device(), [&] { cpu::l1_loss_backward(a, b, dy, ra.reduce, ra.divisor, g.da, g.db); },
        [&] { cuda::l1_loss_backward(a, b, dy, ra.reduce, ra.divisor, g.da, g.db); });
  });
}

Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, Reduction reduction, double beta) {
  check_beta(beta);
  return pointwise("smooth_l1_loss", "input", a, b, reduction, [&](ReduceArgs ra, const Tensor& out) {
    on_device(
        a.device(), [&] { cpu::smooth_l1_loss(a, b, beta, ra.reduce, ra.divisor, out); },
        [&] { cuda::smooth_l1_loss(a, b, beta, ra.reduce, ra.divisor, out); });
  });
}

LossGrads smooth_l1_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, double beta,
                                  bool need_da, bool need_db) {
  check_beta(beta);
  return pointwise_backward("smooth_l1_loss", "input", a, b, dy, reduction, need_da, need_db,
                            [&](ReduceArgs ra, LossGrads& g) {
    on_device(
        a.device(), [&] { cpu::smooth_l1_loss_backward(a, b, beta, dy, ra.reduce, ra.divisor, g.da, g.db); },
        [&] { cuda::smooth_l1_loss_backward(a, b, beta, dy, ra.reduce, ra.divisor, g.da, g.db); });
  });
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  check_pair("mse_loss", a, b, "input", "target");
  const ReduceArgs ra = reduce_args(reduction, a.numel());
  Tensor out = empty(loss_shape(reduction, a.shape()), a.dtype(), a.device());
  on_device(
      a.device(), [&] { cpu::mse_loss(a, b, ra.reduce, ra.divisor, out); },
      [&] { cuda::mse_loss(a, b, ra.reduce, ra.divisor, out); });
  return out;
}

LossGrads mse_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, bool need_da,
                            bool need_db) {
  check_pair("mse_loss", a, b, "input", "target");
  check_loss_grad("mse_loss", dy, reduction, a.shape(), a);
  const ReduceArgs ra = reduce_args(reduction, a.numel());
  LossGrads g;
  if (need_da) g.da = empty(a.shape(), a.dtype(), a.device());
  if (need_db) g.db = empty(a.shape(), a.dtype(), a.device());
  on_device(
      a.device(), [&] { cpu::mse_loss_backward(a, b, dy, ra.reduce, ra.divisor, g.da, g.db); },
      [&] { cuda::mse_loss_backward(a, b, dy, ra.reduce, ra.divisor, g.da, g.db); });
  return g;
}

}  // namespace mixtape
