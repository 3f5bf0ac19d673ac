#include "tensor/ops/quantize.h"

#include <algorithm>
#include <vector>

#include "tensor/core/scale_formulas.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/quantize.h"
#include "tensor/ops/common.h"

namespace mixtape {

const char* scale_rule_name(ScaleRule r) {
  switch (r) {
    case ScaleRule::amax: return "amax";
    case ScaleRule::pow2_floor: return "pow2-floor";
    case ScaleRule::pow2_up: return "pow2-up";
  }
  return "?";
}

namespace {

int64_t blocks_of(int64_t n, int64_t b) { return b > 0 ? (n + b - 1) / b : 0; }

// The CUDA backend has no 8-bit kernels yet: the 8-bit path runs on the CPU.
[[noreturn]] void no_cuda(const char* op) {
  throw Error(detail::cat(op, ": 8-bit operands run on the CPU only (the CUDA backend has no 8-bit kernels yet)"));
}

// s of one block from its amax under the spec's rule (Note [Scaling rules]).
float block_scale(const QuantSpec& spec, const bits8::Format& f, float amax) {
  if (spec.given_scale > 0.0f) return spec.given_scale;
  if (spec.rule == ScaleRule::amax)
    return scales::amax_scale(amax, bits8::max_finite(f), spec.margin, spec.fallback_scale);
  if (!scales::finite(amax)) return amax;  // inf or NaN: every element of the block reads back as NaN
  if (amax == 0.0f) return 1.0f;
  const int k = spec.rule == ScaleRule::pow2_floor ? scales::pow2_floor_exp(amax, f) : scales::pow2_up_exp(amax, f);
  return scales::pow2(-k);  // s = 1 / X: exact, k in [-127, 127]
}

}  // namespace

Quantized quantize(const Tensor& x, const QuantSpec& spec) {
  ops::check_same("quantize", {&x});
  ops::check_floating("quantize", x);
  MT_CHECK(x.dim() == 2, "quantize: expected a matrix [rows, K], got ", x.meta());
  MT_CHECK(is_8bit(spec.format), "quantize: format must be an 8-bit dtype (e4m3, e5m2, e3m2, e2m3, e2m1), got ",
           dtype_name(spec.format));
  MT_CHECK(spec.layout.block_rows >= 0 && spec.layout.block_cols >= 0, "quantize: block sizes must be >= 0, got ",
           spec.layout.block_rows, " x ", spec.layout.block_cols);
  const int64_t R = x.size(0), C = x.size(1);
  Quantized q;
  q.block_rows = spec.layout.block_rows > 0 ? spec.layout.block_rows : std::max<int64_t>(R, 1);
  q.block_cols = spec.layout.block_cols > 0 ? spec.layout.block_cols : std::max<int64_t>(C, 1);
  MT_CHECK(spec.given_scale <= 0.0f || (q.block_rows >= R && q.block_cols >= C),
           "quantize: a given scale (delayed scaling) needs the per-tensor layout, got blocks of ", q.block_rows, " x ",
           q.block_cols, " over ", x.meta());
  q.rule = spec.rule;
  const bits8::Format& f = format_of(spec.format);
  const int64_t nbr = blocks_of(R, q.block_rows), nbc = blocks_of(C, q.block_cols);
  q.codes = empty({R, C}, spec.format, x.device());
  q.scale_inv = empty({nbr, nbc}, DType::f32, x.device());
  on_device(
      x.device(),
      [&] {
    std::vector<float> s(size_t(nbr * nbc));
    cpu::block_amax(x, q.block_rows, q.block_cols, s.data());  // amax, then s in place
    for (float& v : s) v = block_scale(spec, f, v);
    const cpu::QuantCounts n = cpu::quantize_blocks(x, q.block_rows, q.block_cols, s.data(), f, spec.overflow,
                                                    static_cast<uint8_t*>(q.codes.raw_data()));
    float* inv = static_cast<float*>(q.scale_inv.raw_data());
    for (size_t i = 0; i < s.size(); ++i) inv[i] = 1.0f / s[i];  // exact for a power of two
    q.stats = {R * C, n.saturated, n.flushed, n.subnormal, n.nonfinite, n.amax, 0.0f, 0.0f};
    if (!s.empty()) {
      q.stats.scale_inv_min = *std::min_element(inv, inv + s.size());
      q.stats.scale_inv_max = *std::max_element(inv, inv + s.size());
    }
      },
      [&] { no_cuda("quantize"); });
  return q;
}

Tensor dequantize(const Quantized& q, DType dtype) {
  MT_CHECK(q.codes.defined() && q.codes.dim() == 2 && is_8bit(q.codes.dtype()),
           "dequantize: expected 8-bit codes [rows, cols]");
  MT_CHECK(is_floating(dtype), "dequantize: expected a floating dtype, got ", dtype_name(dtype));
  // code x scale in f32 (exact for power-of-two scales), then one rounding to dtype.
  const int64_t R = q.rows(), C = q.cols();
  Tensor wide = q.codes.to(DType::f32);
  on_device(
      q.codes.device(),
      [&] {
    float* w = static_cast<float*>(wide.raw_data());
    const float* inv = static_cast<const float*>(q.scale_inv.contiguous().raw_data());
    const int64_t nbc = q.scale_inv.size(1);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) w[r * C + c] *= inv[(r / q.block_rows) * nbc + c / q.block_cols];
      },
      [&] { no_cuda("dequantize"); });
  return wide.to(dtype);
}

