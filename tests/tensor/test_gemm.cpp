// The own GEMM (tensor/cpu/gemm.h, Note [Own GEMM]): every vector path this CPU runs against the
// scalar reference, bit for bit, for both arithmetics, every operand dtype and layout, ragged
// tiles, chunked and split K, accumulation, and ties, subnormals, infinities and NaN; the result
// does not depend on the thread count; and the reference itself against a double-precision GEMM.
#include "support/catch.h"
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/core/half.h"
#include "tensor/cpu/gemm.h"
#include "support/test_util.h"

using namespace mixtape;
using cpu::GemmArith;
using cpu::GemmOperand;
using test::GemmPathScope;

namespace {

// A matrix stored as f32, f16 or bf16 bits, with its values as floats.
struct Matrix {
  DType dtype;
  int64_t rows, cols;
  bool transposed;  // stored column by column
  std::vector<float> f32;
  std::vector<half> f16;
  std::vector<bfloat16> bf16;
  float value(int64_t r, int64_t c) const {
    const size_t i = size_t(transposed ? c * rows + r : r * cols + c);
    if (dtype == DType::f16) return float(f16[i]);
    if (dtype == DType::bf16) return float(bf16[i]);
    return f32[i];
  }
  GemmOperand operand() const {
    const void* p = dtype == DType::f16    ? static_cast<const void*>(f16.data())
                    : dtype == DType::bf16 ? static_cast<const void*>(bf16.data())
                                           : static_cast<const void*>(f32.data());
    return transposed ? GemmOperand{dtype, p, 1, rows} : GemmOperand{dtype, p, cols, 1};
  }
};

// Values of every kind the arithmetic meets: random magnitudes over a wide range, values whose
// products and sums round at ties, and (when `special`) subnormals, zeros of both signs, inf, NaN.
float draw(std::mt19937& rng, bool special) {
  const uint32_t r = rng();
  switch (r % 16) {
    case 0:
      if (special) {
        const float s[] = {0.0f, -0.0f, 0x1p-130f, -0x1p-140f, 0x1p-149f, INFINITY, -INFINITY, NAN};
        return s[(r >> 4) % 8];
      }
      [[fallthrough]];
    case 1: return std::ldexp(float(int(r >> 8) % 256 - 128), int(r >> 24) % 8 - 4);      // small integers: ties
    case 2: return std::ldexp(1.0f + float(r >> 12) * 0x1p-20f, int(r >> 4) % 40 - 140);  // near the bottom
    default: return std::ldexp(float(int32_t(r)) * 0x1p-31f, int(r >> 3) % 20 - 10);
  }
}

Matrix make(DType dtype, int64_t rows, int64_t cols, bool transposed, std::mt19937& rng, bool special) {
  Matrix m{dtype, rows, cols, transposed, {}, {}, {}};
  const size_t n = size_t(rows * cols);
  for (size_t i = 0; i < n; ++i) {
    const float x = draw(rng, special);
    if (dtype == DType::f16) m.f16.push_back(half(x));
    else if (dtype == DType::bf16) m.bf16.push_back(bfloat16(x));
    else m.f32.push_back(x);
  }
  return m;
}

// An f32 copy of a bf16 matrix: dot_bf16 also takes f32 buffers holding bf16 values (conv's
// column matrices).
Matrix widened(const Matrix& m) {
  Matrix w = m;
  w.dtype = DType::f32;
  for (bfloat16 b : m.bf16) w.f32.push_back(float(b));
  return w;
}

std::vector<float> run(const std::string& path, GemmArith arith, const Matrix& a, const Matrix& b, bool accumulate,
                       const std::vector<float>& c0) {
  const GemmPathScope scope(path);
  std::vector<float> c = c0;
  cpu::gemm(arith, a.rows, b.cols, a.cols, a.operand(), b.operand(), accumulate, c.data(), b.cols);
  return c;
}

bool same_bits(float x, float y) {
  return (std::isnan(x) && std::isnan(y)) || std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
}

size_t count_different(const std::vector<float>& x, const std::vector<float>& y) {
  size_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += same_bits(x[i], y[i]) ? 0 : 1;
  return n;
}

struct Shape3 {
  int64_t M, N, K;
};

// Ragged tiles in every direction, K odd and even, K across a chunk (256 / 512) and the
// split-K blocks of gemm_blocks.h (small M N, K >= 4096), wide and tall outputs split in columns
// and rows.
const Shape3 kShapes[] = {{1, 1, 1},      {3, 5, 7},      {8, 32, 16},  {9, 33, 17},   {17, 50, 255}, {13, 45, 513},
                          {64, 128, 300}, {70, 10, 1030}, {5, 7, 4100}, {10, 300, 40}, {300, 20, 33}};

}  // namespace

