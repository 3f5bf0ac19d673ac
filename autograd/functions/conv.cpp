#include "autograd/functions/conv.h"

#include <algorithm>
#include <optional>

#include "autograd/fp8.h"
#include "autograd/tape.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/quantize.h"

namespace mixtape {

namespace {

// Note [8-bit convolutions]
// Under 8-bit training (Note [8-bit training] in autograd/fp8.h) a convolution is its GEMM over
// the column matrix (im2col, tensor/ops/conv.h): pixel-major columns cols [P = N*OH*OW, C*KH*KW]
// whose rows run along the reduction dim, so that every recipe's blocks lie along K:
//   conv2d            y  = cols(x) W^T                 [P, OC]     fprop
//                     dcols = dY W, dx = col2im(dcols)  [P, C*KK]   dgrad
//                     dW = dY^T cols(x)                 [OC, C*KK]  wgrad
//   conv_transpose2d  (the adjoint: x's pixels are the rows, y = col2im(X W))
//                     ycols = X W                       [N*H*W, OC*KK]           fprop
//                     dX = cols(dY) W^T                 [N*H*W, IC]              dgrad
//                     dW = X^T cols(dY)                 [IC, OC*KK]              wgrad
// with dY, X in pixel-major layout [pixels, channels]. col2im sums the fp32 products of the
// GEMM and rounds once. Grouped convolutions, and a transposed convolution whose output_padding
// reaches its stride, run the 16-bit path.

// Note [Codes before columns]
// Under a per-tensor recipe (current, delayed) an element's code depends only on its value and
// the tensor's one scale, so the column matrix of the codes is the codes of the column matrix,
// provided the column matrix holds every pixel (its amax is then x's; the padding adds zeros,
// whose code is 0). conv2d then quantizes x itself, C*KH*KW / (stride_h stride_w) times fewer
// values than its columns, and builds the columns from 1-byte codes instead of 2-byte values. The
// input operand's telemetry counts x's elements, each once (the column matrix repeats interior
// pixels KH*KW times and adds the padding's zeros). The other recipes' blocks lie along the
// columns' K, so they quantize the columns.
std::optional<Quantized> columns_of_codes(Fp8Context& fp8, int64_t site, const Tensor& x, Size2 kernel, Size2 stride,
                                          Size2 padding, Size2 padding_end, Size2 dilation) {
  if (!fp8.per_tensor(Fp8Role::input) ||
      !im2col_reads_every_pixel(x.shape(), kernel, stride, padding, dilation, padding_end))
    return std::nullopt;
  const Shape& xs = x.shape();
  Quantized q = fp8.quantize(site, OpId::conv2d, Fp8Role::input, "fprop", x.reshape({xs[0] * xs[1] * xs[2], xs[3]}));
  q.codes = im2col(q.codes.view(xs), kernel, stride, padding, dilation, padding_end);
  q.block_rows = std::max<int64_t>(q.codes.size(0), 1);  // still one block: the whole operand
  q.block_cols = std::max<int64_t>(q.codes.size(1), 1);
  q.prepared = std::make_shared<PreparedOperand>();  // nothing packed from x's codes applies
  return q;
}

// An NCHW tensor as pixel-major rows [N*H*W, C], and back.
Tensor pixel_rows(const Tensor& t) {
  return t.permute({0, 2, 3, 1}).reshape({t.size(0) * t.size(2) * t.size(3), t.size(1)});
}
Tensor from_pixel_rows(const Tensor& rows, const Shape& nchw) {
  return rows.view({nchw[0], nchw[2], nchw[3], nchw[1]}).permute({0, 3, 1, 2}).contiguous();
}

Variable conv2d_fp8(Fp8Context& fp8, const Variable& x, const Variable& w, const Variable& b, Size2 stride,
                    Size2 padding, Size2 padding_end, Size2 dilation) {
  const Shape xs = x.shape(), ws = w.shape();
  MT_CHECK(xs[1] == ws[1], "conv2d: x ", x.data().meta(), " has ", xs[1], " channels, w ", w.data().meta(), " expects ",
           ws[1]);
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == ws[0]), "conv2d: bias ", b.data().meta(), " must be [", ws[0],
           "]");
  const Size2 kernel{ws[2], ws[3]};
  const Tensor wm = w.data().reshape({ws[0], ws[1] * ws[2] * ws[3]});  // [OC, C*KK]
  const int64_t site = fp8.next_site();
  // The columns [P, C*KK]: as codes (Note [Codes before columns]), or as values, quantized here
  // for fprop and again for wgrad (only per-tensor codes serve both orientations).
  const std::optional<Quantized> col_codes =
      columns_of_codes(fp8, site, x.data(), kernel, stride, padding, padding_end, dilation);
  const Tensor cols = col_codes ? Tensor() : im2col(x.data(), kernel, stride, padding, dilation, padding_end);
  const Tensor ym = scaled_matmul_nt(
      col_codes ? *col_codes : fp8.quantize(site, OpId::conv2d, Fp8Role::input, "fprop", cols),
      fp8.quantize(site, OpId::conv2d, Fp8Role::weight, "fprop", wm), b.defined() ? b.data() : Tensor(), x.dtype());
  // OH, OW with the padding before and after the image (they differ under padding "same").
  const int64_t oh = (xs[2] + padding.h + padding_end.h - dilation.h * (kernel.h - 1) - 1) / stride.h + 1;
  const int64_t ow = (xs[3] + padding.w + padding_end.w - dilation.w * (kernel.w - 1) - 1) / stride.w + 1;
  Tensor y = from_pixel_rows(ym, {xs[0], ws[0], oh, ow});
  const Tensor sc = w.requires_grad() ? cols : Tensor();
  const std::optional<Quantized> scq = w.requires_grad() ? col_codes : std::nullopt;
  const Tensor sw = x.requires_grad() ? wm : Tensor();
  Fp8Context* ctx = &fp8;
  return record_scaled(OpId::conv2d, {x, w, b}, std::move(y),
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const Fp8Grad fg = fp8_grad(*ctx, dys[0]);
    const ScaledGrad& dy = fg.dy;
    const bool per_op = fg.per_operator;
    const Tensor dym = pixel_rows(dy.g);  // [P, OC]
    std::vector<ScaledGrad> g(3);
    if (needs[0]) {  // dgrad: dcols = dY W (P, C*KK) = (P, OC) (C*KK, OC)^T, in fp32 for col2im
      const Tensor dcols = scaled_matmul_nt(
          ctx->quantize(site, OpId::conv2d, Fp8Role::grad, "dgrad", dym, per_op),
          ctx->quantize(site, OpId::conv2d, Fp8Role::weight, "dgrad", sw.transpose(0, 1)), Tensor(), DType::f32);
      g[0] = {col2im(dcols, xs, kernel, stride, padding, dilation, padding_end).to(dy.g.dtype()), dy.scale};
    }
    if (needs[1])  // wgrad: dW = dY^T cols (OC, C*KK) = (OC, P) (C*KK, P)^T
      g[1] = param_grad(OpId::conv2d, 1, dy, [&](DType t) {
        return scaled_matmul_nt(
                   ctx->quantize(site, OpId::conv2d, Fp8Role::grad, "wgrad", dym.transpose(0, 1), per_op),
                   scq ? scq->t() : ctx->quantize(site, OpId::conv2d, Fp8Role::input, "wgrad", sc.transpose(0, 1)),
                   Tensor(), t)
            .view(ws);
      });
    if (needs[2]) g[2] = param_grad(OpId::conv2d, 2, dy, [&](DType t) { return conv2d_backward_bias(dy.g.to(t)); });
    return g;
  });
}

