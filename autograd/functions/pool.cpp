#include "autograd/functions/pool.h"

#include "autograd/tape.h"

namespace mixtape {

Variable max_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation, bool ceil_mode) {
  // The forward's argmax indices (i64, one per output) are saved rather than recomputed: backward
  // then reads neither x nor the windows again, and ties resolve exactly as in the forward.
  PoolWithIndices r = max_pool2d_with_indices(x.data(), kernel, stride, padding, dilation, ceil_mode);
  const Tensor indices = r.indices;
  const Shape xs = x.shape();
  return record(OpId::max_pool2d, {x}, r.out, [indices, xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{max_pool2d_backward(dy[0], indices, xs)};
  });
}

Variable max_pool2d(const Variable& x, Size2 kernel) { return max_pool2d(x, kernel, kernel, 0); }

Variable avg_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode,
                    bool count_include_pad) {
  const Shape xs = x.shape();
  return record(OpId::avg_pool2d, {x},
                mixtape::avg_pool2d(x.data(), kernel, stride, padding, ceil_mode, count_include_pad),
                [=](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{avg_pool2d_backward(dy[0], xs, kernel, stride, padding, ceil_mode, count_include_pad)};
  });
}

Variable avg_pool2d(const Variable& x, Size2 kernel) { return avg_pool2d(x, kernel, kernel, 0); }

Variable adaptive_avg_pool2d(const Variable& x, OptionalSize2 output_size) {
  const Shape xs = x.shape();
  return record(OpId::adaptive_avg_pool2d, {x}, mixtape::adaptive_avg_pool2d(x.data(), output_size),
                [xs](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{adaptive_avg_pool2d_backward(dy[0], xs)};
  });
}

Variable upsample(const Variable& x, const UpsampleOptions& options) {
  const Shape xs = x.shape();
  return record(OpId::upsample, {x}, mixtape::upsample(x.data(), options),
                [xs, options](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{upsample_backward(dy[0], xs, options)};
  });
}

}  // namespace mixtape
