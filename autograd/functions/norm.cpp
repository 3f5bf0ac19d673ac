#include "autograd/functions/norm.h"

#include "autograd/tape.h"
#include "tensor/ops/norm.h"

namespace mixtape {

namespace {

Tensor data_or_none(const Variable& v) { return v.defined() ? v.data() : Tensor(); }

DType param_dtype_of(const Tensor& w, const Tensor& b, const Tensor& x) {
  return w.defined() ? w.dtype() : b.defined() ? b.dtype() : x.dtype();
}

}  // namespace

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps) {
  const Tensor w = data_or_none(weight), b = data_or_none(bias);
  NormOutput r = layer_norm_forward(x.data(), normalized_shape, w, b, eps);
  // Saved: the input, the weight (dx scales by it) and the statistics that normalized.
  return record(OpId::layer_norm, {x, weight, bias}, r.y,
                [xs = x.data(), normalized_shape, w, mean = r.mean, invstd = r.invstd,
                 pd = param_dtype_of(w, b, x.data())](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    NormGrads g = layer_norm_backward(dy[0], xs, normalized_shape, w, mean, invstd, needs[0], needs[1], needs[2], pd);
    return std::vector<Tensor>{g.dx, g.dweight, g.dbias};
  });
}

Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias, double eps) {
  const Tensor w = data_or_none(weight), b = data_or_none(bias);
  NormOutput r = group_norm_forward(x.data(), num_groups, w, b, eps);
  return record(OpId::group_norm, {x, weight, bias}, r.y,
                [xs = x.data(), num_groups, w, mean = r.mean, invstd = r.invstd, pd = param_dtype_of(w, b, x.data())](
                    const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    NormGrads g = group_norm_backward(dy[0], xs, num_groups, w, mean, invstd, needs[0], needs[1], needs[2], pd);
    return std::vector<Tensor>{g.dx, g.dweight, g.dbias};
  });
}

}  // namespace mixtape
