// Scaled 8-bit operands (tensor/ops/quantize.h): each scaling rule's scales against its formula,
// the codes against fp8.h's conversion of x * s, the telemetry counts, the 8-bit GEMM against the
// same GEMM on the values the codes stand for, and the unscaled casts to and from 8-bit dtypes.
#include "support/catch.h"

#include <cmath>
#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/core/scale_formulas.h"
#include "tensor/cpu/gemm.h"
#include "tensor/ops/quantize.h"
#include "tensor/safetensors.h"
#include "support/test_util.h"

using namespace mixtape;

namespace {

Tensor random_matrix(int64_t R, int64_t C, uint32_t seed, float spread_binades = 6.0f, DType dt = DType::f32) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(-spread_binades, spread_binades), sign(-1.0f, 1.0f);
  std::vector<float> v(size_t(R * C));
  for (float& x : v) x = std::copysign(std::exp2(e(rng)), sign(rng));
  return from_vector(v, {R, C}).to(dt);
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = t.to(DType::f32).contiguous();
  const float* p = static_cast<const float*>(f.raw_data());
  return std::vector<float>(p, p + f.numel());
}

std::vector<uint8_t> codes(const Quantized& q) {
  const uint8_t* p = static_cast<const uint8_t*>(q.codes.raw_data());
  return std::vector<uint8_t>(p, p + q.codes.numel());
}

// Checks every code against from_float_rn(x * s) with s = 1 / scale_inv of the element's block.
void check_codes(const Tensor& x, const Quantized& q, bits8::Overflow o = bits8::Overflow::saturate) {
  const std::vector<float> xv = values(x), inv = values(q.scale_inv);
  const std::vector<uint8_t> c = codes(q);
  const bits8::Format& f = format_of(q.codes.dtype());
  const int64_t C = q.cols(), nbc = q.scale_inv.size(1);
  for (int64_t r = 0; r < q.rows(); ++r)
    for (int64_t k = 0; k < C; ++k) {
      const float s = 1.0f / inv[size_t((r / q.block_rows) * nbc + k / q.block_cols)];
      REQUIRE(c[size_t(r * C + k)] == bits8::from_float_rn(xv[size_t(r * C + k)] * s, f, o));
    }
}

}  // namespace

TEST_CASE("quantize: per-tensor amax scaling (Transformer Engine's current scaling)", "[quantize][fp8]") {
  const Tensor x = random_matrix(37, 53, 1);
  for (DType fmt : {DType::e4m3, DType::e5m2}) {
    for (int margin : {0, 2}) {
      const Quantized q = quantize(x, {.format = fmt, .margin = margin});
      const float fmax = bits8::max_finite(format_of(fmt));
      const std::vector<float> xv = values(x);
      float amax = 0.0f;
      for (float v : xv) amax = std::max(amax, std::fabs(v));
      const float s = (fmax / amax) / std::exp2(float(margin));
      CHECK(q.scale_inv.numel() == 1);
      CHECK(values(q.scale_inv)[0] == 1.0f / s);
      CHECK(q.stats.amax == amax);
      CHECK(q.stats.count == 37 * 53);
      CHECK(q.stats.saturated == 0);
      check_codes(x, q);
      // The largest element lands on max (margin 0) or 2^margin below it.
      const std::vector<float> back = values(dequantize(q));
      for (size_t i = 0; i < xv.size(); ++i)
        CHECK(std::fabs(back[i] - xv[i]) <=
              std::fabs(xv[i]) * dtype_eps(fmt) / 2 * 1.0001f + bits8::min_subnormal(format_of(fmt)) / s);
    }
  }
}

TEST_CASE("quantize: rowwise scales, one per row (torchao)", "[quantize][fp8]") {
  Tensor x = random_matrix(9, 40, 2);
  const Quantized q = quantize(x, {.format = DType::e4m3, .layout = {1, 0}});
  REQUIRE(q.scale_inv.shape() == Shape{9, 1});
  const std::vector<float> xv = values(x), inv = values(q.scale_inv);
  for (int64_t r = 0; r < 9; ++r) {
    float amax = 0.0f;
    for (int64_t k = 0; k < 40; ++k) amax = std::max(amax, std::fabs(xv[size_t(r * 40 + k)]));
    CHECK(inv[size_t(r)] == 1.0f / (448.0f / amax));
  }
  check_codes(x, q);
}

