// The own GEMM with 8-bit operands (Note [8-bit GEMM operands] in tensor/cpu/gemm.cpp): on every
// path, a GEMM on 8-bit codes with block scales gives the bits of the same GEMM on bf16 (dot_bf16)
// or f32 (fma_f32) operands holding the decoded, scaled values, computed here with
// bits8::to_float. Over format pairings, operand layouts, block-scale layouts (and a view into a
// larger scaled matrix), ragged tiles, chunked and split K, threads' blocks, a packed B,
// accumulation, the edges of the range, and NaN and inf codes and scales.
#include "support/catch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensor/core/fp8.h"
#include "tensor/core/half.h"
#include "tensor/cpu/gemm.h"
#include "support/test_util.h"

using namespace mixtape;
using cpu::GemmArith;
using cpu::GemmOperand;
using cpu::GemmScales;
using test::GemmPathScope;

namespace {

enum class Layout { rows, columns, strided };  // (rs, cs) = (cols, 1), (1, rows), or both above 1
enum class Blocks { none, k32, k128, square128 };
enum class Role { a, b };  // K runs along A's columns and B's rows

const char* layout_name(Layout l) { return l == Layout::rows ? "rows" : l == Layout::columns ? "columns" : "strided"; }
const char* blocks_name(Blocks b) {
  return b == Blocks::none   ? "none"
         : b == Blocks::k32  ? "1x32 along k"
         : b == Blocks::k128 ? "1x128 along k"
                             : "128x128";
}

// A logical [rows, cols] GEMM operand in one of the layouts: 8-bit codes with their block scales,
// or bf16, f16 or f32 values.
struct Operand {
  DType dtype;
  int64_t rows, cols, rs, cs;
  std::vector<uint8_t> codes;
  std::vector<bfloat16> bf16;
  std::vector<half> f16;
  std::vector<float> f32;
  std::vector<float> scales;  // the matrix of block scales g.s points into
  GemmScales g;

  size_t index(int64_t r, int64_t c) const { return size_t(r * rs + c * cs); }
  // The element the operand stands for: code value times its block's scale, or the stored value.
  float value(int64_t r, int64_t c) const {
    if (is_8bit(dtype)) {
      const float s = g.s ? g.s[((r + g.r0) / g.br) * g.srs + ((c + g.c0) / g.bc) * g.scs] : 1.0f;
      return bits8::to_float(codes[index(r, c)], format_of(dtype)) * s;
    }
    if (dtype == DType::bf16) return float(bf16[index(r, c)]);
    if (dtype == DType::f16) return float(f16[index(r, c)]);
    return f32[index(r, c)];
  }
  GemmOperand operand() const {
    const void* p = is_8bit(dtype)         ? static_cast<const void*>(codes.data())
                    : dtype == DType::bf16 ? static_cast<const void*>(bf16.data())
                    : dtype == DType::f16  ? static_cast<const void*>(f16.data())
                                           : static_cast<const void*>(f32.data());
    return {dtype, p, rs, cs, g};
  }
};

Operand shaped(DType dtype, int64_t rows, int64_t cols, Layout layout) {
  Operand x{dtype, rows, cols, cols, 1, {}, {}, {}, {}, {}, {}};
  if (layout == Layout::columns) x.rs = 1, x.cs = rows;
  if (layout == Layout::strided) x.rs = 2 * cols + 3, x.cs = 2;
  const size_t size = size_t((rows - 1) * x.rs + (cols - 1) * x.cs + 1);
  if (is_8bit(dtype)) x.codes.assign(size, bits8::nan_code(format_of(dtype)));  // the gaps: NaN where there is one
  else if (dtype == DType::bf16) x.bf16.assign(size, bfloat16(NAN));
  else if (dtype == DType::f16) x.f16.assign(size, half(NAN));
  else x.f32.assign(size, NAN);
  return x;
}

// Every code of the format whose value is finite: for fp6 and fp4 every byte (to_float ignores the
// bits above the format's width).
std::vector<uint8_t> finite_codes(DType dtype) {
  std::vector<uint8_t> out;
  for (int c = 0; c < 256; ++c)
    if (std::isfinite(bits8::to_float(uint8_t(c), format_of(dtype)))) out.push_back(uint8_t(c));
  return out;
}

// The block sizes of a scale layout for an operand in the given role.
void block_sizes(Blocks blocks, Role role, int64_t& br, int64_t& bc) {
  const int64_t along_k = blocks == Blocks::k32 ? 32 : 128;
  if (blocks == Blocks::square128) br = bc = 128;
  else if (role == Role::a) br = 1, bc = along_k;
  else br = along_k, bc = 1;
}

// 8-bit codes drawn as a shuffled cycle through every finite code (each pattern appears once the
// matrix has as many elements), with block scales 2^e, e uniform in [e_lo, e_hi]. The operand is
// the part from (r0, c0) of the larger matrix the scales describe. A's scales are stored by rows,
// B's by columns (B = W^T, as a quantized weight [N, K] gives it).
Operand make_codes(DType dtype, int64_t rows, int64_t cols, Layout layout, Blocks blocks, Role role, std::mt19937& rng,
                   int e_lo = -20, int e_hi = 20, int64_t r0 = 0, int64_t c0 = 0) {
  Operand x = shaped(dtype, rows, cols, layout);
  const std::vector<uint8_t> pool = finite_codes(dtype);
  std::vector<uint8_t> cycle;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      if (cycle.empty()) {
        cycle = pool;
        std::shuffle(cycle.begin(), cycle.end(), rng);
      }
      x.codes[x.index(r, c)] = cycle.back();
      cycle.pop_back();
    }
  if (blocks == Blocks::none) return x;
  int64_t br, bc;
  block_sizes(blocks, role, br, bc);
  const int64_t nbr = (r0 + rows + br - 1) / br, nbc = (c0 + cols + bc - 1) / bc;
  std::uniform_int_distribution<int> e(e_lo, e_hi);
  for (int64_t i = 0; i < nbr * nbc; ++i) x.scales.push_back(std::ldexp(1.0f, e(rng)));
  x.g = role == Role::a ? GemmScales{x.scales.data(), br, bc, nbc, 1, r0, c0}
                        : GemmScales{x.scales.data(), br, bc, 1, nbr, r0, c0};
  return x;
}

