#include "autograd/functions/conv.h"

#include "autograd/tape.h"

namespace mixtape {

namespace {

// The conv2d node for padding `padding` before and `padding_end` after the image (the forward
// is `forward`, already computed).
Variable conv2d_node(const Variable& x, const Variable& w, const Variable& b, Tensor y, Size2 stride, Size2 padding,
                     Size2 padding_end, Size2 dilation, int64_t groups) {
  const Tensor sx = w.requires_grad() ? x.data() : Tensor();
  const Tensor sw = x.requires_grad() ? w.data() : Tensor();
  const Shape xs = x.shape(), ws = w.shape();
  return record_scaled(OpId::conv2d, {x, w, b}, std::move(y),
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const ScaledGrad& dy = dys[0];
    std::vector<ScaledGrad> g(3);
    if (needs[0]) {
      // dx = col2im(W_g^T (beta dY)) per group: each element sums OC/groups*KH*KW products.
      const float beta = gemm_beta(GemmGradQuery{OpId::conv2d, &dy, &sw, ws[0] / groups * ws[2] * ws[3]});
      g[0] = {conv2d_backward_input(rescale(dy.g, beta), sw, xs, stride, padding, dilation, groups, padding_end),
              beta * dy.scale};
    }
    // Weight and bias gradients get their own scale (Note [Parameter gradient scale]).
    if (needs[1])
      g[1] = param_grad(OpId::conv2d, 1, dy, [&](DType t) {
        return conv2d_backward_weight(sx.to(t), dy.g.to(t), ws, stride, padding, dilation, groups, padding_end);
      });
    if (needs[2]) g[2] = param_grad(OpId::conv2d, 2, dy, [&](DType t) { return conv2d_backward_bias(dy.g.to(t)); });
    return g;
  });
}

}  // namespace

Variable conv2d(const Variable& x, const Variable& w, const Variable& b, Size2 stride, Size2 padding, Size2 dilation,
                int64_t groups) {
  MT_CHECK(x.defined() && w.defined(), "conv2d: got an undefined Variable");
  Tensor y = mixtape::conv2d(x.data(), w.data(), b.defined() ? b.data() : Tensor(), stride, padding, dilation, groups);
  return conv2d_node(x, w, b, std::move(y), stride, padding, padding, dilation, groups);
}

Variable conv2d_same(const Variable& x, const Variable& w, const Variable& b, Size2 dilation, int64_t groups) {
  MT_CHECK(x.defined() && w.defined(), "conv2d (padding \"same\"): got an undefined Variable");
  Tensor y = mixtape::conv2d_same(x.data(), w.data(), b.defined() ? b.data() : Tensor(), dilation, groups);
  const SamePadding pad = same_padding({w.size(2), w.size(3)}, dilation);
  return conv2d_node(x, w, b, std::move(y), 1, pad.begin, pad.end, dilation, groups);
}

Variable conv_transpose2d(const Variable& x, const Variable& w, const Variable& b, Size2 stride, Size2 padding,
                          Size2 output_padding, Size2 dilation) {
  MT_CHECK(x.defined() && w.defined(), "conv_transpose2d: got an undefined Variable");
  Tensor y = mixtape::conv_transpose2d(x.data(), w.data(), b.defined() ? b.data() : Tensor(), stride, padding,
                                       output_padding, dilation);
  const Tensor sx = w.requires_grad() ? x.data() : Tensor();
  const Tensor sw = x.requires_grad() ? w.data() : Tensor();
  const Shape xs = x.shape(), ws = w.shape();
  return record_scaled(OpId::conv_transpose2d, {x, w, b}, y,
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const ScaledGrad& dy = dys[0];
    std::vector<ScaledGrad> g(3);
    if (needs[0]) {
      // dx = conv2d(beta dY, w): each element sums OC*KH*KW products (w is [IC, OC, KH, KW]).
      const float beta = gemm_beta(GemmGradQuery{OpId::conv_transpose2d, &dy, &sw, ws[1] * ws[2] * ws[3]});
      g[0] = {conv_transpose2d_backward_input(rescale(dy.g, beta), sw, xs, stride, padding, dilation), beta * dy.scale};
    }
    if (needs[1])
      g[1] = param_grad(OpId::conv_transpose2d, 1, dy, [&](DType t) {
        return conv_transpose2d_backward_weight(sx.to(t), dy.g.to(t), ws, stride, padding, dilation);
      });
    if (needs[2])
      g[2] = param_grad(OpId::conv_transpose2d, 2, dy,
                        [&](DType t) { return conv_transpose2d_backward_bias(dy.g.to(t)); });
    return g;
  });
}

}  // namespace mixtape