TEST_CASE("gemm: every vector path computes the reference's bits", "[gemm]") {
  std::vector<std::string> paths = cpu::gemm_paths();
  REQUIRE(paths.front() == "scalar");
  WARN("GEMM paths on this CPU: " << [&] {
    std::string s;
    for (const std::string& p : paths) s += p + " ";
    return s;
  }());
  std::mt19937 rng(7);
  int compared = 0;
  for (const Shape3& s : kShapes)
    for (GemmArith arith : {GemmArith::fma_f32, GemmArith::dot_bf16})
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        if (arith == GemmArith::dot_bf16 && dt != DType::bf16) continue;              // it takes bf16 values
        if (arith == GemmArith::fma_f32 && dt == DType::bf16 && s.K > 600) continue;  // time
        for (int layout = 0; layout < 4; ++layout) {
          const bool special = layout == 0 || layout == 3;  // with B read in place, and packed
          Matrix a = make(dt, s.M, s.K, layout & 1, rng, special);
          Matrix b = make(dt, s.K, s.N, layout & 2, rng, special);
          if (arith == GemmArith::dot_bf16 && layout == 1) a = widened(a);  // f32 buffers of bf16 values
          std::vector<float> c0(size_t(s.M * s.N));
          for (float& x : c0) x = draw(rng, special);
          for (bool accumulate : {false, true}) {
            const std::vector<float> ref = run("scalar", arith, a, b, accumulate, c0);
            for (size_t p = 1; p < paths.size(); ++p) {
              INFO("path " << paths[p] << ", " << (arith == GemmArith::fma_f32 ? "fma_f32" : "dot_bf16") << ", "
                           << dtype_name(dt) << ", M N K " << s.M << " " << s.N << " " << s.K << ", layout " << layout
                           << ", accumulate " << accumulate);
              CHECK(count_different(run(paths[p], arith, a, b, accumulate, c0), ref) == 0);
              ++compared;
            }
          }
        }
      }
  INFO(compared << " comparisons");
  CHECK((paths.size() == 1 || compared > 0));
}