Variable conv_transpose2d_fp8(Fp8Context& fp8, const Variable& x, const Variable& w, const Variable& b, Size2 stride,
                              Size2 padding, Size2 output_padding, Size2 dilation) {
  const Shape xs = x.shape(), ws = w.shape();  // x [N, IC, H, W], w [IC, OC, KH, KW]
  MT_CHECK(xs[1] == ws[0], "conv_transpose2d: x ", x.data().meta(), " has ", xs[1], " channels, w ", w.data().meta(),
           " expects ", ws[0]);
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == ws[1]), "conv_transpose2d: bias ", b.data().meta(),
           " must be [", ws[1], "]");
  const Size2 kernel{ws[2], ws[3]};
  const int64_t oh = conv_transpose_out_size(xs[2], kernel.h, stride.h, padding.h, output_padding.h, dilation.h);
  const int64_t ow = conv_transpose_out_size(xs[3], kernel.w, stride.w, padding.w, output_padding.w, dilation.w);
  const Shape ys{xs[0], ws[1], oh, ow};
  const Tensor xm = pixel_rows(x.data());                              // [N*H*W, IC]
  const Tensor wm = w.data().reshape({ws[0], ws[1] * ws[2] * ws[3]});  // [IC, OC*KK]
  const int64_t site = fp8.next_site();
  // ycols = X W: (N*H*W, OC*KK) = (N*H*W, IC) (OC*KK, IC)^T, in fp32; col2im sums it, the bias is
  // added in fp32 and y rounded once.
  const Tensor ycols = scaled_matmul_nt(
      fp8.quantize(site, OpId::conv_transpose2d, Fp8Role::input, "fprop", xm),
      fp8.quantize(site, OpId::conv_transpose2d, Fp8Role::weight, "fprop", wm.transpose(0, 1)), Tensor(), DType::f32);
  Tensor y32 = col2im(ycols, ys, kernel, stride, padding, dilation);
  if (b.defined()) y32 = add(y32, b.data().to(DType::f32).view({1, ws[1], 1, 1}));
  Tensor y = y32.to(x.dtype());
  const Tensor sx = w.requires_grad() ? xm : Tensor();
  const Tensor sw = x.requires_grad() ? wm : Tensor();
  Fp8Context* ctx = &fp8;
  return record_scaled(OpId::conv_transpose2d, {x, w, b}, std::move(y),
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const Fp8Grad fg = fp8_grad(*ctx, dys[0]);
    const ScaledGrad& dy = fg.dy;
    const bool per_op = fg.per_operator;
    const Tensor dcols = im2col(dy.g, kernel, stride, padding, dilation);  // [N*H*W, OC*KK]
    std::vector<ScaledGrad> g(3);
    if (needs[0])  // dgrad: dX = cols(dY) W^T (N*H*W, IC) = (N*H*W, OC*KK) (IC, OC*KK)^T
      g[0] = {from_pixel_rows(
                  scaled_matmul_nt(ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::grad, "dgrad", dcols, per_op),
                                   ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::weight, "dgrad", sw), Tensor(),
                                   dy.g.dtype()),
                  xs),
              dy.scale};
    if (needs[1])  // wgrad: dW = X^T cols(dY) (IC, OC*KK) = (IC, N*H*W) (OC*KK, N*H*W)^T
      g[1] = param_grad(OpId::conv_transpose2d, 1, dy, [&](DType t) {
        return scaled_matmul_nt(
                   ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::input, "wgrad", sx.transpose(0, 1)),
                   ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::grad, "wgrad", dcols.transpose(0, 1), per_op),
                   Tensor(), t)
            .view(ws);
      });
    if (needs[2])
      g[2] = param_grad(OpId::conv_transpose2d, 2, dy,
                        [&](DType t) { return conv_transpose2d_backward_bias(dy.g.to(t)); });
    return g;
  });
}

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

