// cuda/quantize.cu against the CPU kernels (tensor/cpu/quantize.cpp): quantize bit for bit (codes,
// scale_inv, NVFP4's tensor scale and every statistic) for each scaling rule and layout, every 8-bit format, f32 / bf16 /
// f16 inputs, ragged and transposed inputs, blocks holding inf and NaN, a given scale;
// scaled_matmul_nt (the 8-bit operands widened in cuda/gemm.cu's tiles, Note [8-bit operands])
// within the fp32-summation tolerance of Note [GEMM tolerance], for the per-tensor, rowwise, MX
// and block layouts, with and without a bias, f32, bf16 and f16 outputs, ragged M, N and K.
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/gemm.h"
#include "mixtape.h"
#include "tensor/ops/quantize.h"
#include "tests/cuda/cuda_test.h"
#include "tests/cuda/gemm_check.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const DType kFormats[] = {DType::e4m3, DType::e5m2, DType::e3m2, DType::e2m3, DType::e2m1};
const DType kInputs[] = {DType::f32, DType::bf16, DType::f16};

// The recipes' layouts and rules (Note [Scaled 8-bit operands] in tensor/ops/quantize.h).
struct Recipe {
  const char* name;
  ScaleLayout layout;
  ScaleRule rule;
};
const Recipe kRecipes[] = {
    {"per tensor", {0, 0}, ScaleRule::amax},
    {"rowwise", {1, 0}, ScaleRule::amax},
    {"mx floor", {1, 32}, ScaleRule::pow2_floor},
    {"mx up", {1, 32}, ScaleRule::pow2_up},
    {"blocks 128 x 128", {128, 128}, ScaleRule::pow2_up},
    {"nvfp4 1 x 16", {1, 16}, ScaleRule::nvfp4},
    {"nvfp4 16 x 16", {16, 16}, ScaleRule::nvfp4},
};

// R x C values +-2^e, e uniform in [-binades, binades], with zeros and an f32 subnormal planted;
// rounded once to dt, on the CPU.
Tensor spread(int64_t R, int64_t C, DType dt, uint64_t seed, double binades = 8.0) {
  const std::vector<double> u = random({R * C}, DType::f64, seed, -binades, binades).to_vector();
  const std::vector<double> s = random({R * C}, DType::f64, seed + 1, -1.0, 1.0).to_vector();
  std::vector<double> v(u.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::copysign(std::exp2(u[i]), s[i]);
    if (i % 23 == 4) v[i] = 0.0;
    if (i % 41 == 9) v[i] = -std::ldexp(1.0, -140);
  }
  return from_vector(v, {R, C}, dt);
}

uint32_t bits(float v) { return std::bit_cast<uint32_t>(v); }

// The same bits on both devices: codes, scale_inv (NaN payloads included) and every statistic.
void require_same_quantized(const Quantized& got, const Quantized& want, const std::string& what) {
  INFO(what);
  require_bit_identical(got.codes, want.codes, what + ": codes");
  require_bit_identical(got.scale_inv, want.scale_inv, what + ": scale_inv");
  REQUIRE(got.tensor_scale_inv.defined() == want.tensor_scale_inv.defined());
  if (want.tensor_scale_inv.defined())
    require_bit_identical(got.tensor_scale_inv, want.tensor_scale_inv, what + ": tensor_scale_inv");
  CHECK(got.block_rows == want.block_rows);
  CHECK(got.block_cols == want.block_cols);
  const QuantStats &g = got.stats, &w = want.stats;
  CHECK(g.count == w.count);
  CHECK(g.saturated == w.saturated);
  CHECK(g.flushed == w.flushed);
  CHECK(g.subnormal == w.subnormal);
  CHECK(g.nonfinite == w.nonfinite);
  CHECK(bits(g.amax) == bits(w.amax));
  CHECK(bits(g.scale_inv_min) == bits(w.scale_inv_min));
  CHECK(bits(g.scale_inv_max) == bits(w.scale_inv_max));
}

// quantize on the CPU and on the GPU copy of x in x's own layout (a transposed view stays one).
void check_quantize(const Tensor& x, const QuantSpec& spec, const std::string& what) {
  const Quantized want = quantize(x, spec);
  const Quantized got = quantize(same_layout_on(x, gpu()), spec);
  REQUIRE(got.codes.device() == gpu());
  require_same_quantized(got, want, what);
}