TEST_CASE("quantize: MX blocks of 32 with the OCP floor rule saturate, the round-up rule does not", "[quantize][fp8]") {
  // One row of 64: block 0's amax is 500 (floor(log2 500) = 8 = E4M3's emax, so X = 1 and 500
  // saturates to 448); block 1's amax is 3 (X = 2^(1 - 8)).
  std::vector<float> v(64, 0.25f);
  v[5] = -500.0f;
  v[40] = 3.0f;
  const Tensor x = from_vector(v, {1, 64});
  const Quantized fl = quantize(x, {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor});
  CHECK(values(fl.scale_inv) == std::vector<float>{1.0f, std::exp2(-7.0f)});
  CHECK(fl.stats.saturated == 1);
  CHECK(values(dequantize(fl))[5] == -448.0f);
  check_codes(x, fl);
  const Quantized up = quantize(x, {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up});
  // Round up: the smallest 2^k with amax <= 448 2^k: 500 -> 2, 3 -> 2^-7 (3 <= 448 / 128 = 3.5).
  CHECK(values(up.scale_inv) == std::vector<float>{2.0f, std::exp2(-7.0f)});
  CHECK(up.stats.saturated == 0);
  check_codes(x, up);
  // Every element format: the round-up rule never saturates, and the largest element of each block
  // lands above max / 2 (nothing wasted at the top).
  for (DType fmt : {DType::e4m3, DType::e5m2, DType::e3m2, DType::e2m3, DType::e2m1}) {
    const Tensor y = random_matrix(8, 96, 3, 20.0f);
    const Quantized q = quantize(y, {.format = fmt, .layout = {1, 32}, .rule = ScaleRule::pow2_up});
    CHECK(q.stats.saturated == 0);
    const std::vector<float> inv = values(q.scale_inv), yv = values(y);
    const float fmax = bits8::max_finite(format_of(fmt));
    for (int64_t b = 0; b < q.scale_inv.numel(); ++b) {
      CHECK(scales::is_pow2(inv[size_t(b)]));
      float amax = 0.0f;
      for (int64_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(yv[size_t(b / 3 * 96 + b % 3 * 32 + k)]));
      CHECK(amax <= fmax * inv[size_t(b)]);
      CHECK(amax > fmax * inv[size_t(b)] / 2);
    }
    check_codes(y, q);
  }
}

TEST_CASE("quantize: NVFP4's two levels, an E4M3 scale per 16 under an fp32 tensor scale", "[quantize][fp8]") {
  // Note [Two-level scales]. Four blocks of 16 in one row, the tensor's amax 12: S = 448 * 6 / 12
  // = 224, and each block's d_b = e4m3(a_b * (224 / 6)).
  std::vector<float> v(64, 0.0f);
  v[3] = -12.0f, v[7] = 3.0f;                // block 0: a_b = 12, d_b = 448, s_b = 1 / (448 / 224) = 0.5
  v[16] = 1.0f;                              // block 1: 37.33 rounds to E4M3's 36, s_b = 224 / 36
  v[33] = 1e-6f;                             // block 2: 3.7e-5 is below E4M3's 2^-9 / 2: d_b = 0, s_b = 0
  const Tensor x = from_vector(v, {1, 64});  // block 3: zeros, d_b = 0
  const Quantized q = quantize(x, {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4});
  REQUIRE(q.tensor_scale_inv.defined());
  CHECK(values(q.tensor_scale_inv)[0] == 1.0f / 224.0f);
  CHECK(values(q.scale_inv) == std::vector<float>{448.0f, 36.0f, 0.0f, 0.0f});
  const std::vector<uint8_t> c = codes(q);
  const bits8::Format& f = bits8::kE2M1;
  CHECK(bits8::to_float(c[3], f) == -6.0f);
  CHECK(bits8::to_float(c[7], f) == 1.5f);
  CHECK(bits8::to_float(c[16], f) == 6.0f);  // 1 x 224 / 36 = 6.22 rounds to 6
  CHECK(c[33] == 0);
  CHECK(q.stats.flushed == 1);
  CHECK(q.stats.saturated == 0);
  // What the codes stand for: code x d_b x (1 / S).
  const std::vector<float> d = values(dequantize(q));
  CHECK(d[3] == -6.0f * 448.0f * (1.0f / 224.0f));  // -12 within an ulp: 1 / S is rounded
  CHECK(d[7] == 1.5f * 448.0f * (1.0f / 224.0f));
  CHECK(std::fabs(d[3] + 12.0f) <= 12.0f * 0x1p-23f);
  CHECK(d[16] == 6.0f * 36.0f * (1.0f / 224.0f));
  CHECK(q.stats.scale_inv_min == 0.0f);
  CHECK(q.stats.scale_inv_max == 448.0f * (1.0f / 224.0f));

  // The scale formulas at their edges: S = 1 for amax 0, inf and NaN, FLT_MAX past fp32.
  CHECK(scales::nvfp4_tensor_scale(0.0f, f) == 1.0f);
  CHECK(scales::nvfp4_tensor_scale(INFINITY, f) == 1.0f);
  CHECK(scales::nvfp4_tensor_scale(NAN, f) == 1.0f);
  CHECK(scales::nvfp4_tensor_scale(1e-38f, f) == std::numeric_limits<float>::max());
  CHECK(scales::nvfp4_tensor_scale(12.0f, bits8::kE5M2) == 448.0f * 57344.0f / 12.0f);
  CHECK(std::isnan(scales::nvfp4_block_decode(INFINITY, 224.0f, f)));
  CHECK(scales::nvfp4_block_decode(1e30f, 224.0f, f) == 448.0f);  // E4M3 saturates
  CHECK(std::isnan(scales::nvfp4_block_scale(NAN, 224.0f)));

  // A block holding inf or NaN reads back as NaN; S comes from amax inf: 1, so the finite block
  // of amax 12 gets d_b = e4m3(12 / 6) = 2.
  for (float bad : {INFINITY, NAN}) {
    std::vector<float> w = v;
    w[20] = bad;
    const Quantized qb =
        quantize(from_vector(w, {1, 64}), {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4});
    const std::vector<float> inv = values(qb.scale_inv);
    CHECK(values(qb.tensor_scale_inv)[0] == 1.0f);
    CHECK(inv[0] == 2.0f);
    CHECK(std::isnan(inv[1]));
    CHECK(std::isnan(values(dequantize(qb))[16]));
  }

  // Close to x within E2M1's precision where the block is not flushed: 16 x 16 blocks of a
  // random matrix, every element within a quarter of its block's amax.
  const Tensor r = random_matrix(40, 50, 3, 4.0f);
  const Quantized qr = quantize(r, {.format = DType::e2m1, .layout = {16, 16}, .rule = ScaleRule::nvfp4});
  CHECK(qr.scale_inv.shape() == Shape({3, 4}));
  const std::vector<float> rv = values(r), dv = values(dequantize(qr));
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t k = 0; k < 50; ++k) {
      float amax = 0.0f;
      for (int64_t ii = i / 16 * 16; ii < std::min<int64_t>(40, i / 16 * 16 + 16); ++ii)
        for (int64_t kk = k / 16 * 16; kk < std::min<int64_t>(50, k / 16 * 16 + 16); ++kk)
          amax = std::max(amax, std::fabs(rv[size_t(ii * 50 + kk)]));
      REQUIRE(std::fabs(dv[size_t(i * 50 + k)] - rv[size_t(i * 50 + k)]) <= 0.25f * amax);
    }
  CHECK_THAT(
      test::error_of([&] { quantize(r, {.format = DType::e2m1, .rule = ScaleRule::nvfp4, .given_scale = 2.0f}); }),
      Catch::Contains("takes no given scale"));
}

