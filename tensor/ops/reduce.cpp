#include "tensor/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/backend.h"
#include "tensor/cpu/reduce.h"
#include "tensor/ops/common.h"

namespace mixtape {

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  MT_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": repeated dim in ", shape_str(dims));
  return out;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims) {
  Shape r = s;
  for (int64_t d : dims) r[size_t(d)] = 1;
  return r;
}

namespace {
Shape drop_dims(const Shape& s, const std::vector<int64_t>& dims) {
  Shape r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) r.push_back(s[size_t(d)]);
  return r;
}
}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  const char* name = reduce_op_name(op);
  ops::check_same(name, {&x});
  ops::check_floating(name, x);
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), name);
  if (op == ReduceOp::max || op == ReduceOp::amax || op == ReduceOp::min)
    for (int64_t d : dims)
      MT_CHECK(x.shape()[size_t(d)] > 0, name, ": cannot take the ", op == ReduceOp::min ? "minimum" : "maximum",
               " over empty dim ", d, " of ", x.meta());
  Tensor out = empty(reduced_shape(x.shape(), dims), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::reduce(op, x, dims, out); }, [&] { cuda::reduce(op, x, dims, out); });
  return keepdim ? out : out.view(drop_dims(x.shape(), dims));
}

Tensor reduce_backward(ReduceOp op, const Shape& x_shape, const Tensor& x_in, const Tensor& y_in, const Tensor& dy,
                       const std::vector<int64_t>& dims_in) {
  const char* name = reduce_op_name(op);
  const std::vector<int64_t> dims = normalize_dims(dims_in, int64_t(x_shape.size()), name);
  const Shape kshape = reduced_shape(x_shape, dims);
  MT_CHECK(op == ReduceOp::sum || op == ReduceOp::mean || (x_in.defined() && y_in.defined()), name,
           " backward: needs the input and the output of the forward");
  const Tensor dyk = dy.reshape(kshape);
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  // sum and mean read neither x nor y: stand-ins keep a single kernel signature.
  const Tensor x = x_in.defined() ? x_in : dx;
  const Tensor yk = y_in.defined() ? y_in.reshape(kshape) : dyk;
  MT_CHECK(x.shape() == x_shape, name, " backward: input ", x.meta(), " is not ", shape_str(x_shape));
  ops::check_same(name, {&x, &yk, &dyk, &dx});
  on_device(
      x.device(), [&] { cpu::reduce_backward(op, x, yk, dyk, dims, dx); },
      [&] { cuda::reduce_backward(op, x, yk, dyk, dims, dx); });
  return dx;
}

namespace {

Tensor arg_reduce(bool largest, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* name = largest ? "argmax" : "argmin";
  ops::check_same(name, {&x});
  ops::check_floating(name, x);
  const std::vector<int64_t> dims = dim ? normalize_dims({*dim}, x.dim(), name) : normalize_dims({}, x.dim(), name);
  MT_CHECK(x.numel() > 0, name, ": cannot reduce the empty tensor ", x.meta(), dim ? " over dim " : "",
           dim ? std::to_string(*dim) : std::string());
  Tensor out = empty(reduced_shape(x.shape(), dims), DType::i64, x.device());
  on_device(
      x.device(), [&] { cpu::arg_reduce(largest, x, dims, out); }, [&] { cuda::arg_reduce(largest, x, dims, out); });
  return keepdim ? out : out.view(drop_dims(x.shape(), dims));
}

Tensor variance(bool take_sqrt, const Tensor& x, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  const char* name = take_sqrt ? "std" : "var";
  ops::check_same(name, {&x});
  ops::check_floating(name, x);
  MT_CHECK(std::isfinite(correction) && correction >= 0.0, name, ": correction must be finite and >= 0, got ",
           correction, " (input ", x.meta(), ")");
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), name);
  Tensor out = empty(reduced_shape(x.shape(), dims), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::var(x, dims, correction, take_sqrt, out); },
      [&] { cuda::var(x, dims, correction, take_sqrt, out); });
  return keepdim ? out : out.view(drop_dims(x.shape(), dims));
}

}  // namespace

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_reduce(true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_reduce(false, x, dim, keepdim); }

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return variance(false, x, dims, correction, keepdim);
}
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return variance(true, x, dims, correction, keepdim);
}

Tensor var_backward(const Tensor& x, const Tensor& y_in, const Tensor& dy, const std::vector<int64_t>& dims_in,
                    double correction, bool take_sqrt) {
  const char* name = take_sqrt ? "std backward" : "var backward";
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), name);
  const Shape kshape = reduced_shape(x.shape(), dims);
  MT_CHECK(dy.numel() == numel_of(kshape), name, ": gradient ", dy.meta(), " does not fit input ", x.meta());
  const Tensor dyk = dy.reshape(kshape);
  const Tensor yk = y_in.defined() ? y_in.reshape(kshape) : dyk;  // var does not read y
  ops::check_same(name, {&x, &yk, &dyk});
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::var_backward(x, yk, dyk, dims, correction, take_sqrt, dx); },
      [&] { cuda::var_backward(x, yk, dyk, dims, correction, take_sqrt, dx); });
  return dx;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  MT_CHECK(int64_t(shape.size()) <= g.dim(), "sum_to: cannot sum ", g.meta(), " to ", shape_str(shape));
  const size_t lead = size_t(g.dim()) - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < size_t(g.dim()); ++d) {
    if (d < lead) dims.push_back(int64_t(d));
    else if (shape[d - lead] == 1 && g.shape()[d] != 1) dims.push_back(int64_t(d));
    else MT_CHECK(shape[d - lead] == g.shape()[d], "sum_to: cannot sum ", g.meta(), " to ", shape_str(shape));
  }
  if (dims.empty()) return g.reshape(shape);
  return reduce(ReduceOp::sum, g, dims, true).reshape(shape);
}

double max_abs(const Tensor& x) {
  ops::check_same("max_abs", {&x});
  return on_device(
      x.device(), [&] { return cpu::max_abs(x); }, [&] { return cuda::max_abs(x); });
}

}  // namespace mixtape
