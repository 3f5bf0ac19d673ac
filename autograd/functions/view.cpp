#include "autograd/functions/view.h"

#include "autograd/tape.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

Variable reshape(const Variable& x, Shape shape) {
  const Shape xshape = x.shape();
  return record(OpId::reshape, {x}, x.data().reshape(std::move(shape)),
                [xshape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy[0].reshape(xshape)};
  });
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  return record(OpId::transpose, {x}, x.data().transpose(d0, d1),
                [d0, d1](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy[0].transpose(d0, d1)};
  });
}

Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  Tensor y = x.data().permute(dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[size_t(wrap_dim(dims[i], x.dim(), "permute"))] = int64_t(i);
  return record(OpId::permute, {x}, y, [inverse](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{dy[0].permute(inverse)};
  });
}

Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor y = x.data().slice(dim, start, end, step);
  const Shape xshape = x.shape();
  return record(OpId::slice, {x}, y,
                [xshape, dim, start, end, step](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    // Scatter dy into zeros of x's shape.
    Tensor dx = zeros(xshape, dy[0].dtype(), dy[0].device());
    dx.slice(dim, start, end, step).copy_(dy[0]);
    return std::vector<Tensor>{dx};
  });
}

Variable expand(const Variable& x, Shape shape) {
  const Shape xshape = x.shape();
  return record(OpId::expand, {x}, x.data().expand(std::move(shape)),
                [xshape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{sum_to(dy[0], xshape)};
  });
}

Variable contiguous(const Variable& x) {
  if (x.data().is_contiguous()) return x;
  return record(OpId::contiguous, {x}, x.data().contiguous(),
                [](const std::vector<Tensor>& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy[0]}; });
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  const int64_t n = x.size(dim);
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
           ") is out of bounds for dim ", dim, " of ", x.data().meta());
  return slice(x, dim, start, start + length);
}

Variable select(const Variable& x, int64_t dim, int64_t index) {
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.size(d);
  if (index < 0) index += n;
  MT_CHECK(index >= 0 && index < n, "select: index ", index, " out of range for dim ", d, " of ", x.data().meta());
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return reshape(slice(x, d, index, index + 1), s);
}

Variable flatten(const Variable& x, int64_t start_dim, int64_t end_dim) {
  return reshape(x, x.data().flatten(start_dim, end_dim).shape());
}

Variable unsqueeze(const Variable& x, int64_t dim) { return reshape(x, x.data().unsqueeze(dim).shape()); }
Variable squeeze(const Variable& x, int64_t dim) { return reshape(x, x.data().squeeze(dim).shape()); }

}  // namespace mixtape