TEST_CASE("quantize: scale rules at the edges (zeros, tiny and huge amax, inf and NaN)", "[quantize][fp8]") {
  const bits8::Format& f = bits8::kE4M3;
  // The floor rule's exponent is clamped to E8M0's range.
  CHECK(scales::pow2_floor_exp(1e-44f, f) == -127);
  CHECK(scales::pow2_up_exp(1e-44f, f) == -127);
  CHECK(scales::pow2_up_exp(3e38f, f) == 120);  // 3e38 / 448 = 2^119.01: no finite amax reaches the top clamp
  CHECK(scales::pow2_up_exp(448.0f, f) == 0);
  CHECK(scales::pow2_up_exp(448.00003f, f) == 1);
  CHECK(scales::pow2_floor_exp(511.9f, f) == 0);
  CHECK(scales::pow2_floor_exp(512.0f, f) == 1);
  CHECK(scales::amax_scale(0.0f, 448.0f, 0, 7.0f) == 7.0f);
  CHECK(scales::amax_scale(INFINITY, 448.0f, 0, 7.0f) == 7.0f);
  CHECK(scales::amax_scale(1e-45f, 448.0f, 0, 1.0f) == 3.4028234663852886e38f);
  // A block of zeros: X = 1. A block with a NaN: X = NaN, every element reads back as NaN.
  std::vector<float> v(64, 0.0f);
  v[33] = NAN;
  const Quantized q =
      quantize(from_vector(v, {1, 64}), {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor});
  const std::vector<float> inv = values(q.scale_inv);
  CHECK(inv[0] == 1.0f);
  CHECK(std::isnan(inv[1]));
  CHECK(q.stats.nonfinite == 1);
  const std::vector<float> back = values(dequantize(q));
  CHECK(back[0] == 0.0f);
  for (int k = 32; k < 64; ++k) CHECK(std::isnan(back[size_t(k)]));
}

TEST_CASE("quantize: telemetry counts saturated, flushed and subnormal values", "[quantize][fp8]") {
  // A given scale of 1 (delayed scaling's path): E4M3 holds 2^-9 .. 448.
  const std::vector<float> v{1000.0f, -470.0f, 460.0f, 1e-4f, 2e-3f, -2e-3f, 0.0f, 1.0f, 0.01f, INFINITY};
  const Quantized q = quantize(from_vector(v, {1, 10}), {.format = DType::e4m3, .given_scale = 1.0f});
  CHECK(q.stats.count == 10);
  CHECK(q.stats.saturated == 2);  // 1000, -470 (460 is within half an ulp of 448: rounding, not saturation)
  CHECK(q.stats.flushed == 1);    // 1e-4 < 2^-10
  CHECK(q.stats.subnormal == 3);  // 2e-3, -2e-3 (~2^-9), 0.01 (< 2^-6)
  CHECK(q.stats.nonfinite == 1);
  CHECK(q.stats.amax == 1000.0f);  // the true amax, which delayed scaling records
  CHECK(values(q.scale_inv) == std::vector<float>{1.0f});
  // Without saturation E4M3 overflows to NaN.
  const Quantized n = quantize(from_vector(v, {1, 10}),
                               {.format = DType::e4m3, .overflow = bits8::Overflow::no_saturate, .given_scale = 1.0f});
  CHECK((codes(n)[0] & 0x7F) == 0x7F);
}