std::string describe(const char* recipe, DType format, const Tensor& x) {
  return detail::cat(recipe, ", ", dtype_name(format), " from ", x.meta());
}

}  // namespace

TEST_CASE("cuda quantize equals the CPU bit for bit for every rule, format and input dtype", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Recipe& r : kRecipes)
    for (DType format : kFormats)
      for (DType input : kInputs)
        // Ragged: 77 = 2 x 32 + 13 columns; 131 x 135 over blocks of 128 (and several CUDA blocks).
        for (const Shape& shape : {Shape{19, 77}, Shape{131, 135}}) {
          const Tensor x = spread(shape[0], shape[1], input, seed++);
          check_quantize(x, {.format = format, .layout = r.layout, .rule = r.rule}, describe(r.name, format, x));
        }
  // The amax rule's margin, and DeepSeek's 1 x 128 activations.
  const Tensor x = spread(9, 300, DType::bf16, seed++);
  check_quantize(x, {.format = DType::e4m3, .margin = 3}, "per tensor, margin 3");
  check_quantize(x, {.format = DType::e5m2, .layout = {1, 0}, .margin = 1}, "rowwise, margin 1");
  check_quantize(x, {.format = DType::e4m3, .layout = {1, 128}, .rule = ScaleRule::pow2_up}, "1 x 128, pow2 up");
  check_quantize(x, {.format = DType::e4m3, .layout = {3, 5}, .rule = ScaleRule::pow2_floor}, "blocks of 3 x 5");
}

TEST_CASE("cuda quantize: transposed and strided inputs, a given scale, no saturation, edge values", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType input : kInputs) {
    // A transposed view (strides 1, 19) and every other element of a transposed buffer.
    const Tensor t = spread(77, 19, input, seed++).t();
    REQUIRE_FALSE(t.is_contiguous());
    const Tensor s = strided_copy(spread(19, 77, input, seed++));
    for (const Recipe& r : kRecipes) {
      check_quantize(t, {.format = DType::e4m3, .layout = r.layout, .rule = r.rule},
                     describe(r.name, DType::e4m3, t) + " (transposed)");
      check_quantize(s, {.format = DType::e2m1, .layout = r.layout, .rule = r.rule},
                     describe(r.name, DType::e2m1, s) + " (strided)");
    }
  }
  // Delayed scaling's given scale: no amax pass; values past the range saturate, or overflow
  // without saturation (E4M3 to NaN, E5M2 to inf).
  const Tensor x = spread(13, 29, DType::f32, seed++, 12.0);
  for (DType format : {DType::e4m3, DType::e5m2, DType::e2m3})
    for (auto overflow : {bits8::Overflow::saturate, bits8::Overflow::no_saturate})
      for (float given : {0.75f, 3.0f})
        check_quantize(x, {.format = format, .overflow = overflow, .given_scale = given},
                       detail::cat("given scale ", given, ", ", dtype_name(format), ", saturate ",
                                   overflow == bits8::Overflow::saturate));
  // All zeros (the fallback scale), values so tiny that s overflows fp32 (FLT_MAX), one element.
  check_quantize(zeros({5, 40}), {.format = DType::e4m3, .fallback_scale = 2.0f}, "zeros, amax rule");
  check_quantize(zeros({5, 40}), {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
                 "zeros, pow2 up");
  check_quantize(full({4, 9}, std::ldexp(1.0, -146)), {.format = DType::e5m2}, "tiny amax");
  check_quantize(full({1, 1}, -3.0), {.format = DType::e2m1, .layout = {1, 32}, .rule = ScaleRule::pow2_floor},
                 "one element");
  // No elements: no blocks, statistics of zeros.
  check_quantize(zeros({0, 7}), {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up}, "0 rows");
  check_quantize(zeros({3, 0}), {.format = DType::e5m2}, "0 columns");
}

