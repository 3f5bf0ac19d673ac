#include "tensor/ops/loss.h"

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

void check_cross_entropy(const Tensor& logits, const Tensor& targets) {
  ops::check_same("cross_entropy", {&logits, &targets}, false);
  ops::check_floating("cross_entropy", logits);
  MT_CHECK(targets.dtype() == DType::i64, "cross_entropy: targets must be i64 class indices, got ", targets.meta());
  MT_CHECK(logits.dim() >= 2, "cross_entropy: expected logits [N, C] or [N, C, d...], got ", logits.meta());
  MT_CHECK(logits.size(1) > 0, "cross_entropy: logits ", logits.meta(), " have no classes");
  MT_CHECK(targets.shape() == ce_target_shape(logits), "cross_entropy: targets ", targets.meta(),
           " do not match logits ", logits.meta(), "; expected targets ", shape_str(ce_target_shape(logits)));
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

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction) {
  check_cross_entropy(logits, targets);
  const ReduceArgs ra = reduce_args(reduction, targets.numel());
  Tensor out = empty(loss_shape(reduction, targets.shape()), logits.dtype(), logits.device());
  on_device(
      logits.device(), [&] { cpu::cross_entropy(logits, targets, ra.reduce, ra.divisor, out); },
      [&] { cuda::cross_entropy(logits, targets, ra.reduce, ra.divisor, out); });
  return out;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy, Reduction reduction) {
  check_cross_entropy(logits, targets);
  check_loss_grad("cross_entropy", dy, reduction, targets.shape(), logits);
  const ReduceArgs ra = reduce_args(reduction, targets.numel());
  Tensor dx = empty(logits.shape(), logits.dtype(), logits.device());
  on_device(
      logits.device(), [&] { cpu::cross_entropy_backward(logits, targets, dy, ra.reduce, ra.divisor, dx); },
      [&] { cuda::cross_entropy_backward(logits, targets, dy, ra.reduce, ra.divisor, dx); });
  return dx;
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