// bf16, f16 or f32 values over a wide range.
Operand make_values(DType dtype, int64_t rows, int64_t cols, Layout layout, std::mt19937& rng) {
  Operand x = shaped(dtype, rows, cols, layout);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t w = rng();
      const float v = std::ldexp(float(int32_t(w)) * 0x1p-31f, int(w % 21) - 10);
      if (dtype == DType::bf16) x.bf16[x.index(r, c)] = bfloat16(v);
      else if (dtype == DType::f16) x.f16[x.index(r, c)] = half(v);
      else x.f32[x.index(r, c)] = v;
    }
  return x;
}

// The same logical matrix as `to` (bf16: exact for every widened code; f32), in the same layout.
Operand widened(const Operand& x, DType to) {
  Operand w = shaped(to, x.rows, x.cols, x.rs == 1 ? Layout::columns : x.cs == 1 ? Layout::rows : Layout::strided);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) {
      const float v = x.value(r, c);
      if (to == DType::bf16) w.bf16[w.index(r, c)] = bfloat16(v);
      else w.f32[w.index(r, c)] = v;
    }
  return w;
}

// What a GEMM under `arith` compares the 8-bit operand with: its values as bf16 or f32.
Operand equivalent(const Operand& x, GemmArith arith) {
  if (!is_8bit(x.dtype)) return x;
  return widened(x, arith == GemmArith::dot_bf16 ? DType::bf16 : DType::f32);
}

std::vector<float> run(GemmArith arith, const Operand& a, const Operand& b, bool accumulate,
                       const std::vector<float>& c0) {
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

std::vector<float> start_values(size_t n, std::mt19937& rng) {
  std::vector<float> c(n);
  for (float& x : c) x = std::ldexp(float(int32_t(rng())) * 0x1p-31f, 4);
  return c;
}

struct Shape3 {
  int64_t M, N, K;
};

// The operand pairings: 8-bit against 8-bit, bf16, f32 and f16, under the arithmetic they take.
struct Pairing {
  DType a, b;
};
const Pairing kPairings[] = {{DType::e4m3, DType::e4m3}, {DType::e5m2, DType::e4m3}, {DType::e2m1, DType::e3m2},
                             {DType::e4m3, DType::bf16}, {DType::e4m3, DType::f32},  {DType::f16, DType::e2m3},
                             {DType::e5m2, DType::e3m2}};

Operand make(DType dtype, int64_t rows, int64_t cols, Layout layout, Blocks blocks, Role role, std::mt19937& rng,
             int64_t r0 = 0, int64_t c0 = 0) {
  return is_8bit(dtype) ? make_codes(dtype, rows, cols, layout, blocks, role, rng, -20, 20, r0, c0)
                        : make_values(dtype, rows, cols, layout, rng);
}

}  // namespace