TEST_CASE("cuda quantize: blocks holding inf and NaN, and the range of their scales", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  // 3 rows of 100 in MX blocks: 4 blocks a row, 12 in all (even); 3 x 68: 9 blocks (odd, so the
  // last scale is unpaired in the CPU's minmax). NaN or inf planted at (row, col) so that the
  // power-of-two rules' NaN scales sit first, in the middle, last, or everywhere.
  struct Plant {
    const char* name;
    int64_t cols;
    std::vector<std::pair<int64_t, int64_t>> nan, inf, small;  // small: divided by 2^20
  };
  const std::vector<std::pair<int64_t, int64_t>> last_block_68 = {{2, 64}, {2, 65}, {2, 66}, {2, 67}};
  const std::vector<Plant> plants = {
      {"NaN in the first block", 100, {{0, 0}}, {}},
      {"inf in block 5, NaN in block 7", 100, {{1, 99}}, {{1, 40}}},
      {"NaN in the second block (paired with the first)", 100, {{0, 33}}, {}},
      {"NaN in the last block, unpaired", 68, {{2, 67}}, {}},
      {"inf in the last block, unpaired", 68, {}, {{2, 64}}},
      {"NaN first and last, odd", 68, {{0, 3}, {2, 66}}, {}},
      {"NaN in every other block", 100, {{0, 0}, {0, 64}, {1, 0}, {1, 64}, {2, 0}, {2, 64}}, {}},
      {"NaN in every block", 68, {{0, 0}, {0, 32}, {0, 64}, {1, 0}, {1, 32}, {1, 64}, {2, 0}, {2, 32}, {2, 64}}, {}},
      // The unpaired last scale the smallest: it becomes the minimum and leaves the maximum alone,
      // even a NaN one.
      {"NaN in the last pair, the smallest scale unpaired", 68, {{2, 40}}, {}, last_block_68},
      {"NaN first, the smallest scale unpaired", 68, {{0, 1}}, {}, last_block_68},
  };
  uint64_t seed = 500;
  for (const Plant& p : plants) {
    Tensor x = spread(3, p.cols, DType::f32, seed++);
    std::vector<double> v = x.to_vector();
    for (auto [r, c] : p.nan) v[size_t(r * p.cols + c)] = std::numeric_limits<double>::quiet_NaN();
    for (auto [r, c] : p.inf) v[size_t(r * p.cols + c)] = -std::numeric_limits<double>::infinity();
    for (auto [r, c] : p.small) v[size_t(r * p.cols + c)] = std::ldexp(v[size_t(r * p.cols + c)], -20);
    for (DType input : kInputs) {
      x = from_vector(v, {3, p.cols}, input);
      for (const Recipe& r : kRecipes)
        for (DType format : {DType::e4m3, DType::e5m2, DType::e2m1})
          check_quantize(x, {.format = format, .layout = r.layout, .rule = r.rule},
                         describe(r.name, format, x) + ": " + p.name);
      check_quantize(x, {.format = DType::e4m3, .layout = {1, 7}, .rule = ScaleRule::pow2_up},
                     describe("blocks of 1 x 7", DType::e4m3, x) + ": " + p.name);
    }
  }
}

namespace {

// q on the GPU, its codes in their own layout (a transposed view, Quantized::t(), stays one).
Quantized quantized_on_gpu(const Quantized& q) {
  Quantized g = q;
  g.codes = same_layout_on(q.codes, gpu());
  g.scale_inv = q.scale_inv.to(gpu());
  if (q.tensor_scale_inv.defined()) g.tensor_scale_inv = q.tensor_scale_inv.to(gpu());
  return g;
}

// scaled_matmul_nt on both devices, from the same operands (quantized on the CPU), against Note
// [GEMM tolerance]'s bound with S = |a| |b|^T + |bias| over the values the codes stand for. NaN
// outputs (an operand block holding NaN) must be NaN on both.
void check_scaled_mm(const Quantized& a, const Quantized& b, const Tensor& bias, DType out, const std::string& what) {
  INFO(what << " -> " << dtype_name(out) << (bias.defined() ? detail::cat(", bias ", bias.meta()) : ", no bias"));
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  const Tensor want = scaled_matmul_nt(a, b, bias, out);
  const Tensor got =
      scaled_matmul_nt(quantized_on_gpu(a), quantized_on_gpu(b), bias.defined() ? on_gpu(bias) : Tensor(), out);
  REQUIRE(got.device() == gpu());
  Tensor bound = matmul(abs64(dequantize(a)), abs64(dequantize(b)).t());
  if (bias.defined()) bound = add(bound, abs64(bias).reshape({1, N}));
  std::vector<double> g = on_cpu(got).to_vector(), w = want.to_vector(), s = bound.to_vector();
  size_t nan_mismatches = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    nan_mismatches += std::isnan(g[i]) != std::isnan(w[i]);
    if (std::isnan(w[i])) g[i] = w[i] = s[i] = 0.0;  // compared above; the rest within the bound
  }
  CHECK(nan_mismatches == 0);
  require_fp32_accumulated(from_vector(g, {M, N}, out), from_vector(w, {M, N}, out), from_vector(s, {M, N}, DType::f64),
                           K, what);
}

