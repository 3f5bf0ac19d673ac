#include "tensor/ops/norm.h"

#include <cmath>

#include "cuda/backend.h"
#include "tensor/cpu/norm.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// x as the kernels see it (tensor/cpu/norm.h): [rows, channels, inner] in groups, the shape of
// one group's statistics, and the shape of the affine parameters.
struct NormLayout {
  const char* op;
  int64_t channels, inner, groups;
  Shape stats_shape, param_shape;
};

NormLayout layer_norm_layout(const Tensor& x, const Shape& normalized_shape) {
  const char* op = "layer_norm";
  const int64_t k = int64_t(normalized_shape.size());
  MT_CHECK(k >= 1, op, ": normalized_shape must have at least one dim (input ", x.meta(), ")");
  bool match = x.dim() >= k;
  for (int64_t d = 0; match && d < k; ++d) match = x.size(x.dim() - k + d) == normalized_shape[size_t(d)];
  MT_CHECK(match, op, ": the last ", k, " dims of input ", x.meta(), " must equal normalized_shape ",
           shape_str(normalized_shape));
  const int64_t C = numel_of(normalized_shape);
  MT_CHECK(C > 0, op, ": normalized_shape ", shape_str(normalized_shape), " has no elements");
  Shape stats(x.shape().begin(), x.shape().end() - k);
  return {op, C, 1, 1, stats, normalized_shape};
}

NormLayout group_norm_layout(const Tensor& x, int64_t num_groups) {
  const char* op = "group_norm";
  MT_CHECK(x.dim() >= 2, op, ": expected input [N, C, ...] with at least 2 dims, got ", x.meta());
  const int64_t C = x.size(1);
  MT_CHECK(num_groups > 0 && C % num_groups == 0, op, ": the ", C, " channels of input ", x.meta(),
           " must split into num_groups = ", num_groups, " equal groups");
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
  MT_CHECK(inner > 0, op, ": input ", x.meta(), " has no positions per channel");
  return {op, C, inner, num_groups, Shape{x.size(0), num_groups}, Shape{C}};
}

// The statistics dtype: fp32, or f64 for f64 inputs (the gradient checks).
DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

void check_param(const NormLayout& l, const Tensor& p, const Tensor& x, const char* what) {
  if (!p.defined()) return;
  MT_CHECK(p.device() == x.device(), l.op, ": ", what, " ", p.meta(), " is on another device than input ", x.meta());
  MT_CHECK(is_floating(p.dtype()), l.op, ": ", what, " must be floating, got ", p.meta());
  MT_CHECK(p.dtype() == x.dtype() || p.dtype() == DType::f32, l.op, ": ", what, " ", p.meta(),
           " must have the input's dtype or f32 (input ", x.meta(), ")");
  MT_CHECK(p.shape() == l.param_shape, l.op, ": ", what, " ", p.meta(), " does not fit input ", x.meta(), "; expected ",
           shape_str(l.param_shape));
}

// A parameter as the kernels read it: 1-D [C] (any stride), or undefined.
Tensor flat_param(const Tensor& p, int64_t C) { return p.defined() ? p.reshape({C}) : Tensor(); }

NormOutput norm_forward(const NormLayout& l, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_param(l, weight, x, "weight");
  check_param(l, bias, x, "bias");
  if (weight.defined() && bias.defined())
    MT_CHECK(weight.dtype() == bias.dtype(), l.op, ": weight ", weight.meta(), " and bias ", bias.meta(),
             " must share a dtype");
  MT_CHECK(eps >= 0.0 && std::isfinite(eps), l.op, ": eps must be finite and >= 0, got ", eps);
  const Tensor xc = x.contiguous();
  NormOutput r;
  r.y = empty(x.shape(), x.dtype(), x.device());
  r.mean = empty(l.stats_shape, stats_dtype(x.dtype()), x.device());
  r.invstd = empty(l.stats_shape, stats_dtype(x.dtype()), x.device());
  const Tensor w = flat_param(weight, l.channels), b = flat_param(bias, l.channels);
  if (x.numel() == 0) return r;
  on_device(
      x.device(), [&] { cpu::group_norm_forward(xc, l.channels, l.inner, l.groups, w, b, eps, r.y, r.mean, r.invstd); },
      [&] { cuda::group_norm_forward(xc, l.channels, l.inner, l.groups, w, b, eps, r.y, r.mean, r.invstd); });
  return r;
}

