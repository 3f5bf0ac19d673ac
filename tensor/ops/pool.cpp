#include "tensor/ops/pool.h"

#include "cuda/backend.h"
#include "tensor/cpu/pool.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// Validates a pooling call on an input of x_shape and returns the output shape; `what` names
// the tensor at hand for the message (the input, or the gradient in backward).
Shape pool_out_shape(const char* op, const std::string& what, const Shape& x_shape, Size2 kernel, Size2 stride,
                     Size2 padding) {
  const std::string ctx = detail::cat(" (", what, ", kernel ", size2_str(kernel), ", stride ", size2_str(stride),
                                      ", padding ", size2_str(padding), ")");
  MT_CHECK(x_shape.size() == 4, op, ": expected an input [N, C, H, W], got ", shape_str(x_shape), ctx);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel size must be positive, got ", size2_str(kernel), ctx);
  MT_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ", size2_str(stride), ctx);
  MT_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, op, ": padding ",
           size2_str(padding), " must be non-negative and at most half the kernel ", size2_str(kernel), ctx);
  const int64_t H = x_shape[2] + 2 * padding.h, W = x_shape[3] + 2 * padding.w;
  MT_CHECK(kernel.h <= H && kernel.w <= W, op, ": kernel ", size2_str(kernel), " is larger than the padded input ",
           size2_str({H, W}), ctx);
  return {x_shape[0], x_shape[1], (H - kernel.h) / stride.h + 1, (W - kernel.w) / stride.w + 1};
}

void check_input(const char* op, const Tensor& x) {
  ops::check_same(op, {&x});
  ops::check_floating(op, x);
}

}  // namespace

PoolWithIndices max_pool2d_with_indices(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding) {
  check_input("max_pool2d", x);
  const Shape os = pool_out_shape("max_pool2d", "input " + x.meta(), x.shape(), kernel, stride, padding);
  PoolWithIndices r{empty(os, x.dtype(), x.device()), empty(os, DType::i64, x.device())};
  on_device(
      x.device(),
      [&] { cpu::max_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, r.out, r.indices); },
      [&] { cuda::max_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, r.out, r.indices); });
  return r;
}

Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding) {
  return max_pool2d_with_indices(x, kernel, stride, padding).out;
}

Tensor max_pool2d(const Tensor& x, Size2 kernel) { return max_pool2d(x, kernel, kernel, 0); }

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  const char* op = "max_pool2d backward";
  ops::check_same(op, {&dy, &indices}, false);
  ops::check_floating(op, dy);
  MT_CHECK(indices.dtype() == DType::i64 && indices.shape() == dy.shape() && dy.dim() == 4 && x_shape.size() == 4 &&
               x_shape[0] == dy.size(0) && x_shape[1] == dy.size(1),
           op, ": gradient ", dy.meta(), " and indices ", indices.meta(), " do not fit input ", shape_str(x_shape));
  const Tensor idx = indices.contiguous();
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::max_pool2d_backward(dy, idx, dx); }, [&] { cuda::max_pool2d_backward(dy, idx, dx); });
  return dx;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding) {
  check_input("avg_pool2d", x);
  const Shape os = pool_out_shape("avg_pool2d", "input " + x.meta(), x.shape(), kernel, stride, padding);
  Tensor out = empty(os, x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::avg_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, out); },
      [&] { cuda::avg_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, out); });
  return out;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel) { return avg_pool2d(x, kernel, kernel, 0); }

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding) {
  const char* op = "avg_pool2d backward";
  check_input(op, dy);
  const Shape os =
      pool_out_shape(op, "gradient " + dy.meta() + ", input " + shape_str(x_shape), x_shape, kernel, stride, padding);
  MT_CHECK(dy.shape() == os, op, ": gradient ", dy.meta(), " does not match the output ", shape_str(os), " of input ",
           shape_str(x_shape));
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(),
      [&] { cpu::avg_pool2d_backward(dy, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dx); },
      [&] { cuda::avg_pool2d_backward(dy, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dx); });
  return dx;
}

}  // namespace mixtape