TEST_CASE("gemm: 8-bit operands give the bits of their widened values, on every path", "[gemm][fp8]") {
  // Ragged tiles, K odd and across the chunks (256, 512), then shapes gemm_blocked splits: over
  // the threads by rows (300 x 200), and along K (64 x 64 x 8192, and K = 6151 whose split
  // points fall inside the scale blocks).
  const Shape3 small[] = {{1, 1, 1}, {3, 5, 7}, {9, 33, 17}, {17, 50, 255}, {13, 45, 513}, {70, 10, 1030}};
  const Shape3 large[] = {{64, 64, 8192}, {300, 200, 96}, {40, 48, 6151}};
  std::mt19937 rng(17);
  int compared = 0;
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    for (size_t pi = 0; pi < std::size(kPairings); ++pi) {
      const Pairing& pr = kPairings[pi];
      const GemmArith arith = cpu::gemm_arith_for(pr.a, pr.b);
      auto check = [&](const Shape3& s, Layout la, Layout lb, Blocks blocks, bool view, bool accumulate) {
        // view: the operands start inside the matrices their scales describe (GemmScales r0, c0).
        const int64_t r0 = view ? 5 : 0, c0 = view ? 37 : 0;
        const Operand a = make(pr.a, s.M, s.K, la, blocks, Role::a, rng, r0, c0);
        const Operand b = make(pr.b, s.K, s.N, lb, blocks, Role::b, rng, c0, r0);
        const std::vector<float> c0s = start_values(size_t(s.M * s.N), rng);
        const std::vector<float> ref = run(arith, equivalent(a, arith), equivalent(b, arith), accumulate, c0s);
        INFO("path " << path << ", " << dtype_name(pr.a) << " x " << dtype_name(pr.b) << ", M N K " << s.M << " " << s.N
                     << " " << s.K << ", layouts " << layout_name(la) << " " << layout_name(lb) << ", blocks "
                     << blocks_name(blocks) << (view ? " (a view)" : "") << ", accumulate " << accumulate);
        CHECK(count_different(run(arith, a, b, accumulate, c0s), ref) == 0);
        ++compared;
      };
      for (size_t si = 0; si < std::size(small); ++si)
        for (int v = 0; v < 4; ++v)
          check(small[si], Layout((v + si) % 3), Layout((v + 2 * si + pi) % 3), Blocks(v), v == 3 && si % 2,
                (v + si + pi) % 2);
      // The large shapes, the reference on one variant each (time).
      for (size_t si = 0; si < std::size(large); ++si)
        for (int v : {1, 3}) {
          if (path == "scalar" && (v + si + pi) % 2) continue;
          check(large[si], Layout((v + si + pi) % 3), Layout((v + 2 * si) % 3), Blocks(v), si == 1, (v + pi) % 2);
        }
    }
  }
  INFO(compared << " comparisons");
  CHECK(compared > 0);
}

TEST_CASE("gemm: 8-bit operands at the edges of the range", "[gemm][fp8]") {
  // Block scales from 2^-149 (a subnormal scale) up to 2^-100 and from 2^90 up to 2^127: widened
  // values below 2^-126 (dot_bf16 reads them as zero, fma_f32 keeps the fp32 subnormal, rounded
  // where fp32 rounds it) and past the range (inf), in both arithmetics.
  const Pairing pairings[] = {{DType::e4m3, DType::e4m3}, {DType::e5m2, DType::bf16}, {DType::e4m3, DType::f32}};
  const int64_t M = 9, N = 35, K = 70;
  std::mt19937 rng(23);
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    for (const Pairing& pr : pairings)
      for (int e_lo : {-149, 90}) {
        const GemmArith arith = cpu::gemm_arith_for(pr.a, pr.b);
        const Operand a = make_codes(pr.a, M, K, Layout::rows, Blocks::k32, Role::a, rng, e_lo, e_lo + 30 + 7);
        const Operand b = is_8bit(pr.b) ? make_codes(pr.b, K, N, Layout::columns, Blocks::k32, Role::b, rng, -10, 10)
                                        : make_values(pr.b, K, N, Layout::columns, rng);
        const std::vector<float> c0(size_t(M * N), 0.0f);
        const std::vector<float> ref = run(arith, equivalent(a, arith), equivalent(b, arith), false, c0);
        INFO("path " << path << ", " << dtype_name(pr.a) << " x " << dtype_name(pr.b) << ", scales from 2^" << e_lo);
        CHECK(count_different(run(arith, a, b, false, c0), ref) == 0);
        // The edges were met: some widened values are not normal fp32 values.
        bool edge = false;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t k = 0; k < K; ++k) {
            const float v = std::abs(a.value(i, k));
            edge = edge || (v != 0.0f && v < 0x1p-126f) || std::isinf(v);
          }
        CHECK(edge);
      }
  }
}