TEST_CASE("gemm: dot_bf16 flushes subnormal operands and results at the boundary", "[gemm]") {
  // Sums that land just below, at and just above 2^-126, where flushing decides the result, and
  // subnormal operands that must count as zero.
  const float tiny = 0x1p-126f;
  struct Case {
    float c0, a0, b0, a1, b1, expect;
  };
  const Case cases[] = {
      {tiny, -0x1p-10f, 0x1p-130f, 0.0f, 0.0f, tiny},           // a subnormal operand reads as 0
      {0x1p-100f, -0x1p-50f, 0x1p-50f, 0.0f, 0.0f, 0.0f},       // exact zero
      {0.0f, 0x1p-63f, 0x1p-64f, 0.0f, 0.0f, 0.0f},             // product 2^-127: subnormal, flushed
      {0.0f, 0x1p-63f, 0x1p-63f, 0.0f, 0.0f, tiny},             // product 2^-126: kept
      {0.0f, 0x1p-127f, 1.0f, 0.0f, 0.0f, 0.0f},                // ... as a factor of a normal one
      {1.0f, 0x1p-127f, 0x1p100f, 0.0f, 0.0f, 1.0f},            // ... even when the product is large
      {0x1p-125f, -0x1p-62f, 0x1p-64f, 0.0f, 0.0f, 0x1p-126f},  // 2^-125 - 2^-126 = 2^-126 exactly
      {0x1p-125f, -0x1.8p-62f, 0x1p-64f, 0.0f, 0.0f, 0.0f},     // 2^-125 - 1.5 2^-126: subnormal -> 0
      {-0x1p-125f, 0x1.8p-62f, 0x1p-64f, 0.0f, 0.0f, -0.0f},    // ... keeps its sign
      {0.0f, 1.0f, 1.0f, 0x1p-63f, 0x1p-64f, 1.0f},             // the odd product alone is subnormal: flushed
  };
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    for (const Case& t : cases) {
      const bfloat16 a[2] = {bfloat16(t.a0), bfloat16(t.a1)}, b[2] = {bfloat16(t.b0), bfloat16(t.b1)};
      REQUIRE(float(a[0]) == t.a0);
      REQUIRE(float(b[0]) == t.b0);
      float c = t.c0;
      cpu::gemm(GemmArith::dot_bf16, 1, 1, 2, {DType::bf16, a, 2, 1}, {DType::bf16, b, 1, 1}, true, &c, 1);
      INFO("path " << path << ": " << t.c0 << " + " << t.a1 << " * " << t.b1 << " + " << t.a0 << " * " << t.b0);
      CHECK(std::bit_cast<uint32_t>(c) == std::bit_cast<uint32_t>(t.expect));
    }
  }
}