NormGrads norm_backward(const NormLayout& l, const Tensor& dy, const Tensor& x, const Tensor& weight,
                        const Tensor& mean, const Tensor& invstd, bool need_dx, bool need_dweight, bool need_dbias,
                        DType param_dtype) {
  const std::string name = std::string(l.op) + " backward";
  ops::check_same(name.c_str(), {&dy, &x});
  ops::check_same(name.c_str(), {&mean, &invstd});
  MT_CHECK(dy.shape() == x.shape(), name, ": gradient ", dy.meta(), " does not match input ", x.meta());
  MT_CHECK(mean.dtype() == stats_dtype(x.dtype()) && mean.shape() == l.stats_shape && invstd.shape() == mean.shape() &&
               mean.is_contiguous() && invstd.is_contiguous(),
           name, ": saved statistics ", mean.meta(), " / ", invstd.meta(), " do not fit input ", x.meta());
  check_param(l, weight, x, "weight");
  MT_CHECK(is_floating(param_dtype), name, ": parameter gradients must be floating, got ", dtype_name(param_dtype));
  NormGrads g;
  if (need_dx) g.dx = empty(x.shape(), x.dtype(), x.device());
  if (need_dweight) g.dweight = empty({l.channels}, param_dtype, x.device());
  if (need_dbias) g.dbias = empty({l.channels}, param_dtype, x.device());
  if (x.numel() == 0) {  // no element: the parameter gradients are empty sums
    if (need_dweight) g.dweight = zeros({l.channels}, param_dtype, x.device());
    if (need_dbias) g.dbias = zeros({l.channels}, param_dtype, x.device());
  } else if (need_dx || need_dweight || need_dbias) {
    const Tensor xc = x.contiguous(), dyc = dy.contiguous(), w = flat_param(weight, l.channels);
    on_device(
        x.device(),
        [&] {
      cpu::group_norm_backward(dyc, xc, l.channels, l.inner, l.groups, w, mean, invstd, g.dx, g.dweight, g.dbias);
        },
        [&] {
      cuda::group_norm_backward(dyc, xc, l.channels, l.inner, l.groups, w, mean, invstd, g.dx, g.dweight, g.dbias);
    });
  }
  if (need_dweight) g.dweight = g.dweight.view(l.param_shape);
  if (need_dbias) g.dbias = g.dbias.view(l.param_shape);
  return g;
}

}  // namespace

NormOutput layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                              double eps) {
  ops::check_same("layer_norm", {&x});
  ops::check_floating("layer_norm", x);
  return norm_forward(layer_norm_layout(x, normalized_shape), x, weight, bias, eps);
}

NormOutput group_norm_forward(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                              double eps) {
  ops::check_same("group_norm", {&x});
  ops::check_floating("group_norm", x);
  return norm_forward(group_norm_layout(x, num_groups), x, weight, bias, eps);
}

NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                              const Tensor& mean, const Tensor& invstd, bool need_dx, bool need_dweight,
                              bool need_dbias, DType param_dtype) {
  return norm_backward(layer_norm_layout(x, normalized_shape), dy, x, weight, mean, invstd, need_dx, need_dweight,
                       need_dbias, param_dtype);
}

NormGrads group_norm_backward(const Tensor& dy, const Tensor& x, int64_t num_groups, const Tensor& weight,
                              const Tensor& mean, const Tensor& invstd, bool need_dx, bool need_dweight,
                              bool need_dbias, DType param_dtype) {
  return norm_backward(group_norm_layout(x, num_groups), dy, x, weight, mean, invstd, need_dx, need_dweight, need_dbias,
                       param_dtype);
}

}  // namespace mixtape