TEST_CASE("quantize: DeepSeek-V3 blocks of 1 x 128 and 128 x 128 over ragged shapes, 16-bit inputs",
          "[quantize][fp8]") {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    const Tensor x = random_matrix(200, 300, 4, 8.0f, dt);
    const Quantized a = quantize(x, {.format = DType::e4m3, .layout = {1, 128}, .rule = ScaleRule::pow2_up});
    CHECK(a.scale_inv.shape() == Shape{200, 3});
    check_codes(x, a);
    const Quantized w = quantize(x, {.format = DType::e4m3, .layout = {128, 128}, .rule = ScaleRule::pow2_up});
    CHECK(w.scale_inv.shape() == Shape{2, 3});
    check_codes(x, w);
    // A transposed view: the operand's rows are x's columns.
    const Quantized t =
        quantize(x.transpose(0, 1), {.format = DType::e5m2, .layout = {1, 128}, .rule = ScaleRule::pow2_up});
    CHECK(t.codes.shape() == Shape{300, 200});
    check_codes(x.transpose(0, 1).contiguous(), t);
  }
}

TEST_CASE("quantize: bad arguments name what is wrong", "[quantize][fp8]") {
  const Tensor x = random_matrix(4, 4, 5);
  CHECK_THAT(test::error_of([&] { quantize(x.reshape({16}), {}); }),
             Catch::Contains("quantize: expected a matrix [rows, K]"));
  CHECK_THAT(test::error_of([&] { quantize(x, {.format = DType::bf16}); }),
             Catch::Contains("format must be an 8-bit dtype") && Catch::Contains("bf16"));
  CHECK_THAT(test::error_of([&] {
               quantize(x, {.layout = {1, 2}, .given_scale = 2.0f});
             }),
             Catch::Contains("needs the per-tensor layout"));
  CHECK_THAT(test::error_of([&] { quantize(x, {.layout = {-1, 0}}); }), Catch::Contains("block sizes must be >= 0"));
  const Quantized a = quantize(x, {}), b = quantize(random_matrix(4, 5, 6), {});
  CHECK_THAT(test::error_of([&] { scaled_matmul_nt(a, b, Tensor(), DType::f32); }),
             Catch::Contains("reduction dims differ"));
  // A scale that changes along K must be a power of two.
  const Quantized rows_amax = quantize(x, {.layout = {1, 2}, .rule = ScaleRule::amax});
  CHECK_THAT(test::error_of([&] { scaled_matmul_nt(rows_amax, a, Tensor(), DType::f32); }),
             Catch::Contains("must be powers of two"));
}