struct MmCase {
  const char* name;
  QuantSpec a, b;
};

}  // namespace

TEST_CASE("cuda scaled_matmul_nt matches the CPU for every recipe's layout, ragged sizes, bias and outputs",
          "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  const MmCase cases[] = {
      {"per tensor", {.format = DType::e4m3}, {.format = DType::e4m3}},
      {"hybrid e5m2 x e4m3", {.format = DType::e5m2, .margin = 1}, {.format = DType::e4m3}},
      {"rowwise", {.format = DType::e4m3, .layout = {1, 0}}, {.format = DType::e4m3, .layout = {1, 0}}},
      {"mx floor",
       {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor},
       {.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor}},
      {"mxfp4 up",
       {.format = DType::e2m1, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
       {.format = DType::e2m1, .layout = {1, 32}, .rule = ScaleRule::pow2_up}},
      {"mxfp6",
       {.format = DType::e3m2, .layout = {1, 32}, .rule = ScaleRule::pow2_up},
       {.format = DType::e2m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor}},
      {"deepseek 1 x 128 x 128 x 128",
       {.format = DType::e4m3, .layout = {1, 128}, .rule = ScaleRule::pow2_up},
       {.format = DType::e4m3, .layout = {128, 128}, .rule = ScaleRule::pow2_up}},
      {"per tensor x blocks of 128",
       {.format = DType::e4m3},
       {.format = DType::e5m2, .layout = {128, 128}, .rule = ScaleRule::pow2_up}},
      {"blocks of 2 x 12 (a scale per code) x rowwise",
       {.format = DType::e4m3, .layout = {2, 12}, .rule = ScaleRule::pow2_up},
       {.format = DType::e4m3, .layout = {1, 0}}},
      {"nvfp4 1 x 16 x 16 x 16",
       {.format = DType::e2m1, .layout = {1, 16}, .rule = ScaleRule::nvfp4},
       {.format = DType::e2m1, .layout = {16, 16}, .rule = ScaleRule::nvfp4}},
      {"nvfp4 scales on e5m2 x per tensor",
       {.format = DType::e5m2, .layout = {1, 16}, .rule = ScaleRule::nvfp4},
       {.format = DType::e4m3}},
  };
  // K: 33 and 70 (rows off 4-byte words: staged), 64 (8-byte loads), 300 and 1000 (4- and 8-byte
  // loads, split-K over a few output tiles: 2 and 7 K ranges), 5 (no full chunk); M, N ragged
  // against the 64 x 64 tiles.
  const std::vector<std::array<int64_t, 3>> shapes = {{5, 7, 33},  {37, 45, 64}, {70, 19, 300},
                                                      {66, 3, 70}, {2, 9, 5},    {9, 13, 1000}};
  uint64_t seed = 700;
  int variant = 0;
  for (const MmCase& c : cases)
    for (const auto& [M, N, K] : shapes) {
      const std::string what = detail::cat(c.name, ", M=", M, " N=", N, " K=", K);
      const Quantized a = quantize(spread(M, K, DType::bf16, seed++, 5.0), c.a);
      const Quantized b = quantize(spread(N, K, DType::bf16, seed++, 5.0), c.b);
      check_scaled_mm(a, b, Tensor(), DType::f32, what);
      // With a bias of each dtype in turn, into bf16, f32 or f16.
      const DType bias_dt = kInputs[variant % 3], out = kInputs[(variant + 1) % 3];
      ++variant;
      check_scaled_mm(a, b, random({N}, bias_dt, seed++, -2.0, 2.0), out, what);
    }
}

