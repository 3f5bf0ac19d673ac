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
// Under a per-tensor scale (current and delayed scaling, and a gradient under per-operator
// scaling) an element's code depends only on its value and the tensor's one scale, so the codes
// of a rearrangement of a tensor are the same rearrangement of its codes. A convolution's
// operands are rearrangements of NCHW tensors (pixel-major rows, column matrices), so it
// quantizes the NCHW tensor as it lies and rearranges its 1-byte codes instead of 2-byte values:
// the columns of a 3x3 kernel quantize 9 / (stride_h stride_w) times fewer values, and the
// transposing copies move half the bytes. The column matrix must hold every pixel (its amax is
// then the tensor's; the padding adds zeros, whose code is 0), else it is built and quantized.
// The operand's telemetry counts the tensor's elements, each once (the column matrix repeats
// interior pixels KH*KW times and adds the padding's zeros). The other recipes' blocks lie along
// a GEMM's K, so they quantize each rearranged operand.
// The codes are laid out for the copies that make them: where the runs of a channel-major column
// matrix (OW values one apart: stride 1, OW > KW, the cnn) are longer than a pixel-major row's
// pieces (KW values), the columns are channel-major (Note [Channel-major columns] in
// tensor/cpu/im2col.h), dY's codes are moved as whole channel planes, and dgrad forms dcols^T so
// that col2im reads it where it lies; elsewhere (the dcgan's stride-2 convolutions) pixel-major,
// from zero-bordered images when there is padding (Note [Padded codes] in tensor/cpu/im2col.cpp).
// Only the layout changes: each product sums the same values in the same order.

// The conv's geometry, for its column matrices.
struct Columns {
  Size2 kernel, stride, padding, padding_end, dilation;
  bool channel_major = false;  // codes' columns (and conv2d's dY codes): Note [Channel-major columns]
  bool reads_every_pixel(const Shape& s) const {
    return im2col_reads_every_pixel(s, kernel, stride, padding, dilation, padding_end);
  }
  // Values pixel-major (the other recipes quantize the columns along their rows), codes in the
  // layout chosen.
  Tensor of(const Tensor& t) const {
    return im2col(t, kernel, stride, padding, dilation, padding_end,
                  codes_by_channel(t) ? ColumnLayout::channel_major : ColumnLayout::pixel_major);
  }
  bool codes_by_channel(const Tensor& t) const { return channel_major && is_8bit(t.dtype()); }
};

// An NCHW tensor as pixel-major rows [N*H*W, C] (the products over such rows come back as NCHW:
// Note [Image rows] in tensor/ops/quantize.h).
Tensor pixel_rows(const Tensor& t) {
  return t.permute({0, 2, 3, 1}).reshape({t.size(0) * t.size(2) * t.size(3), t.size(1)});
}

// The same matrix as the transposed view of [C, N*H*W] (each image's channel planes moved as
// runs): how conv2d arranges dY's codes (Note [Channel-major columns] in tensor/cpu/im2col.h).
Tensor channel_rows(const Tensor& t) {
  return t.transpose(0, 1).contiguous().view({t.size(1), t.size(0) * t.size(2) * t.size(3)}).t();
}

// The operand arrange(t) of an NCHW tensor t, quantized for `role` (Note [Codes before columns]):
// from t's codes when its scale is per tensor (and, with `cols`, the columns hold every pixel),
// else from arrange(t)'s values. One operand serves both orientations when per tensor (q.t()).
template <class Arrange>
Quantized arranged_operand(Fp8Context& fp8, int64_t site, OpId op, Fp8Role role, const char* gemm, const Tensor& t,
                           bool per_op, const Columns* cols, Arrange&& arrange) {
  const Shape& s = t.shape();
  if (!(per_op || fp8.per_tensor(role)) || (cols && !cols->reads_every_pixel(s)))
    return fp8.quantize(site, op, role, gemm, arrange(t), per_op);
  Quantized q = fp8.quantize(site, op, role, gemm, t.reshape({s[0] * s[1] * s[2], s[3]}), per_op);
  q.codes = arrange(q.codes.view(s));
  q.block_rows = std::max<int64_t>(q.codes.size(0), 1);  // still one block: the whole operand
  q.block_cols = std::max<int64_t>(q.codes.size(1), 1);
  q.prepared = std::make_shared<PreparedOperand>();  // nothing packed from t's codes applies
  return q;
}

// Whether arranged_operand gives one operand for both orientations (else each GEMM quantizes its
// own from the values).
bool one_operand(const Fp8Context& fp8, Fp8Role role, bool per_op, const Columns* cols, const Shape& s) {
  return (per_op || fp8.per_tensor(role)) && (!cols || cols->reads_every_pixel(s));
}

