#include "tensor/ops/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "cuda/backend.h"
#include "tensor/cpu/batch_norm.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// The dtype of batch-norm statistics: fp32, or f64 for f64 inputs (the gradient checks).
DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// A per-channel [C] tensor of batch_norm (optional when `optional`).
void check_channel_vec(const Tensor& t, const Tensor& x, const char* what, bool optional) {
  if (!t.defined()) {
    MT_CHECK(optional, "batch_norm: ", what, " is required (input ", x.meta(), ")");
    return;
  }
  MT_CHECK(t.device() == x.device(), "batch_norm: ", what, " ", t.meta(), " is on another device than input ",
           x.meta());
  MT_CHECK(is_floating(t.dtype()), "batch_norm: ", what, " must be floating, got ", t.meta());
  MT_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm: ", what, " ", t.meta(), " does not match the ",
           x.size(1), " channels (dim 1) of input ", x.meta(), "; expected [", x.size(1), "]");
}

}  // namespace

BatchNormOutput batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, bool training,
                                   double momentum, double eps, const Tensor& cumulative_count) {
  ops::check_same("batch_norm", {&x});
  ops::check_floating("batch_norm", x);
  MT_CHECK(x.dim() >= 2, "batch_norm: expected input [N, C, ...] with at least 2 dims, got ", x.meta());
  check_channel_vec(weight, x, "weight", true);
  check_channel_vec(bias, x, "bias", true);
  check_channel_vec(running_mean, x, "running_mean", training);
  check_channel_vec(running_var, x, "running_var", training);
  MT_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must be given together");
  if (weight.defined() && bias.defined())
    MT_CHECK(weight.dtype() == bias.dtype(), "batch_norm: weight ", weight.meta(), " and bias ", bias.meta(),
             " must share a dtype");
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      MT_CHECK(p->dtype() == x.dtype() || p->dtype() == DType::f32, "batch_norm: parameters ", p->meta(),
               " must have the input's dtype or f32 (input ", x.meta(), ")");
  MT_CHECK(eps >= 0.0 && std::isfinite(eps), "batch_norm: eps must be finite and >= 0, got ", eps);
  MT_CHECK(momentum >= 0.0 && momentum <= 1.0, "batch_norm: momentum must be in [0, 1], got ", momentum);
  if (cumulative_count.defined())
    MT_CHECK(cumulative_count.dtype() == DType::i64 && cumulative_count.numel() == 1 &&
                 cumulative_count.device() == x.device(),
             "batch_norm: cumulative_count must be a one-element i64 counter on the input's device, got ",
             cumulative_count.meta(), " (input ", x.meta(), ")");
  if (training) {
    const int64_t per_channel = x.numel() / std::max<int64_t>(1, x.size(1));
    MT_CHECK(per_channel > 1, "batch_norm: training needs more than one value per channel, got input ", x.meta());
  }

  const int64_t C = x.size(1);
  BatchNormOutput r;
  r.y = empty(x.shape(), x.dtype(), x.device());
  r.mean = empty({C}, stats_dtype(x.dtype()), x.device());
  r.invstd = empty({C}, stats_dtype(x.dtype()), x.device());
  Tensor rm = running_mean, rv = running_var;  // updated in place in training mode
  on_device(
      x.device(),
      [&] {
    cpu::batch_norm_forward(x, weight, bias, rm, rv, training, momentum, eps, cumulative_count, r.y, r.mean, r.invstd);
      },
      [&] {
    cuda::batch_norm_forward(x, weight, bias, rm, rv, training, momentum, eps, cumulative_count, r.y, r.mean, r.invstd);
  });
  return r;
}

BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, bool need_dx, bool need_dweight,
                                   bool need_dbias, DType param_dtype) {
  ops::check_same("batch_norm backward", {&dy, &x});
  ops::check_same("batch_norm backward", {&mean, &invstd});
  MT_CHECK(dy.shape() == x.shape(), "batch_norm backward: gradient ", dy.meta(), " does not match input ", x.meta());
  MT_CHECK(x.dim() >= 2 && mean.dtype() == stats_dtype(x.dtype()) && mean.shape() == Shape{x.size(1)} &&
               invstd.shape() == mean.shape(),
           "batch_norm backward: saved statistics ", mean.meta(), " / ", invstd.meta(), " do not fit input ", x.meta());
  if (weight.defined()) check_channel_vec(weight, x, "weight", true);
  const int64_t C = x.size(1);
  BatchNormGrads g;
  if (need_dx) g.dx = empty(x.shape(), x.dtype(), x.device());
  if (need_dweight) g.dweight = empty({C}, param_dtype, x.device());
  if (need_dbias) g.dbias = empty({C}, param_dtype, x.device());
  on_device(
      x.device(), [&] { cpu::batch_norm_backward(dy, x, weight, mean, invstd, training, g.dx, g.dweight, g.dbias); },
      [&] { cuda::batch_norm_backward(dy, x, weight, mean, invstd, training, g.dx, g.dweight, g.dbias); });
  return g;
}

}  // namespace mixtape