TEST_CASE("gemm: NaN and inf codes, and NaN scales, propagate", "[gemm][fp8]") {
  // NaN codes of e4m3 (S.1111.111) and e5m2 (S.11111.mm, mm != 0) in a row of A and a column of
  // B, e5m2's inf codes elsewhere, and a NaN block scale (what quantize gives a block whose amax
  // is NaN): each NaN reaches its whole row or column of C, and everything else matches the
  // bf16 (f32) GEMM.
  const int64_t M = 11, N = 37, K = 100;
  std::mt19937 rng(29);
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    for (DType bt : {DType::e5m2, DType::f32}) {
      const GemmArith arith = cpu::gemm_arith_for(DType::e4m3, bt);
      Operand a = make_codes(DType::e4m3, M, K, Layout::rows, Blocks::k32, Role::a, rng);
      Operand b = bt == DType::e5m2 ? make_codes(bt, K, N, Layout::columns, Blocks::k32, Role::b, rng)
                                    : make_values(bt, K, N, Layout::columns, rng);
      a.codes[a.index(2, 5)] = 0x7F;
      a.codes[a.index(7, 99)] = 0xFF;
      a.scales[size_t(4 * 4 + 1)] = NAN;  // A's row 4, k in [32, 64)
      if (bt == DType::e5m2) {
        b.codes[b.index(3, 6)] = 0x7D;
        b.codes[b.index(80, 30)] = 0xFE;
        b.codes[b.index(10, 20)] = 0x7C;  // +inf
        b.codes[b.index(11, 21)] = 0xFC;  // -inf
      }
      const std::vector<float> c0(size_t(M * N), 1.0f);
      const std::vector<float> c = run(arith, a, b, true, c0);
      INFO("path " << path << ", e4m3 x " << dtype_name(bt));
      CHECK(count_different(c, run(arith, equivalent(a, arith), equivalent(b, arith), true, c0)) == 0);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i : {2, 4, 7}) CHECK(std::isnan(c[size_t(i * N + j)]));
      if (bt == DType::e5m2)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j : {6, 30}) CHECK(std::isnan(c[size_t(i * N + j)]));
    }
  }
}

TEST_CASE("gemm: a packed 8-bit B gives gemm's bits on the calling thread, on every path", "[gemm][fp8]") {
  // PackedB and both gemm_on_thread forms, over the column blocks (16 or 32 columns x 64) and K
  // chunks (256, 512) of every path; a B packed on one path and used on another is read in place.
  const std::vector<std::string> paths = cpu::gemm_paths();
  const Shape3 shapes[] = {{3, 5, 7}, {9, 33, 17}, {20, 2100, 40}, {13, 45, 1030}};
  const Pairing pairings[] = {{DType::e4m3, DType::e4m3},
                              {DType::bf16, DType::e5m2},
                              {DType::e2m1, DType::e3m2},
                              {DType::f32, DType::e4m3},
                              {DType::e2m3, DType::f16}};
  std::mt19937 rng(31);
  for (const Shape3& s : shapes)
    for (const Pairing& pr : pairings)
      for (Blocks blocks : {Blocks::none, Blocks::k32, Blocks::square128})
        for (Layout lb : {Layout::rows, Layout::columns}) {
          const GemmArith arith = cpu::gemm_arith_for(pr.a, pr.b);
          const Operand a = make(pr.a, s.M, s.K, Layout::rows, blocks, Role::a, rng);
          const Operand b = make(pr.b, s.K, s.N, lb, blocks, Role::b, rng);
          const Operand ae = equivalent(a, arith), be = equivalent(b, arith);
          const std::vector<float> c0 = start_values(size_t(s.M * s.N), rng);
          for (bool accumulate : {false, true}) {
            for (const std::string& path : paths) {
              INFO("path " << path << ", " << dtype_name(pr.a) << " x " << dtype_name(pr.b) << ", M N K " << s.M << " "
                           << s.N << " " << s.K << ", B by " << layout_name(lb) << ", blocks " << blocks_name(blocks)
                           << ", accumulate " << accumulate);
              const GemmPathScope scope(path);
              const std::vector<float> ref = run(arith, ae, be, accumulate, c0);
              const cpu::PackedB packed(arith, s.N, s.K, b.operand());
              std::vector<float> c = c0;
              cpu::gemm_on_thread(s.M, a.operand(), packed, accumulate, c.data(), s.N);
              CHECK(count_different(c, ref) == 0);
              c = c0;
              cpu::gemm_on_thread(arith, s.M, s.N, s.K, a.operand(), b.operand(), accumulate, c.data(), s.N);
              CHECK(count_different(c, ref) == 0);
              const GemmPathScope other(paths.front() == path ? paths.back() : paths.front());
              c = c0;
              cpu::gemm_on_thread(s.M, a.operand(), packed, accumulate, c.data(), s.N);
              CHECK(count_different(c, ref) == 0);
            }
          }
        }
}

