#include "tensor/ops/quantize.h"

#include <algorithm>
#include <bit>

#include "cuda/backend.h"
#include "tensor/cpu/quantize.h"
#include "tensor/ops/common.h"
#include "tensor/ops/elementwise.h"

namespace mixtape {

const char* scale_rule_name(ScaleRule r) {
  switch (r) {
    case ScaleRule::amax: return "amax";
    case ScaleRule::pow2_floor: return "pow2-floor";
    case ScaleRule::pow2_up: return "pow2-up";
    case ScaleRule::nvfp4: return "nvfp4";
  }
  return "?";
}

namespace {

QuantStats read_stats(const Tensor& stats) {
  const std::vector<double> v = stats.to(Device::cpu()).to_vector();  // i64: exact below 2^53
  auto bits = [&](int i) { return std::bit_cast<float>(uint32_t(int64_t(v[size_t(i)]))); };
  return {int64_t(v[kStatCount]),     int64_t(v[kStatSaturated]), int64_t(v[kStatFlushed]),
          int64_t(v[kStatSubnormal]), int64_t(v[kStatNonfinite]), bits(kStatAmaxBits),
          bits(kStatScaleInvMinBits), bits(kStatScaleInvMaxBits)};
}

void check_operand(const char* op, const Quantized& q, const char* which) {
  MT_CHECK(q.codes.defined() && q.codes.dim() == 2 && is_8bit(q.codes.dtype()), op, ": ", which,
           " must be quantized codes [rows, K] (quantize()), got ",
           q.codes.defined() ? q.codes.meta() : std::string("an undefined tensor"));
  MT_CHECK(q.block_rows >= 1 && q.block_cols >= 1 && q.scale_inv.defined() && q.scale_inv.dtype() == DType::f32 &&
               q.scale_inv.is_contiguous() &&
               q.scale_inv.shape() ==
                   Shape({scales::blocks_of(q.rows(), q.block_rows), scales::blocks_of(q.cols(), q.block_cols)}) &&
               q.scale_inv.device() == q.codes.device(),
           op, ": ", which, "'s scale_inv ", q.scale_inv.defined() ? q.scale_inv.meta() : std::string("(undefined)"),
           " does not match its codes ", q.codes.meta(), " in blocks of ", q.block_rows, " x ", q.block_cols);
  MT_CHECK(q.tensor_scale_inv.defined() == (q.rule == ScaleRule::nvfp4) &&
               (!q.tensor_scale_inv.defined() ||
                (q.tensor_scale_inv.dtype() == DType::f32 && q.tensor_scale_inv.shape() == Shape({1}) &&
                 q.tensor_scale_inv.device() == q.codes.device())),
           op, ": ", which, " under rule ", scale_rule_name(q.rule),
           q.rule == ScaleRule::nvfp4 ? " needs its tensor_scale_inv (f32 [1] beside its codes)"
                                      : " has a tensor_scale_inv, which only the nvfp4 rule has");
}

// Whether the product of operands on a's device is computed by the CPU kernels.
bool y_on_cpu(const Quantized& a) { return a.codes.device().is_cpu(); }

}  // namespace

Quantized Quantized::t() const {
  Quantized q = *this;
  q.codes = codes.transpose(0, 1);
  q.scale_inv = scale_inv.transpose(0, 1).contiguous();
  std::swap(q.block_rows, q.block_cols);
  q.transposed = !transposed;
  return q;
}

Quantized quantize(const Tensor& x, const QuantSpec& spec) {
  ops::check_same("quantize", {&x});
  ops::check_floating("quantize", x);
  MT_CHECK(x.dim() == 2, "quantize: expected a matrix [rows, K], got ", x.meta());
  MT_CHECK(is_8bit(spec.format), "quantize: format must be an 8-bit dtype (e4m3, e5m2, e3m2, e2m3, e2m1), got ",
           dtype_name(spec.format));
  MT_CHECK(spec.layout.block_rows >= 0 && spec.layout.block_cols >= 0, "quantize: block sizes must be >= 0, got ",
           spec.layout.block_rows, " x ", spec.layout.block_cols);
  MT_CHECK(spec.given_scale >= 0.0f && std::isfinite(spec.given_scale) && spec.fallback_scale > 0.0f &&
               std::isfinite(spec.fallback_scale),
           "quantize: given_scale must be finite and >= 0 and fallback_scale finite and > 0, got ", spec.given_scale,
           " and ", spec.fallback_scale);
  const int64_t R = x.size(0), C = x.size(1);
  Quantized q;
  q.block_rows = spec.layout.block_rows > 0 ? spec.layout.block_rows : std::max<int64_t>(R, 1);
  q.block_cols = spec.layout.block_cols > 0 ? spec.layout.block_cols : std::max<int64_t>(C, 1);
  MT_CHECK(spec.given_scale == 0.0f || (q.block_rows >= R && q.block_cols >= C),
           "quantize: a given scale (delayed scaling) needs the per-tensor layout, got blocks of ", q.block_rows, " x ",
           q.block_cols, " over ", x.meta());
  MT_CHECK(spec.given_scale == 0.0f || spec.rule != ScaleRule::nvfp4,
           "quantize: the nvfp4 rule chooses its own two levels of scales; it takes no given scale");
  q.rule = spec.rule;
  q.prepared = std::make_shared<PreparedOperand>();
  const BlockQuant bq{spec.format,   q.block_rows, q.block_cols,     spec.rule,
                      spec.overflow, spec.margin,  spec.given_scale, spec.fallback_scale};
  q.codes = empty({R, C}, spec.format, x.device());
  q.scale_inv = empty({scales::blocks_of(R, q.block_rows), scales::blocks_of(C, q.block_cols)}, DType::f32, x.device());
  if (q.rule == ScaleRule::nvfp4) q.tensor_scale_inv = empty({1}, DType::f32, x.device());
  const Tensor stats = empty({kQuantStats}, DType::i64, x.device());
  on_device(
      x.device(), [&] { cpu::quantize(x, bq, q.codes, q.scale_inv, q.tensor_scale_inv, stats); },
      [&] { cuda::quantize(x, bq, q.codes, q.scale_inv, q.tensor_scale_inv, stats); });
  q.stats = read_stats(stats);
  return q;
}

Tensor dequantize(const Quantized& q, DType dtype) {
  check_operand("dequantize", q, "the operand");
  MT_CHECK(is_floating(dtype), "dequantize: expected a floating dtype, got ", dtype_name(dtype));
  // code x scale (exact for power-of-two scales), then one rounding to dtype: the scales expanded
  // to every element (a reference for tests and lessons; the GEMM never does this).
  const int64_t nbr = q.scale_inv.size(0), nbc = q.scale_inv.size(1);
  const Tensor inv = q.scale_inv.reshape({nbr, 1, nbc, 1})
                         .expand({nbr, q.block_rows, nbc, q.block_cols})
                         .reshape({nbr * q.block_rows, nbc * q.block_cols})
                         .narrow(0, 0, q.rows())
                         .narrow(1, 0, q.cols());
  const Tensor values = mul(q.codes.to(DType::f32), inv);  // two-level: times 1 / S, a second rounding
  return (q.tensor_scale_inv.defined() ? mul(values, q.tensor_scale_inv) : values).to(dtype);
}

namespace {

// scaled_matmul_nt, its rows the pixels of `images` images when images > 0 (Note [Image rows]).
Tensor scaled_product(const char* op, const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype,
                      int64_t images) {
  check_operand(op, a, "a");
  check_operand(op, b, "b");
  MT_CHECK(a.codes.device() == b.codes.device(), op, ": operands on ", a.codes.device(), " and ", b.codes.device());
  MT_CHECK(a.cols() == b.cols(), op, ": reduction dims differ: ", a.codes.meta(), " x ", b.codes.meta(), "^T");
  MT_CHECK(out_dtype == DType::f32 || is_16bit(out_dtype), op, ": out_dtype must be f32, f16 or bf16, got ",
           dtype_name(out_dtype));
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  if (bias.defined())
    MT_CHECK(bias.dim() == 1 && bias.size(0) == N && is_floating(bias.dtype()) && bias.device() == a.codes.device(), op,
             ": bias must be [", N, "] on ", a.codes.device(), ", got ", bias.meta());
  for (const Quantized* q : {&a, &b})  // constant along K, a scale multiplies the sums: any value
    MT_CHECK(q->block_cols >= K || q->rule != ScaleRule::amax, op,
             ": scales that change along K must be powers of two (rules pow2-floor, pow2-up) or two-level (nvfp4), "
             "got blocks of ",
             q->block_rows, " x ", q->block_cols, " over K = ", K, " with rule ", scale_rule_name(q->rule));
  MT_CHECK(images >= 0 && (images == 0 || M % images == 0), op, ": ", M, " rows are not the pixels of ", images,
           " images");
  const bool nchw = images > 0 && y_on_cpu(a);
  Tensor y = empty(nchw ? Shape{images, N, M / images} : Shape{M, N}, out_dtype, a.codes.device());
  on_device(
      y.device(),
      [&] {
    cpu::ReusedB* reuse = nullptr;  // b's packed panels, kept for its next use
    if (b.prepared) {
      std::shared_ptr<cpu::ReusedB>& slot = b.prepared->as_b[b.transposed ? 1 : 0];
      if (!slot) slot = std::make_shared<cpu::ReusedB>();
      reuse = slot.get();
    }
    cpu::scaled_matmul_nt(a.codes, a.scale_inv, a.block_rows, a.block_cols, a.tensor_scale_inv, b.codes, b.scale_inv,
                          b.block_rows, b.block_cols, b.tensor_scale_inv, bias, y, reuse, images);
      },
      [&] {
    cuda::scaled_matmul_nt(a.codes, a.scale_inv, a.block_rows, a.block_cols, a.tensor_scale_inv, b.codes, b.scale_inv,
                           b.block_rows, b.block_cols, b.tensor_scale_inv, bias, y);
  });
  if (images > 0 && !nchw) y = y.view({images, M / images, N}).permute({0, 2, 1}).contiguous();  // elsewhere: a copy
  return y;
}

}  // namespace

Tensor scaled_matmul_nt(const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype) {
  return scaled_product("scaled_matmul_nt", a, b, bias, out_dtype, 0);
}

Tensor scaled_matmul_nt_images(const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype,
                               int64_t images) {
  MT_CHECK(images > 0, "scaled_matmul_nt_images: images must be > 0, got ", images);
  return scaled_product("scaled_matmul_nt_images", a, b, bias, out_dtype, images);
}

}  // namespace mixtape
