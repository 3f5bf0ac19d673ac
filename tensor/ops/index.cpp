#include "tensor/ops/index.h"

#include <string>
#include <vector>

#include "cuda/backend.h"
#include "tensor/cpu/index.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == DType::i64, op, ": index must be i64, got ", index.meta());
}

// Throws naming the op, the first bad position and its value when an entry of index lies outside
// [0, x.size(dim)). On a GPU this reads two numbers back (one wait for the stream), as embedding
// does, so a bad index is an exception rather than a wild read.
void check_index_range(const char* op, const Tensor& index, const Tensor& x, int64_t dim) {
  const int64_t size = x.size(dim);
  Tensor fb = empty({2}, DType::i64, index.device());
  on_device(
      index.device(), [&] { cpu::first_bad_index(index, size, fb); }, [&] { cuda::first_bad_index(index, size, fb); });
  const std::vector<int64_t> r = fb.to(Device::cpu()).values<int64_t>();
  MT_CHECK(r[0] >= index.numel(), op, ": index ", r[1], " (at position ", r[0], " of index ", index.meta(),
           ") is out of range for dim ", dim, " of size ", size, " (input ", x.meta(), ")");
}

// index (1 dim or none) viewed with x's number of dims, its entries along `dim`, and expanded to
// `out` along the others (stride 0): index_select as a gather.
Tensor expanded_index(const Tensor& index, int64_t ndim, int64_t dim, const Shape& out) {
  Shape s(size_t(ndim), 1);
  s[size_t(dim)] = index.numel();
  return index.reshape(s).expand(out);
}

Shape with_size(Shape s, int64_t dim, int64_t size) {
  s[size_t(dim)] = size;
  return s;
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  ops::check_same("gather", {&x, &index}, false);
  ops::check_floating("gather", x);
  check_index_dtype("gather", index);
  MT_CHECK(x.dim() >= 1 && index.dim() == x.dim(), "gather: index ", index.meta(), " must have as many dims as input ",
           x.meta(), " (at least one)");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "gather");
  for (int64_t d = 0; d < x.dim(); ++d)
    MT_CHECK(d == dim || index.size(d) <= x.size(d), "gather: index ", index.meta(), " is larger than input ", x.meta(),
             " in dim ", d, " (only dim ", dim, " may differ freely)");
  check_index_range("gather", index, x, dim);
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::gather(x, dim, index, out); }, [&] { cuda::gather(x, dim, index, out); });
  return out;
}

Tensor gather_backward(const Tensor& dy, int64_t dim_in, const Tensor& index, const Shape& x_shape) {
  ops::check_same("gather backward", {&dy, &index}, false);
  ops::check_floating("gather backward", dy);
  check_index_dtype("gather backward", index);
  MT_CHECK(dy.shape() == index.shape() && index.dim() == int64_t(x_shape.size()), "gather backward: gradient ",
           dy.meta(), " does not fit index ", index.meta(), " for input ", shape_str(x_shape));
  const int64_t dim = wrap_dim(dim_in, index.dim(), "gather backward");
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::gather_backward(dy, dim, index, dx); },
      [&] { cuda::gather_backward(dy, dim, index, dx); });
  return dx;
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  ops::check_same("index_select", {&x, &index}, false);
  ops::check_floating("index_select", x);
  check_index_dtype("index_select", index);
  MT_CHECK(index.dim() <= 1, "index_select: index must have one dim (or none), got ", index.meta());
  MT_CHECK(x.dim() >= 1, "index_select: input must have at least one dim, got ", x.meta());
  const int64_t dim = wrap_dim(dim_in, x.dim(), "index_select");
  check_index_range("index_select", index, x, dim);
  const Shape os = with_size(x.shape(), dim, index.numel());
  const Tensor idx = expanded_index(index, x.dim(), dim, os);
  Tensor out = empty(os, x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::gather(x, dim, idx, out); }, [&] { cuda::gather(x, dim, idx, out); });
  return out;
}

Tensor index_select_backward(const Tensor& dy, int64_t dim_in, const Tensor& index, const Shape& x_shape) {
  ops::check_same("index_select backward", {&dy, &index}, false);
  check_index_dtype("index_select backward", index);
  MT_CHECK(index.dim() <= 1 && !x_shape.empty(), "index_select backward: index ", index.meta(), " or input shape ",
           shape_str(x_shape), " is not an index_select's");
  const int64_t dim = wrap_dim(dim_in, int64_t(x_shape.size()), "index_select backward");
  const Shape os = with_size(x_shape, dim, index.numel());
  MT_CHECK(dy.shape() == os, "index_select backward: gradient ", dy.meta(), " is not ", shape_str(os));
  return gather_backward(dy, dim, expanded_index(index, dy.dim(), dim, os), x_shape);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_same("where", {&cond, &a, &b}, false);
  ops::check_same("where", {&a, &b});
  ops::check_floating("where", a);
  const Shape os = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(os, a.dtype(), a.device());
  const Tensor c = cond.expand(os), ea = a.expand(os), eb = b.expand(os);
  on_device(
      out.device(), [&] { cpu::where(c, ea, eb, out); }, [&] { cuda::where(c, ea, eb, out); });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops::check_same("masked_fill", {&x, &mask}, false);
  ops::check_floating("masked_fill", x);
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");  // throws naming the op
  return where(mask, full({}, value, x.dtype(), x.device()), x);
}

}  // namespace mixtape
