#include "autograd/functions/pool.h"

#include "autograd/tape.h"

namespace mixtape {

Variable max_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding) {
  // The forward's argmax indices (i64, one per output) are saved rather than recomputed: backward
  // then reads neither x nor the windows again, and ties resolve exactly as in the forward.
  PoolWithIndices r = max_pool2d_with_indices(x.data(), kernel, stride, padding);
  const Tensor indices = r.indices;
  const Shape xs = x.shape();
  return record(OpId::max_pool2d, {x}, r.out, [indices, xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{max_pool2d_backward(dy[0], indices, xs)};
  });
}

Variable max_pool2d(const Variable& x, Size2 kernel) { return max_pool2d(x, kernel, kernel, 0); }

Variable avg_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding) {
  const Shape xs = x.shape();
  return record(OpId::avg_pool2d, {x}, mixtape::avg_pool2d(x.data(), kernel, stride, padding),
                [xs, kernel, stride, padding](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{avg_pool2d_backward(dy[0], xs, kernel, stride, padding)};
  });
}

Variable avg_pool2d(const Variable& x, Size2 kernel) { return avg_pool2d(x, kernel, kernel, 0); }

}  // namespace mixtape