Variable conv2d(const Variable& x, const Variable& w, const Variable& b, Size2 stride, ConvPadding padding,
                Size2 dilation, int64_t groups) {
  MT_CHECK(x.defined() && w.defined(), "conv2d: got an undefined Variable");
  auto resolved = [&] {  // top-left and bottom-right padding
    return padding.same ? same_padding({w.size(2), w.size(3)}, dilation) : SamePadding{padding.size, padding.size};
  };
  if (Fp8Context* fp8 = active_fp8(); fp8 && groups == 1 && is_16bit(x.dtype()) && x.dim() == 4 && w.dim() == 4 &&
                                      (!padding.same || stride == Size2(1))) {
    const SamePadding pad = resolved();
    return conv2d_fp8(*fp8, x, w, b, stride, pad.begin, pad.end, dilation);
  }
  // validates every operand and parameter ("same" with a stride, too) before the padding is resolved
  Tensor y = mixtape::conv2d(x.data(), w.data(), b.defined() ? b.data() : Tensor(), stride, padding, dilation, groups);
  const SamePadding pad = resolved();
  return conv2d_node(x, w, b, std::move(y), stride, pad.begin, pad.end, dilation, groups);
}

Variable conv_transpose2d(const Variable& x, const Variable& w, const Variable& b, Size2 stride, Size2 padding,
                          Size2 output_padding, Size2 dilation) {
  MT_CHECK(x.defined() && w.defined(), "conv_transpose2d: got an undefined Variable");
  if (Fp8Context* fp8 = active_fp8(); fp8 && is_16bit(x.dtype()) && x.dim() == 4 && w.dim() == 4 &&
                                      output_padding.h < stride.h && output_padding.w < stride.w)
    return conv_transpose2d_fp8(*fp8, x, w, b, stride, padding, output_padding, dilation);
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