TEST_CASE("cuda scaled_matmul_nt_images: the device's product, laid out as NCHW images", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  // Note [Image rows]: on the device the product is copied into the images' layout; the values are
  // the device's scaled_matmul_nt, bit for bit, and match the CPU's as every product does.
  uint64_t seed = 900;
  for (const auto& [images, HW, N, K] : std::vector<std::array<int64_t, 4>>{{2, 49, 5, 9}, {3, 20, 33, 70}}) {
    const Quantized a = quantize(spread(images * HW, K, DType::bf16, seed++, 5.0), {.format = DType::e4m3});
    const Quantized b = quantize(spread(N, K, DType::bf16, seed++, 5.0), {.format = DType::e4m3});
    const Tensor bias = random({N}, DType::f32, seed++);
    const Tensor got =
        scaled_matmul_nt_images(quantized_on_gpu(a), quantized_on_gpu(b), on_gpu(bias), DType::bf16, images);
    REQUIRE(got.device() == gpu());
    REQUIRE(got.shape() == Shape({images, N, HW}));
    const Tensor flat = scaled_matmul_nt(quantized_on_gpu(a), quantized_on_gpu(b), on_gpu(bias), DType::bf16);
    CHECK(on_cpu(got).to_vector() == on_cpu(flat.view({images, HW, N}).permute({0, 2, 1})).to_vector());
    check_scaled_mm(a, b, bias, DType::bf16, detail::cat(images, " images of ", HW, " pixels"));
  }
}

TEST_CASE("cuda scaled_matmul_nt reads transposed codes (Quantized::t())", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  // An operand quantized as x [K, rows] serves x^T through t(): codes a transposed view (the GEMM
  // copies them K-contiguous first), the scales transposed with them. Per tensor, and MX blocks,
  // which become 32 x 1 (a scale per code along K).
  const QuantSpec per_tensor{.format = DType::e4m3},
      mx{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up};
  uint64_t seed = 800;
  for (const auto& [M, N, K] : std::vector<std::array<int64_t, 3>>{{37, 45, 64}, {5, 7, 33}, {70, 19, 300}})
    for (const QuantSpec& spec : {per_tensor, mx}) {
      const std::string what =
          detail::cat(spec.layout.block_cols == 32 ? "mx" : "per tensor", ", M=", M, " N=", N, " K=", K);
      const Quantized at = quantize(spread(K, M, DType::bf16, seed++, 5.0), spec).t();
      const Quantized bt = quantize(spread(K, N, DType::bf16, seed++, 5.0), spec).t();
      const Quantized b = quantize(spread(N, K, DType::bf16, seed++, 5.0), per_tensor);
      REQUIRE_FALSE(at.codes.is_contiguous());
      check_scaled_mm(at, b, Tensor(), DType::f32, what + ", a transposed");
      check_scaled_mm(at, bt, random({N}, DType::f32, seed++), DType::bf16, what + ", both transposed");
    }
}