// The packing of a bf16 B with contiguous rows pairs two rows, flushing subnormal operands on the
// way (pack_pairs in gemm_tiles.inc). Operands at the boundary, each times 2^20 so that a kept
// one gives a normal product: the smallest normal (exponent field 1) must count, the largest
// subnormal must not, on every path, in every column.
TEST_CASE("gemm: dot_bf16 packs bf16 rows at the subnormal boundary on every path", "[gemm]") {
  const float boundary[] = {0x1p-126f, -0x1p-126f, 0x1.fcp-127f, -0x1.fcp-127f, 0x1p-133f, 0.0f, -0.0f, 0x1.02p-126f};
  const int64_t M = 3, N = 37, K = 6;  // 37 columns: two blocks of sixteen and a tail
  std::vector<bfloat16> a(size_t(M * K)), b(size_t(K * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = bfloat16(i % 2 ? 0x1p20f : -0x1p20f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = bfloat16(boundary[(i * 5 + i / 7) % 8]);
  std::vector<float> ref;
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    std::vector<float> c(size_t(M * N), 0.0f);
    cpu::gemm(GemmArith::dot_bf16, M, N, K, {DType::bf16, a.data(), K, 1}, {DType::bf16, b.data(), N, 1}, false,
              c.data(), N);
    if (ref.empty()) {
      ref = c;
      // The reference keeps the smallest normal: some sum is a nonzero multiple of 2^-106.
      CHECK(std::any_of(ref.begin(), ref.end(), [](float x) { return x != 0.0f; }));
      continue;
    }
    INFO("path " << path);
    CHECK(count_different(c, ref) == 0);
  }
}

TEST_CASE("gemm: a packed B gives gemm's bits on the calling thread, on every path", "[gemm]") {
  // PackedB holds the panels block_gemm would pack, in its (column block, K chunk) order: shapes
  // across the column blocks of every path (16 or 32 columns x 64) and the K chunks (256, 512).
  const std::vector<std::string> paths = cpu::gemm_paths();
  std::mt19937 rng(13);
  const Shape3 shapes[] = {{3, 5, 7}, {9, 33, 17}, {20, 2100, 40}, {13, 45, 1030}, {16, 96, 24}};
  for (const Shape3& s : shapes)
    for (GemmArith arith : {GemmArith::fma_f32, GemmArith::dot_bf16})
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        if (arith == GemmArith::dot_bf16 && dt != DType::bf16) continue;
        for (bool b_transposed : {false, true}) {
          const Matrix a = make(dt, s.M, s.K, false, rng, true), b = make(dt, s.K, s.N, b_transposed, rng, true);
          std::vector<float> c0(size_t(s.M * s.N));
          for (float& x : c0) x = draw(rng, true);
          for (bool accumulate : {false, true}) {
            const std::vector<float> ref = run("scalar", arith, a, b, accumulate, c0);
            for (const std::string& path : paths) {
              INFO("path " << path << ", " << (arith == GemmArith::fma_f32 ? "fma_f32" : "dot_bf16") << ", "
                           << dtype_name(dt) << ", M N K " << s.M << " " << s.N << " " << s.K << ", B transposed "
                           << b_transposed << ", accumulate " << accumulate);
              const GemmPathScope scope(path);
              const cpu::PackedB packed(arith, s.N, s.K, b.operand());
              std::vector<float> c = c0;
              cpu::gemm_on_thread(s.M, a.operand(), packed, accumulate, c.data(), s.N);
              CHECK(count_different(c, ref) == 0);
              // Packed on one path, used on another: B is read in place, the same bits.
              const GemmPathScope other(paths.front() == path ? paths.back() : paths.front());
              c = c0;
              cpu::gemm_on_thread(s.M, a.operand(), packed, accumulate, c.data(), s.N);
              CHECK(count_different(c, ref) == 0);
            }
          }
        }
      }
}

TEST_CASE("gemm: the result does not depend on the thread count", "[gemm][threads]") {
  std::mt19937 rng(11);
  const int saved = omp_get_max_threads();
  for (const Shape3& s : {Shape3{64, 3000, 300}, Shape3{512, 40, 300}, Shape3{32, 64, 20000}})
    for (GemmArith arith : {GemmArith::fma_f32, GemmArith::dot_bf16}) {
      const DType dt = arith == GemmArith::dot_bf16 ? DType::bf16 : DType::f16;
      const Matrix a = make(dt, s.M, s.K, false, rng, false), b = make(dt, s.K, s.N, true, rng, false);
      std::vector<float> c1(size_t(s.M * s.N)), c2(c1.size());
      omp_set_num_threads(1);
      cpu::gemm(arith, s.M, s.N, s.K, a.operand(), b.operand(), false, c1.data(), s.N);
      omp_set_num_threads(2);
      cpu::gemm(arith, s.M, s.N, s.K, a.operand(), b.operand(), false, c2.data(), s.N);
      CHECK(count_different(c1, c2) == 0);
    }
  omp_set_num_threads(saved);
}

TEST_CASE("gemm: the reference is a GEMM (against double precision)", "[gemm]") {
  std::mt19937 rng(5);
  const GemmPathScope scope("scalar");
  for (GemmArith arith : {GemmArith::fma_f32, GemmArith::dot_bf16}) {
    const DType dt = arith == GemmArith::dot_bf16 ? DType::bf16 : DType::f32;
    const int64_t M = 7, N = 9, K = 31;
    const Matrix a = make(dt, M, K, true, rng, false), b = make(dt, K, N, false, rng, false);
    std::vector<float> c(size_t(M * N), 1.0f);
    cpu::gemm(arith, M, N, K, a.operand(), b.operand(), true, c.data(), N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double exact = 1.0, mag = 1.0;
        for (int64_t k = 0; k < K; ++k) {
          exact += double(a.value(i, k)) * double(b.value(k, j));
          mag += std::abs(double(a.value(i, k)) * double(b.value(k, j)));
        }
        CHECK(std::abs(double(c[size_t(i * N + j)]) - exact) <= 2.0 * K * 0x1p-24 * mag);
      }
  }
}