Variable conv2d_fp8(Fp8Context& fp8, const Variable& x, const Variable& w, const Variable& b, Size2 stride,
                    Size2 padding, Size2 padding_end, Size2 dilation) {
  const Shape xs = x.shape(), ws = w.shape();
  MT_CHECK(xs[1] == ws[1], "conv2d: x ", x.data().meta(), " has ", xs[1], " channels, w ", w.data().meta(), " expects ",
           ws[1]);
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == ws[0]), "conv2d: bias ", b.data().meta(), " must be [", ws[0],
           "]");
  // OH, OW with the padding before and after the image (they differ under padding "same").
  const int64_t oh = (xs[2] + padding.h + padding_end.h - dilation.h * (ws[2] - 1) - 1) / stride.h + 1;
  const int64_t ow = (xs[3] + padding.w + padding_end.w - dilation.w * (ws[3] - 1) - 1) / stride.w + 1;
  // Channel-major codes where their runs (OW values one apart) are longer than pixel-major pieces
  // (KW values): the cnn's 3x3 stride-1 convolutions, not the dcgan's stride-2 ones.
  const Columns geo{{ws[2], ws[3]}, stride, padding, padding_end, dilation, stride.w == 1 && ow > ws[3]};
  const Tensor wm = w.data().reshape({ws[0], ws[1] * ws[2] * ws[3]});  // [OC, C*KK]
  const int64_t site = fp8.next_site();
  const auto columns = [&geo](const Tensor& t) { return geo.of(t); };  // [P, C*KK]
  const Quantized xq =
      arranged_operand(fp8, site, OpId::conv2d, Fp8Role::input, "fprop", x.data(), false, &geo, columns);
  Tensor y = scaled_matmul_nt_images(xq, fp8.quantize(site, OpId::conv2d, Fp8Role::weight, "fprop", wm),
                                     b.defined() ? b.data() : Tensor(), x.dtype(), xs[0])
                 .view({xs[0], ws[0], oh, ow});
  // wgrad reads the columns again: per tensor the same codes, else quantized from their values.
  const bool same_cols = one_operand(fp8, Fp8Role::input, false, &geo, xs);
  const std::optional<Quantized> sq = w.requires_grad() && same_cols ? std::optional(xq) : std::nullopt;
  const Tensor sx = w.requires_grad() && !same_cols ? x.data() : Tensor();
  const Tensor sw = x.requires_grad() ? wm : Tensor();
  Fp8Context* ctx = &fp8;
  return record_scaled(OpId::conv2d, {x, w, b}, std::move(y),
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const Fp8Grad fg = fp8_grad(*ctx, dys[0]);
    const ScaledGrad& dy = fg.dy;
    const bool per_op = fg.per_operator;
    // dY as pixel-major rows [P, OC]: one operand for both GEMMs when per tensor.
    const bool one = one_operand(*ctx, Fp8Role::grad, per_op, nullptr, dy.g.shape());
    const auto rows = [&geo](const Tensor& t) { return geo.codes_by_channel(t) ? channel_rows(t) : pixel_rows(t); };
    const std::optional<Quantized> dq =
        one ? std::optional(arranged_operand(*ctx, site, OpId::conv2d, Fp8Role::grad, needs[0] ? "dgrad" : "wgrad",
                                             dy.g, per_op, nullptr, rows))
            : std::nullopt;
    const Tensor dym = one ? Tensor() : pixel_rows(dy.g);
    std::vector<ScaledGrad> g(3);
    if (needs[0]) {  // dgrad: dcols = dY W (P, C*KK) = (P, OC) (C*KK, OC)^T, in fp32 for col2im
      const Quantized wq = ctx->quantize(site, OpId::conv2d, Fp8Role::weight, "dgrad", sw.transpose(0, 1));
      // dY's codes channel-major: the product transposed, dcols^T = W^T dY^T, whose rows are the
      // channel-major columns col2im reads in place (the same sums: only the layout changes).
      // col2im_product: Note [Scaled columns] in tensor/ops/conv.h.
      const Tensor dx =
          dq ? col2im_product(wq, *dq, true, xs, geo.kernel, stride, padding, dilation, padding_end, dy.g.dtype())
             : col2im_product(ctx->quantize(site, OpId::conv2d, Fp8Role::grad, "dgrad", dym, per_op), wq, false, xs,
                              geo.kernel, stride, padding, dilation, padding_end, dy.g.dtype());
      g[0] = {dx, dy.scale};
    }
    if (needs[1])  // wgrad: dW = dY^T cols (OC, C*KK) = (OC, P) (C*KK, P)^T
      g[1] = param_grad(OpId::conv2d, 1, dy, [&](DType t) {
        return scaled_matmul_nt(
                   dq ? dq->t()
                      : ctx->quantize(site, OpId::conv2d, Fp8Role::grad, "wgrad", dym.transpose(0, 1), per_op),
                   sq ? sq->t()
                      : ctx->quantize(site, OpId::conv2d, Fp8Role::input, "wgrad", geo.of(sx).transpose(0, 1)),
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
  const Columns geo{{ws[2], ws[3]}, stride, padding, padding, dilation};
  const int64_t oh = conv_transpose_out_size(xs[2], geo.kernel.h, stride.h, padding.h, output_padding.h, dilation.h);
  const int64_t ow = conv_transpose_out_size(xs[3], geo.kernel.w, stride.w, padding.w, output_padding.w, dilation.w);
  const Shape ys{xs[0], ws[1], oh, ow};
  const Tensor wm = w.data().reshape({ws[0], ws[1] * ws[2] * ws[3]});  // [IC, OC*KK]
  const int64_t site = fp8.next_site();
  const auto rows = [](const Tensor& t) { return pixel_rows(t); };
  // X as pixel-major rows [N*H*W, IC]; one operand for fprop and wgrad when per tensor.
  const Quantized xq =
      arranged_operand(fp8, site, OpId::conv_transpose2d, Fp8Role::input, "fprop", x.data(), false, nullptr, rows);
  // ycols = X W: (N*H*W, OC*KK) = (N*H*W, IC) (OC*KK, IC)^T, in fp32; col2im sums it, the bias is
  // added in fp32 and y rounded once.
  const Tensor ycols =
      scaled_matmul_nt(xq, fp8.quantize(site, OpId::conv_transpose2d, Fp8Role::weight, "fprop", wm.transpose(0, 1)),
                       Tensor(), DType::f32);
  // (without a bias, x's dtype at once: the same bits as rounding the f32 sums after)
  Tensor y =
      col2im(ycols, ys, geo.kernel, stride, padding, dilation, std::nullopt, b.defined() ? DType::f32 : x.dtype());
  if (b.defined()) y = add(y, b.data().to(DType::f32).view({1, ws[1], 1, 1})).to(x.dtype());
  const bool same_x = one_operand(fp8, Fp8Role::input, false, nullptr, xs);
  const std::optional<Quantized> sq = w.requires_grad() && same_x ? std::optional(xq) : std::nullopt;
  const Tensor sx = w.requires_grad() && !same_x ? x.data() : Tensor();
  const Tensor sw = x.requires_grad() ? wm : Tensor();
  Fp8Context* ctx = &fp8;
  return record_scaled(OpId::conv_transpose2d, {x, w, b}, std::move(y),
                       [=](const std::vector<ScaledGrad>& dys, const std::vector<bool>& needs) {
    const Fp8Grad fg = fp8_grad(*ctx, dys[0]);
    const ScaledGrad& dy = fg.dy;
    const bool per_op = fg.per_operator;
    // cols(dY) [N*H*W, OC*KK]: one operand for both GEMMs when per tensor and every pixel is read.
    const bool one = one_operand(*ctx, Fp8Role::grad, per_op, &geo, dy.g.shape());
    const auto columns = [&geo](const Tensor& t) { return geo.of(t); };
    const std::optional<Quantized> dq =
        one ? std::optional(arranged_operand(*ctx, site, OpId::conv_transpose2d, Fp8Role::grad,
                                             needs[0] ? "dgrad" : "wgrad", dy.g, per_op, &geo, columns))
            : std::nullopt;
    const Tensor dcols = one ? Tensor() : geo.of(dy.g);
    std::vector<ScaledGrad> g(3);
    if (needs[0])  // dgrad: dX = cols(dY) W^T (N*H*W, IC) = (N*H*W, OC*KK) (IC, OC*KK)^T
      g[0] = {
          scaled_matmul_nt_images(
              dq ? *dq : ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::grad, "dgrad", dcols, per_op),
              ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::weight, "dgrad", sw), Tensor(), dy.g.dtype(), xs[0])
              .view(xs),
          dy.scale};
    if (needs[1])  // wgrad: dW = X^T cols(dY) (IC, OC*KK) = (IC, N*H*W) (OC*KK, N*H*W)^T
      g[1] = param_grad(OpId::conv_transpose2d, 1, dy, [&](DType t) {
        return scaled_matmul_nt(sq ? sq->t()
                                   : ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::input, "wgrad",
                                                   pixel_rows(sx).transpose(0, 1)),
                                dq ? dq->t()
                                   : ctx->quantize(site, OpId::conv_transpose2d, Fp8Role::grad, "wgrad",
                                                   dcols.transpose(0, 1), per_op),
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