namespace {

// The reference of scaled_matmul_nt: the GEMM on bf16 operands holding code x block scale (exact),
// the outer factors and the bias applied as the epilogue says, rounded once.
std::vector<float> reference_scaled_mm(const Quantized& a, const Quantized& b, const std::vector<float>& bias,
                                       DType out) {
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  auto widen = [&](const Quantized& q, std::vector<float>& outer) {
    const std::vector<float> inv = values(q.scale_inv);
    const std::vector<uint8_t> c = codes(q);
    const bits8::Format& f = format_of(q.codes.dtype());
    const int64_t nbc = q.scale_inv.size(1);
    const bool two_level = q.tensor_scale_inv.defined();  // d_b with the codes, 1 / S outside
    const bool along_k = q.block_cols < K || two_level;
    std::vector<float> w(size_t(q.rows() * K));
    outer.assign(size_t(q.rows()), two_level ? values(q.tensor_scale_inv)[0] : 1.0f);
    for (int64_t r = 0; r < q.rows(); ++r)
      for (int64_t k = 0; k < K; ++k) {
        const float s = inv[size_t((r / q.block_rows) * nbc + k / q.block_cols)];
        w[size_t(r * K + k)] = bits8::to_float(c[size_t(r * K + k)], f) * (along_k ? s : 1.0f);
        if (!along_k) outer[size_t(r)] = s;
      }
    return from_vector(w, {q.rows(), K}).to(DType::bf16);  // exact
  };
  std::vector<float> oa, ob;
  const Tensor wa = widen(a, oa), wb = widen(b, ob);
  std::vector<float> c(size_t(M * N));
  cpu::gemm(cpu::GemmArith::dot_bf16, M, N, K, {DType::bf16, wa.raw_data(), K, 1}, {DType::bf16, wb.raw_data(), 1, K},
            false, c.data(), N);
  std::vector<float> y(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      y[size_t(i * N + j)] =
          c[size_t(i * N + j)] * (oa[size_t(i)] * ob[size_t(j)]) + (bias.empty() ? 0.0f : bias[size_t(j)]);
  return values(from_vector(y, {M, N}).to(out));
}

}  // namespace

TEST_CASE("scaled_matmul_nt: every recipe's layout gives the GEMM of the values the codes stand for",
          "[quantize][fp8][gemm]") {
  struct Case {
    const char* name;
    QuantSpec sa, sb;
  };
  const Case cases[] = {
      {"per tensor", {.format = DType::e4m3}, {.format = DType::e4m3}},
      {"hybrid e5m2 x e4m3", {.format = DType::e5m2}, {.format = DType::e4m3}},
      {"rowwise", {.format = DType::e4m3, .layout = {1, 0}}, {.format = DType::e4m3, .layout = {1, 0}}},
      {"mx floor",
       {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor},
       {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor}},
      {"mxfp4 up",
       {.format = DType::e2m1, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
       {.format = DType::e2m1, .layout = {1, 32}, .rule = ScaleRule::pow2_up}},
      {"mxfp6",
       {.format = DType::e3m2, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
       {.format = DType::e2m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up}},
      {"deepseek",
       {.format = DType::e4m3, .layout = {1, 128}, .rule = ScaleRule::pow2_up},
       {.format = DType::e4m3, .layout = {128, 128}, .rule = ScaleRule::pow2_up}},
      {"mixed: per tensor x blocks",
       {.format = DType::e4m3},
       {.format = DType::e4m3, .layout = {128, 128}, .rule = ScaleRule::pow2_up}},
      {"nvfp4: 1 x 16 x 16 x 16",
       {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4},
       {.format = DType::e2m1, .layout = {16, 16}, .rule = ScaleRule::nvfp4}},
      {"nvfp4 scales on e5m2 x e2m1",
       {.format = DType::e5m2, .layout = {1, 16}, .rule = ScaleRule::nvfp4},
       {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4}},
      {"nvfp4 x per tensor",
       {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4},
       {.format = DType::e4m3}},
  };
  for (const Case& c : cases) {
    for (auto [M, N, K] : {std::array<int64_t, 3>{5, 7, 33}, {64, 80, 300}, {130, 257, 129}}) {
      INFO(c.name << " M=" << M << " N=" << N << " K=" << K);
      const Quantized a = quantize(random_matrix(M, K, 7, 5.0f, DType::bf16), c.sa);
      const Quantized b = quantize(random_matrix(N, K, 8, 5.0f, DType::bf16), c.sb);
      std::vector<float> bias(static_cast<size_t>(N));
      for (int64_t j = 0; j < N; ++j) bias[size_t(j)] = 0.25f * float(j % 7) - 0.5f;
      for (DType out : {DType::f32, DType::bf16, DType::f16}) {
        CHECK(values(scaled_matmul_nt(a, b, Tensor(), out)) == reference_scaled_mm(a, b, {}, out));
        CHECK(values(scaled_matmul_nt(a, b, from_vector(bias, {N}), out)) == reference_scaled_mm(a, b, bias, out));
      }
      // Close to the product of the unquantized values within the formats' precision.
      const std::vector<float> y = values(scaled_matmul_nt(a, b, Tensor(), DType::f32));
      const std::vector<float> da = values(dequantize(a)), db = values(dequantize(b));
      for (int64_t i = 0; i < M; i += 3)
        for (int64_t j = 0; j < N; j += 5) {
          double ref = 0.0, mag = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            ref += double(da[size_t(i * K + k)]) * double(db[size_t(j * K + k)]);
            mag += std::fabs(double(da[size_t(i * K + k)]) * double(db[size_t(j * K + k)]));
          }
          CHECK(std::fabs(double(y[size_t(i * N + j)]) - ref) <= mag * 1e-6 + 1e-30);
        }
    }
  }
}

TEST_CASE("8-bit dtypes: unscaled casts, and checkpoints in safetensors' F8 dtypes", "[quantize][fp8]") {
  const std::vector<float> v{1.0f, -0.3f, 448.0f, 500.0f, 1e-3f, 57344.0f, 61440.0f};
  const Tensor x = from_vector(v, {7});
  const std::vector<float> e4 = values(x.to(DType::e4m3));
  CHECK(e4[0] == 1.0f);
  CHECK(e4[1] == -0.3125f);
  CHECK(e4[2] == 448.0f);
  CHECK(std::isnan(e4[3]));               // a cast does not saturate (torch's .to(float8_e4m3fn))
  CHECK(e4[4] == std::exp2(-10.0f) * 2);  // 1e-3 rounds to the subnormal 2^-9
  const std::vector<float> e5 = values(x.to(DType::e5m2));
  CHECK(e5[5] == 57344.0f);
  CHECK(std::isinf(e5[6]));
  // f64 rounds once (to odd in float first): 1 + 2^-4 + 2^-40 is above the tie between 1 and 1.125.
  CHECK(values(from_vector(std::vector<double>{1.0 + 0.0625 + std::exp2(-40.0)}, {1}, DType::f64).to(DType::e4m3))[0] ==
        1.125f);
  CHECK_THAT(test::error_of([&] { x.to(DType::e4m3, Rounding::stochastic); }), Catch::Contains("not a cast"));
  CHECK_THAT(test::error_of([&] { x.to(DType::e4m3).to(DType::i64); }), Catch::Contains("cannot cast e4m3 to i64"));
  test::TempDir dir("fp8");
  const Tensor c4 = x.to(DType::e4m3), c5 = x.to(DType::e5m2);
  save_safetensors(dir / "a.safetensors", {{"a", c4}, {"b", c5}});
  const TensorDict back = load_safetensors(dir / "a.safetensors");
  CHECK(back.at("a").dtype() == DType::e4m3);
  CHECK(back.at("b").dtype() == DType::e5m2);
  CHECK(std::memcmp(back.at("a").raw_data(), c4.raw_data(), 7) == 0);
  CHECK_THAT(test::error_of([&] {
               save_safetensors(dir / "b.safetensors", {{"c", x.to(DType::e2m1)}});
             }),
             Catch::Contains("'c' is e2m1, which safetensors cannot hold"));
}

TEST_CASE("Quantized::t(): a per-tensor operand transposed is the operand of the transposed matrix",
          "[quantize][fp8]") {
  const Tensor x = random_matrix(37, 20, 9, 4.0f, DType::bf16), y = random_matrix(11, 20, 10, 4.0f, DType::bf16);
  const Quantized qx = quantize(x, {}), qxt = quantize(x.transpose(0, 1), {});
  CHECK(values(qx.t().codes) == values(qxt.codes));
  CHECK(values(qx.t().scale_inv) == values(qxt.scale_inv));
  // As the GEMM's b operand: (11, 20) x (37, 20)^T.
  const Quantized qy = quantize(y, {});
  CHECK(values(scaled_matmul_nt(qy, qx, Tensor(), DType::f32)) ==
        values(scaled_matmul_nt(qy, qxt.t(), Tensor(), DType::f32)));
  CHECK(values(scaled_matmul_nt(qy.t().t(), qx, Tensor(), DType::f32)) ==
        values(scaled_matmul_nt(qy, qx, Tensor(), DType::f32)));
  // (20, 11)^T ... the wgrad shape: a = y^T [20, 11] -> K = 11 with b = z^T [5, 11].
  const Tensor z = random_matrix(11, 5, 11, 4.0f, DType::bf16);
  const Quantized qz = quantize(z, {});
  CHECK(
      values(scaled_matmul_nt(qy.t(), qz.t(), Tensor(), DType::f32)) ==
      values(scaled_matmul_nt(quantize(y.transpose(0, 1), {}), quantize(z.transpose(0, 1), {}), Tensor(), DType::f32)));
}

TEST_CASE("scaled_matmul_nt_images: the product's rows as the pixels of NCHW images, bit for bit", "[quantize][fp8]") {
  // Note [Image rows]: y [images, N, M / images] holds scaled_matmul_nt's (n HW + p, j) at (n, j, p),
  // for images whose pixels do and do not fill the epilogue's tiles of 32 rows, with and without
  // a bias, into bf16, f16 and f32.
  uint32_t seed = 40;
  for (const auto& [images, HW, N, K] :
       std::vector<std::array<int64_t, 4>>{{2, 49, 5, 9}, {3, 64, 33, 20}, {1, 7, 3, 4}, {4, 100, 16, 1}})
    for (DType out : {DType::bf16, DType::f16, DType::f32})
      for (bool with_bias : {false, true}) {
        INFO(images << " images of " << HW << " pixels, N " << N << ", K " << K << ", " << dtype_name(out)
                    << (with_bias ? ", bias" : ""));
        const int64_t M = images * HW;
        const Quantized a = quantize(random_matrix(M, K, seed++, 4.0f, DType::bf16), {});
        const Quantized b = quantize(random_matrix(N, K, seed++, 4.0f, DType::bf16), {.layout = {1, 0}});
        const Tensor bias = with_bias ? random_matrix(1, N, seed++).reshape({N}) : Tensor();
        const Tensor y = scaled_matmul_nt_images(a, b, bias, out, images);
        REQUIRE(y.shape() == Shape({images, N, HW}));
        const Tensor want = scaled_matmul_nt(a, b, bias, out).view({images, HW, N}).permute({0, 2, 1});
        CHECK(values(y) == values(want));
      }
  const Quantized a = quantize(random_matrix(10, 4, 1), {}), b = quantize(random_matrix(3, 4, 2), {});
  CHECK_THROWS_WITH(scaled_matmul_nt_images(a, b, Tensor(), DType::f32, 3),
                    Catch::Contains("10 rows are not the pixels of 3 images"));
  CHECK_THROWS_WITH(scaled_matmul_nt_images(a, b, Tensor(), DType::f32, 0), Catch::Contains("images must be > 0"));
}

TEST_CASE("quantize: every conversion path gives the reference's codes and counts", "[quantize][fp8][convert]") {
  // Values across every format's range and beyond, with zeros, f32 subnormals, ties, inf and NaN.
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> v(17 * 241);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (i % 4) {
      case 0: v[i] = std::bit_cast<float>(bits(rng)); break;  // any pattern: NaN, inf, subnormal
      case 1: v[i] = std::ldexp(float(int(bits(rng) % 64) - 32) / 16.0f, int(bits(rng) % 40) - 20); break;
      case 2: v[i] = std::ldexp(1.0f + float(bits(rng) % 16) / 16.0f, int(bits(rng) % 60) - 30); break;
      default: v[i] = i % 8 == 3 ? 0.0f : -std::ldexp(1.0f, -int(bits(rng) % 150)); break;
    }
  }
  for (DType in : {DType::f32, DType::bf16}) {
    const Tensor x = from_vector(v, {1, int64_t(v.size())}).to(in).reshape({17, 241});
    for (DType fmt : {DType::e4m3, DType::e5m2, DType::e3m2, DType::e2m3, DType::e2m1}) {
      for (const QuantSpec& spec :
           {QuantSpec{.format = fmt, .given_scale = 1.0f},
            QuantSpec{.format = fmt, .overflow = bits8::Overflow::no_saturate, .given_scale = 1.0f},
            QuantSpec{.format = fmt, .layout = {1, 32}, .rule = ScaleRule::pow2_floor},
            QuantSpec{.format = fmt, .layout = {1, 0}}}) {
        std::vector<std::vector<uint8_t>> all;
        std::vector<QuantStats> stats;
        for (const std::string& path : cpu::conversion_paths()) {
          test::ConversionPathScope scope(path);
          for (const Tensor& view : {x, x.transpose(0, 1).contiguous().transpose(0, 1)}) {
            const Quantized q = quantize(view, spec);
            all.push_back(codes(q));
            stats.push_back(q.stats);
          }
        }
        INFO(dtype_name(in) << " -> " << dtype_name(fmt));
        for (size_t i = 1; i < all.size(); ++i) {
          CHECK(all[i] == all[0]);
          CHECK(stats[i].saturated == stats[0].saturated);
          CHECK(stats[i].flushed == stats[0].flushed);
          CHECK(stats[i].subnormal == stats[0].subnormal);
          CHECK(stats[i].nonfinite == stats[0].nonfinite);
          CHECK(std::bit_cast<uint32_t>(stats[i].amax) == std::bit_cast<uint32_t>(stats[0].amax));
        }
      }
    }
  }
}

TEST_CASE("quantize: a bf16 operand's block amaxes are its values', on every conversion path",
          "[quantize][fp8][convert]") {
  // The AVX-512 path takes the amax of contiguous bf16 runs from their bits: the scales must be
  // those of the same values widened to f32, over rows longer than a chunk (256) and ragged, with
  // signed zeros, subnormals and inf; and a row holding a NaN gets the NaN amax's scale.
  std::mt19937 rng(29);
  std::uniform_int_distribution<uint32_t> bits;
  const int64_t R = 9, C = 613;
  std::vector<float> v(size_t(R * C));
  for (size_t i = 0; i < v.size(); ++i) {
    const float m = std::ldexp(1.0f + float(bits(rng) % 128) / 128.0f, int(bits(rng) % 280) - 140);
    v[i] = bits(rng) % 2 ? -m : m;
    if (i % 97 == 5) v[i] = -0.0f;
  }
  v[size_t(2 * C + 300)] = -INFINITY;              // row 2
  v[size_t(4 * C + 612)] = NAN;                    // row 4, the last element
  v[size_t(6 * C + 3)] = -std::ldexp(1.0f, -130);  // a bf16 subnormal
  const Tensor x16 = from_vector(v, {R, C}).to(DType::bf16), x32 = x16.to(DType::f32);
  auto scale_bits = [](const Quantized& q) {
    std::vector<uint32_t> out;
    for (double s : q.scale_inv.to_vector()) out.push_back(std::bit_cast<uint32_t>(float(s)));
    return out;
  };
  for (const QuantSpec& spec : {QuantSpec{.format = DType::e4m3}, QuantSpec{.format = DType::e4m3, .layout = {1, 0}},
                                QuantSpec{.format = DType::e5m2, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
                                QuantSpec{.format = DType::e4m3, .layout = {4, 128}, .rule = ScaleRule::pow2_floor}}) {
    const Quantized want = quantize(x32, spec);
    for (const std::string& path : cpu::conversion_paths()) {
      INFO("path " << path << ", blocks " << spec.layout.block_rows << " x " << spec.layout.block_cols);
      test::ConversionPathScope scope(path);
      const Quantized got = quantize(x16, spec);
      CHECK(scale_bits(got) == scale_bits(want));
      CHECK(codes(got) == codes(want));
    }
  }
}

TEST_CASE("quantize: a contiguous per-tensor operand, one run, gives its rows' codes, scale and stats",
          "[quantize][fp8][convert]") {
  // Note [One run per tensor] in tensor/cpu/quantize.cpp: the same matrix with padded rows (not one
  // run) is quantized row by row; short rows (a 3 x 3 column matrix over one channel), runs
  // across rows and past a piece (2^14 values), inf and NaN, and given (delayed) scales.
  std::mt19937 rng(37);
  std::uniform_int_distribution<uint32_t> bits;
  for (const auto& [R, C] : {std::pair<int64_t, int64_t>{5003, 9}, {3, 7000}, {1, 40000}, {64, 256}}) {
    std::vector<float> v(size_t(R * (C + 3)));
    for (float& e : v) e = std::ldexp(float(int(bits(rng) % 256) - 128) / 64.0f, int(bits(rng) % 30) - 15);
    for (bool special : {false, true}) {
      if (special) {
        v[size_t(R * (C + 3) / 2)] = INFINITY;
        v[size_t(R * (C + 3) / 3)] = -NAN;
      }
      const Tensor padded = from_vector(v, {R, C + 3});
      for (DType in : {DType::f32, DType::bf16}) {
        const Tensor rows = padded.to(in).narrow(1, 0, C), run = rows.contiguous();
        if (R > 1) REQUIRE(!rows.is_contiguous());  // (one row is one run either way)
        for (const QuantSpec& spec : {QuantSpec{.format = DType::e4m3}, QuantSpec{.format = DType::e5m2},
                                      QuantSpec{.format = DType::e4m3, .given_scale = 0.5f}}) {
          for (const std::string& path : cpu::conversion_paths()) {
            INFO("R C " << R << " " << C << ", " << dtype_name(in) << " -> " << dtype_name(spec.format) << ", path "
                        << path << (special ? ", inf and NaN" : ""));
            test::ConversionPathScope scope(path);
            const Quantized want = quantize(rows, spec), got = quantize(run, spec);
            CHECK(codes(got) == codes(want));
            CHECK(std::bit_cast<uint32_t>(float(got.scale_inv.to_vector()[0])) ==
                  std::bit_cast<uint32_t>(float(want.scale_inv.to_vector()[0])));
            CHECK(got.stats.count == want.stats.count);
            CHECK(got.stats.saturated == want.stats.saturated);
            CHECK(got.stats.flushed == want.stats.flushed);
            CHECK(got.stats.subnormal == want.stats.subnormal);
            CHECK(got.stats.nonfinite == want.stats.nonfinite);
            CHECK(std::bit_cast<uint32_t>(got.stats.amax) == std::bit_cast<uint32_t>(want.stats.amax));
          }
        }
      }
    }
  }
}

TEST_CASE("scaled_matmul_nt: an operand used again as B gives the bits of a fresh one, either orientation",
          "[quantize][fp8]") {
  // Note [Reused 8-bit B operands] in tensor/cpu/quantize.cpp: from its second use as B an operand
  // stays packed, per orientation (w, and w.t() as an LSTM's dgrad reads it), and the GEMM runs
  // over the packed panels by rows of A; the result is the GEMM of a fresh copy (nothing kept),
  // over the threads' row split, the serial size, a split-K shape (not kept), A with block
  // scales, B with block scales (not kept), and a path changed under a packed B.
  struct Shape3 {
    int64_t M, N, K;
  };
  const std::vector<std::string> paths = cpu::gemm_paths();
  auto bits = [](const Tensor& y) {
    std::vector<uint32_t> out;
    for (float v : values(y)) out.push_back(std::bit_cast<uint32_t>(v));
    return out;
  };
  auto fresh = [](Quantized q) {
    q.prepared = nullptr;  // no entry: packed at each call
    return q;
  };
  uint32_t seed = 90;
  for (const Shape3& s :
       {Shape3{64, 1024, 256}, Shape3{64, 256, 1024}, Shape3{5, 7, 9}, Shape3{40, 48, 6151}, Shape3{300, 70, 96}})
    for (const QuantSpec& spec : {QuantSpec{.format = DType::e4m3}, QuantSpec{.format = DType::e4m3, .layout = {1, 0}},
                                  QuantSpec{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor}}) {
      INFO("M N K " << s.M << " " << s.N << " " << s.K << ", blocks " << spec.layout.block_rows << " x "
                    << spec.layout.block_cols);
      const Quantized w = quantize(random_matrix(s.N, s.K, seed++), spec);  // [N, K]
      const Tensor bias = random_matrix(1, s.N, seed++).reshape({s.N});
      // w^T [K, N] as an operand quantized by rows along N: per tensor, w's codes transposed.
      const bool per_tensor = spec.layout.block_rows == 0 && spec.layout.block_cols == 0;
      const Quantized wt = per_tensor ? w.t() : quantize(random_matrix(s.K, s.N, seed++), spec);
      for (int use = 0; use < 4; ++use) {
        INFO("use " << use);
        const test::GemmPathScope scope(use == 3 ? paths.front() : paths.back());
        const Quantized x = quantize(random_matrix(s.M, s.K, seed++), spec);
        CHECK(bits(scaled_matmul_nt(x, w, bias, DType::f32)) == bits(scaled_matmul_nt(x, fresh(w), bias, DType::f32)));
        const Quantized d = quantize(random_matrix(s.M, s.N, seed++), spec);
        CHECK(bits(scaled_matmul_nt(d, wt, Tensor(), DType::bf16)) ==
              bits(scaled_matmul_nt(d, fresh(wt), Tensor(), DType::bf16)));
      }
    }
}

TEST_CASE("scaled_matmul_nt: an empty reduction gives the bias", "[quantize][fp8]") {
  const Quantized a = quantize(zeros({3, 0}), {}), b = quantize(zeros({2, 0}), {});
  CHECK(values(scaled_matmul_nt(a, b, from_vector(std::vector<float>{1.5f, -2.0f}, {2}), DType::f32)) ==
        std::vector<float>{1.5f, -2.0f, 1.5f, -2.0f, 1.5f, -2.0f});
}