TEST_CASE("gemm: 8-bit operands without block scales, packed as code pairs, on every path", "[gemm][fp8]") {
  // Note [Packing 8-bit pairs] in gemm_tiles.inc: codes along j (rows of A^T, B by rows) and
  // along k (A by rows, B = W^T), panels full and ragged (columns past a group of eight), K odd
  // (a missing last row), across the chunks and tall (a backward GEMM's K over the batch), and
  // every code of the format (NaN and inf among them for e5m2) in every lane.
  const Shape3 shapes[] = {{1, 1, 1}, {8, 32, 16}, {13, 45, 37}, {17, 70, 300}, {33, 20, 1031}, {16, 40, 3001}};
  const Pairing pairings[] = {{DType::e4m3, DType::e4m3}, {DType::e5m2, DType::e4m3}, {DType::e2m1, DType::e3m2}};
  std::mt19937 rng(43);
  int compared = 0;
  for (const std::string& path : cpu::gemm_paths()) {
    const GemmPathScope scope(path);
    for (const Shape3& s : shapes)
      for (const Pairing& pr : pairings)
        for (Layout la : {Layout::rows, Layout::columns})
          for (Layout lb : {Layout::rows, Layout::columns}) {
            Operand a = make(pr.a, s.M, s.K, la, Blocks::none, Role::a, rng);
            Operand b = make(pr.b, s.K, s.N, lb, Blocks::none, Role::b, rng);
            if (pr.a == DType::e5m2)  // inf and NaN codes too: the ends of the table
              for (size_t i = 0; i < a.codes.size(); i += 97) a.codes[i] = uint8_t(0x7C + i % 4);
            const std::vector<float> c0 = start_values(size_t(s.M * s.N), rng);
            const std::vector<float> ref = run(GemmArith::dot_bf16, equivalent(a, GemmArith::dot_bf16),
                                               equivalent(b, GemmArith::dot_bf16), false, c0);
            INFO("path " << path << ", " << dtype_name(pr.a) << " x " << dtype_name(pr.b) << ", M N K " << s.M << " "
                         << s.N << " " << s.K << ", layouts " << layout_name(la) << " " << layout_name(lb));
            CHECK(count_different(run(GemmArith::dot_bf16, a, b, false, c0), ref) == 0);
            ++compared;
          }
  }
  CHECK(compared > 0);
}

TEST_CASE("gemm: the arithmetic of 8-bit operands", "[gemm][fp8]") {
  for (DType d : {DType::e4m3, DType::e5m2, DType::e3m2, DType::e2m3, DType::e2m1}) {
    CHECK(cpu::gemm_arith_for(d) == GemmArith::dot_bf16);
    CHECK(cpu::gemm_arith_for(d, DType::e4m3) == GemmArith::dot_bf16);
    CHECK(cpu::gemm_arith_for(d, DType::bf16) == GemmArith::dot_bf16);
    CHECK(cpu::gemm_arith_for(DType::f32, d) == GemmArith::fma_f32);
    CHECK(cpu::gemm_arith_for(d, DType::f16) == GemmArith::fma_f32);
  }
  CHECK(cpu::gemm_arith_for(DType::bf16, DType::bf16) == GemmArith::dot_bf16);
  CHECK(cpu::gemm_arith_for(DType::f32, DType::f32) == GemmArith::fma_f32);
}