TEST_CASE("cuda scaled_matmul_nt: large tiles, NaN blocks, and how the codes are loaded", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 900;
  // 12 x 13 tiles of 128 x 128 (the emulated device has 132 SMs): the 128 x 128 configuration.
  {
    const QuantSpec mx{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up};
    const Quantized a = quantize(spread(1500, 40, DType::bf16, seed++, 4.0), mx);
    const Quantized b = quantize(spread(1540, 40, DType::bf16, seed++, 4.0), mx);
    check_scaled_mm(a, b, random({1540}, DType::bf16, seed++), DType::bf16, "128 x 128 tiles, MX");
  }
  // A NaN in an MX block of a makes its scale NaN: that row of y is NaN on both devices.
  {
    std::vector<double> v = spread(6, 96, DType::f32, seed++).to_vector();
    v[size_t(2 * 96 + 40)] = std::numeric_limits<double>::quiet_NaN();
    const QuantSpec mx{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_floor};
    const Quantized a = quantize(from_vector(v, {6, 96}), mx), b = quantize(spread(10, 96, DType::f32, seed++), mx);
    check_scaled_mm(a, b, Tensor(), DType::f32, "a NaN block");
  }
  // Widened values below 2^-126 read as zero on both devices (the CPU's dot_bf16 flushes them):
  // a's MX blocks hold 2^-135 .. 2^-120 (the scale clamps at 2^-127, the small codes widen below
  // 2^-126), b's values near 2^100, so a flushed term would be ~2^-30, far above the bound.
  {
    std::vector<double> v = spread(4, 64, DType::f32, seed++, 7.0).to_vector();
    for (double& x : v) x = std::ldexp(x, -127);
    const QuantSpec mx{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up};
    const Quantized a = quantize(from_vector(v, {4, 64}), mx);
    const Quantized b = quantize(mul(spread(5, 64, DType::f32, seed++, 3.0), full({1}, std::ldexp(1.0, 100))), mx);
    check_scaled_mm(a, b, Tensor(), DType::f32, "widened values below 2^-126");
  }
#if defined(MIXTAPE_WITH_CUDA)
  // The load of each operand's codes (Note [8-bit operands] in cuda/gemm.cu): 8-byte loads for K
  // a multiple of 8, 4-byte ones for K a multiple of 4, a staged copy otherwise, nothing to load
  // as vectors below 8 codes.
  const QuantSpec spec{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up};
  for (auto [K, bytes, staged] : std::vector<std::tuple<int64_t, int, bool>>{
           {64, 8, false}, {300, 4, false}, {70, 8, true}, {5, cuda::kGemmNoFullChunk, false}}) {
    INFO("K = " << K);
    const Quantized a = quantized_on_gpu(quantize(spread(9, K, DType::f32, seed++), spec));
    const Quantized b = quantized_on_gpu(quantize(spread(11, K, DType::f32, seed++), spec));
    cuda::GemmRecorder recorder;
    scaled_matmul_nt(a, b, Tensor(), DType::f32);
    const std::vector<cuda::GemmCall> calls = recorder.calls();
    REQUIRE(calls.size() == 1);
    CHECK(std::string(calls[0].caller) == "scaled_matmul_nt");
    CHECK(calls[0].a_bytes == bytes);
    CHECK(calls[0].b_bytes == bytes);
    CHECK(calls[0].a_staged == staged);
    CHECK(calls[0].b_staged == staged);
  }
  // cuda::gemm with A's codes stored transposed ([K, M], M-contiguous): copied K-contiguous first,
  // then the same tiles, K steps and sums as scaled_matmul_nt: the same bits.
  {
    const int64_t M = 21, N = 30, K = 96;
    const Quantized a = quantize(spread(M, K, DType::f32, seed++), spec),
                    b = quantize(spread(N, K, DType::f32, seed++), spec);
    const Quantized ga = quantized_on_gpu(a), gb = quantized_on_gpu(b);
    const Tensor want = scaled_matmul_nt(ga, gb, Tensor(), DType::f32);
    Tensor at = empty({K, M}, DType::e4m3);
    const auto* src = static_cast<const uint8_t*>(a.codes.raw_data());
    auto* dst = static_cast<uint8_t*>(at.raw_data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) dst[k * M + m] = src[m * K + k];
    at = on_gpu(at);
    Tensor y = empty({M, N}, DType::f32, gpu());
    const int64_t nbc = a.scale_inv.size(1);
    cuda::GemmParams p;
    p.M = M, p.N = N, p.K = K;
    p.in_dtype = DType::bf16;
    p.a = {at.raw_data(), 1, M, 0, {DType::e4m3, static_cast<const float*>(ga.scale_inv.raw_data()), 1, 32, nbc, 1}};
    p.b = {
        gb.codes.raw_data(), 1, K, 0, {DType::e4m3, static_cast<const float*>(gb.scale_inv.raw_data()), 32, 1, 1, nbc}};
    p.out_dtype = DType::f32;
    p.c = y.raw_data();
    p.c_row_stride = N;
    cuda::GemmRecorder recorder;
    cuda::gemm(p, cuda::stream(0));
    CHECK(recorder.calls().at(0).a_staged);
    require_bit_identical(y, want, "A's codes M-contiguous");
  }
#endif
}
