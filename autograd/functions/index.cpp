#include "autograd/functions/index.h"

#include "autograd/tape.h"
#include "tensor/ops/index.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

// Scale rule (every node here): pass-through; the backward selects or adds dy, linear in dy.

Variable gather(const Variable& x, int64_t dim, const Tensor& index) {
  Tensor y = mixtape::gather(x.data(), dim, index);  // validates
  const Shape xs = x.shape();
  return record(OpId::gather, {x}, y, [dim, index, xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{gather_backward(dy[0], dim, index, xs)};
  });
}

Variable index_select(const Variable& x, int64_t dim, const Tensor& index) {
  Tensor y = mixtape::index_select(x.data(), dim, index);  // validates
  const Shape xs = x.shape();
  return record(OpId::index_select, {x}, y, [dim, index, xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{index_select_backward(dy[0], dim, index, xs)};
  });
}

Variable where(const Tensor& cond, const Variable& a, const Variable& b) {
  Tensor y = mixtape::where(cond, a.data(), b.data());  // validates
  const Shape as = a.shape(), bs = b.shape();
  return record(OpId::where, {a, b}, y, [cond, as, bs](const std::vector<Tensor>& dys, const std::vector<bool>& needs) {
    const Tensor& dy = dys[0];
    const Tensor zero = zeros({}, dy.dtype(), dy.device());
    Tensor da, db;
    if (needs[0]) da = sum_to(mixtape::where(cond, dy, zero), as);
    if (needs[1]) db = sum_to(mixtape::where(cond, zero, dy), bs);
    return std::vector<Tensor>{da, db};
  });
}

Variable masked_fill(const Variable& x, const Tensor& mask, double value) {
  Tensor y = mixtape::masked_fill(x.data(), mask, value);  // validates
  const Shape xs = x.shape();
  return record(OpId::masked_fill, {x}, y, [mask, xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    const Tensor zero = zeros({}, dy[0].dtype(), dy[0].device());
    return std::vector<Tensor>{sum_to(mixtape::where(mask, zero, dy[0]), xs)};
  });
}

}  // namespace mixtape