namespace {

// One operand of the 8-bit GEMM: its codes as GEMM operand `X` (transposed for B), with the
// scales that change along K as block scales and those constant along K as outer factors.
struct ScaledOperand {
  cpu::GemmOperand op;
  Tensor outer;   // f32 [rows]: the factor of each row (undefined: none)
  Tensor blocks;  // the block scales op.scales points into
};

ScaledOperand scaled_operand(const Quantized& q, bool as_b, const char* who) {
  const int64_t R = q.rows(), K = q.cols();
  const Tensor inv = q.scale_inv.contiguous();
  const int64_t nbc = inv.size(1);
  const void* p = q.codes.raw_data();
  ScaledOperand s;
  // A: element (i, k) at p[i K + k]; B = q^T: element (k, j) at p[j K + k].
  s.op = as_b ? cpu::GemmOperand{q.codes.dtype(), p, 1, K} : cpu::GemmOperand{q.codes.dtype(), p, K, 1};
  if (q.block_cols >= K) {  // constant along K: a factor of each row's dot products
    const float* v = static_cast<const float*>(inv.raw_data());
    std::vector<float> per_row(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) per_row[size_t(r)] = v[r / q.block_rows];
    s.outer = from_vector(per_row, {R});
  } else {
    const float* v = static_cast<const float*>(inv.raw_data());
    for (int64_t i = 0; i < inv.numel(); ++i)
      MT_CHECK(scales::is_pow2(v[i]) || v[i] != v[i], who,
               ": scales that change along K must be powers of two (rules pow2-floor, pow2-up), got ", v[i]);
    s.op.scales = as_b ? cpu::GemmScales{v, q.block_cols, q.block_rows, 1, nbc, 0, 0}
                       : cpu::GemmScales{v, q.block_rows, q.block_cols, nbc, 1, 0, 0};
    s.blocks = inv;
  }
  return s;
}

}  // namespace

Tensor scaled_matmul_nt(const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype) {
  const char* op = "scaled_matmul_nt";
  for (const Quantized* q : {&a, &b})
    MT_CHECK(q->codes.defined() && q->codes.dim() == 2 && is_8bit(q->codes.dtype()) && q->codes.is_contiguous(), op,
             ": expected quantized operands [rows, K] (quantize())");
  MT_CHECK(a.cols() == b.cols(), op, ": reduction dims differ: ", a.codes.meta(), " x ", b.codes.meta(), "^T");
  MT_CHECK(out_dtype == DType::f32 || is_16bit(out_dtype), op, ": out_dtype must be f32, f16 or bf16, got ",
           dtype_name(out_dtype));
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  if (bias.defined())
    MT_CHECK(bias.dim() == 1 && bias.size(0) == N && is_floating(bias.dtype()), op, ": bias must be [", N, "], got ",
             bias.meta());
  Tensor y = empty({M, N}, out_dtype, a.codes.device());
  on_device(
      a.codes.device(),
      [&] {
    const ScaledOperand sa = scaled_operand(a, false, op), sb = scaled_operand(b, true, op);
    std::vector<float> c(size_t(M * N));
    cpu::gemm(cpu::GemmArith::dot_bf16, M, N, K, sa.op, sb.op, false, c.data(), N);
    cpu::scaled_gemm_epilogue(c.data(), M, N, sa.outer.defined() ? sa.outer.data<float>() : nullptr,
                              sb.outer.defined() ? sb.outer.data<float>() : nullptr, bias, y);
      },
      [&] { no_cuda(op); });
  return y;
}

}  // namespace mixtape
