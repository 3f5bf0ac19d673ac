// Tensor handles (tensor/tensor.h): views, copies, factories, casts, printing, error messages,
// devices.
#include "support/catch.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/runtime.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/transpose.h"
#include "tensor/ops/elementwise.h"
#include "tensor/tensor.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

using Vec = std::vector<double>;

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return arange(0.0, double(numel_of(shape)), 1.0, dtype).view(shape);
}

// The message of the mixtape::Error thrown by f ("" when nothing is thrown).
// ---- reference rounding (independent of tensor/core/half.h) ------------------------------------------

struct Format {
  int p;
  int emin;
  double max;
};  // significand bits, min normal exponent, max finite
constexpr Format kF32{24, -126, 3.4028234663852886e38};
constexpr Format kF16{11, -14, 65504.0};
constexpr Format kBf16{8, -126, 3.3895313892515355e38};

Format ref_format_of(DType t) { return t == DType::f32 ? kF32 : t == DType::f16 ? kF16 : kBf16; }

// Round a double (exactly) to the format, nearest even; overflow to inf at max + ulp/2.
double ref_round(double v, Format f) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0) return v;
  const int e = std::max(std::ilogb(v), f.emin);
  const double ulp = std::ldexp(1.0, e - (f.p - 1));
  const double q = std::nearbyint(v / ulp);  // v / ulp exact; default mode rounds to nearest even
  const double r = q * ulp;
  if (std::fabs(r) > f.max) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r == 0.0 ? std::copysign(0.0, v) : r;
}

// Round an int64 to p significant bits, nearest even, in integer arithmetic.
double ref_round_int(int64_t x, Format f) {
  const uint64_t a = x < 0 ? 0 - uint64_t(x) : uint64_t(x);
  const int n = std::bit_width(a);
  double r;
  if (n <= f.p) {
    r = double(a);
  } else {
    const int shift = n - f.p;
    uint64_t q = a >> shift;
    const uint64_t rem = a & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    r = std::ldexp(double(q), shift);
  }
  if (r > f.max) r = std::numeric_limits<double>::infinity();
  return x < 0 ? -r : r;
}

// The value of element v of a source of dtype `src`, cast to `dst`, computed by the references.
double ref_cast(double v, DType dst) {
  switch (dst) {
    case DType::f64: return v;
    case DType::i64: return std::trunc(v);  // C++ (and PyTorch) float -> integer: toward zero
    default: return ref_round(v, ref_format_of(dst));
  }
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

// ---- views ---------------------------------------------------------------------------------------

TEST_CASE("reshape and view share storage", "[tensor]") {
  Tensor x = iota({2, 3, 4});
  CHECK(x.shape() == Shape{2, 3, 4});
  CHECK(x.strides() == Shape{12, 4, 1});
  CHECK(x.is_contiguous());
  const Tensor v = x.view({6, 4});
  const Tensor r = x.reshape({4, -1});
  CHECK(v.same_storage(x));
  CHECK(r.same_storage(x));
  CHECK(r.shape() == Shape{4, 6});
  CHECK(x.view({-1}).shape() == Shape{24});
  CHECK(x.view({2, 1, 12, 1}).strides()[2] == 1);
  // A write through a view is seen by the base.
  Tensor w = x.view({24});
  w.flat_set(5, -7.0);
  CHECK(x.flat_get(5) == -7.0);
  CHECK(r.flat_get(5) == -7.0);
  // Errors name the op and the shapes.
  CHECK_THROWS_WITH(x.view({5, 5}), Contains("view") && Contains("[5, 5]") && Contains("f32[2, 3, 4]"));
  CHECK_THROWS_WITH(x.reshape({-1, -1}), Contains("reshape") && Contains("-1"));
  CHECK_THROWS_WITH(x.reshape({7, -1}), Contains("reshape") && Contains("[7, -1]"));
}

TEST_CASE("view of an incompatible layout throws, reshape copies", "[tensor]") {
  const Tensor x = iota({2, 3});
  const Tensor t = x.t();  // [3, 2], strides [1, 3]
  CHECK_FALSE(t.is_contiguous());
  CHECK_THROWS_WITH(t.view({6}), Contains("view") && Contains("[6]") && Contains("reshape"));
  const Tensor r = t.reshape({6});
  CHECK_FALSE(r.same_storage(x));
  CHECK(r.to_vector() == Vec{0, 3, 1, 4, 2, 5});
  // Views that only split or merge compatible dims work on non-contiguous tensors.
  const Tensor n = iota({4, 6}).narrow(1, 0, 2);  // [4, 2], strides [6, 1]
  CHECK_THROWS(n.view({8}));
  const Tensor s = n.view({2, 2, 2});
  CHECK(s.same_storage(n));
  CHECK(s.to_vector() == Vec{0, 1, 6, 7, 12, 13, 18, 19});
  CHECK(n.view({4, 2, 1}).same_storage(n));
  const Tensor tt = iota({2, 3, 4}).permute({1, 0, 2});  // dims 1 and 2 of the original stay merged
  CHECK(tt.view({3, 2, 2, 2}).same_storage(tt));
  CHECK_THROWS(tt.view({6, 4}));
  CHECK(tt.reshape({6, 4}).to_vector() == iota({2, 3, 4}).permute({1, 0, 2}).contiguous().to_vector());
}

TEST_CASE("transpose and permute are strided views", "[tensor]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor t = x.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK(t.same_storage(x));
  CHECK_FALSE(t.is_contiguous());
  // t[i, j, k] = x[k, j, i] = 12 k + 4 j + i; row-major index of (1, 2, 1) in [4, 3, 2] is 11.
  CHECK(t.flat_get(11) == 12 * 1 + 4 * 2 + 1);
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.same_storage(x));
  CHECK(p.permute({1, 2, 0}).to_vector() == x.to_vector());
  CHECK(x.transpose(-1, -3).shape() == Shape{4, 3, 2});
  CHECK(iota({2, 3}).t().to_vector() == Vec{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH(x.permute({0, 1}), Contains("permute") && Contains("f32[2, 3, 4]"));
  CHECK_THROWS_WITH(x.permute({0, 1, 1}), Contains("permute") && Contains("repeated"));
  CHECK_THROWS_WITH(x.transpose(0, 3), Contains("transpose") && Contains("dim 3"));
}

TEST_CASE("narrow, slice with step and select", "[tensor]") {
  Tensor x = iota({4, 5});
  const Tensor n = x.narrow(1, 1, 3);
  CHECK(n.shape() == Shape{4, 3});
  CHECK(n.offset() == 1);
  CHECK(n.same_storage(x));
  CHECK(n.to_vector() == Vec{1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18});
  CHECK(x.narrow(0, -1, 1).to_vector() == Vec{15, 16, 17, 18, 19});
  const Tensor s = x.slice(1, 0, 5, 2);
  CHECK(s.shape() == Shape{4, 3});
  CHECK(s.strides() == Shape{5, 2});
  CHECK(s.to_vector() == Vec{0, 2, 4, 5, 7, 9, 10, 12, 14, 15, 17, 19});
  CHECK(x.slice(0, 1, -1, 2).to_vector() == Vec{5, 6, 7, 8, 9});  // rows 1 (and 3 is excluded)
  CHECK(x.slice(1, 3, 100).shape() == Shape{4, 2});               // end clamps
  CHECK(x.slice(1, 4, 2).numel() == 0);                           // empty
  const Tensor r = x.select(0, 2);
  CHECK(r.shape() == Shape{5});
  CHECK(r.to_vector() == Vec{10, 11, 12, 13, 14});
  const Tensor c = x.select(1, -1);
  CHECK(c.to_vector() == Vec{4, 9, 14, 19});
  CHECK(c.strides() == Shape{5});
  // A chain of views still writes into the base.
  Tensor e = x.slice(1, 1, 5, 2).select(0, 3);  // x[3, 1], x[3, 3]
  e.flat_set(1, 100.0);
  CHECK(x.flat_get(3 * 5 + 3) == 100.0);
  CHECK(x.select(0, 0).select(0, 0).dim() == 0);
  CHECK_THROWS_WITH(x.narrow(1, 3, 3), Contains("narrow") && Contains("f32[4, 5]"));
  CHECK_THROWS_WITH(x.select(0, 4), Contains("select") && Contains("index 4"));
  CHECK_THROWS_WITH(x.slice(0, 0, 2, 0), Contains("slice") && Contains("step"));
}

TEST_CASE("expand broadcasts with stride 0", "[tensor]") {
  const Tensor x = from_vector(Vec{1, 2, 3}, {3, 1});
  const Tensor e = x.expand({2, 3, 4});
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.same_storage(x));
  CHECK_FALSE(e.is_contiguous());
  const Vec v = e.to_vector();
  for (int64_t i = 0; i < 24; ++i) CHECK(v[size_t(i)] == double((i / 4) % 3 + 1));
  CHECK(x.expand({-1, 5}).shape() == Shape{3, 5});
  // Writing through the base is seen by every broadcast copy.
  Tensor xm = x;
  xm.flat_set(1, 9.0);
  CHECK(e.flat_get(4) == 9.0);
  CHECK(e.flat_get(16) == 9.0);
  // An expanded tensor cannot be viewed flat; reshape materializes it.
  CHECK_THROWS(e.view({24}));
  CHECK(e.reshape({24}).to_vector() == e.to_vector());
  CHECK(e.contiguous().is_contiguous());
  CHECK(x.expand({3, 2}).shape() == Shape{3, 2});
  CHECK_THROWS_WITH(x.expand({4, 1}), Contains("expand") && Contains("f32[3, 1]") && Contains("[4, 1]"));
  CHECK_THROWS_WITH(x.expand({3}), Contains("expand") && Contains("fewer dims"));
}

TEST_CASE("unsqueeze, squeeze and flatten", "[tensor]") {
  const Tensor x = iota({2, 3});
  CHECK(x.unsqueeze(0).shape() == Shape{1, 2, 3});
  CHECK(x.unsqueeze(1).shape() == Shape{2, 1, 3});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 1});
  CHECK(x.unsqueeze(2).is_contiguous());
  CHECK(x.unsqueeze(1).same_storage(x));
  CHECK(x.unsqueeze(1).squeeze(1).shape() == Shape{2, 3});
  CHECK(x.unsqueeze(0).squeeze(-3).strides() == x.strides());
  CHECK_THROWS_WITH(x.squeeze(0), Contains("squeeze") && Contains("not 1"));
  const Tensor y = iota({2, 3, 4, 5});
  CHECK(y.flatten().shape() == Shape{120});
  CHECK(y.flatten(1).shape() == Shape{2, 60});
  CHECK(y.flatten(1, 2).shape() == Shape{2, 12, 5});
  CHECK(y.flatten(-2, -1).shape() == Shape{2, 3, 20});
  CHECK(y.flatten(1, 2).same_storage(y));
  // Flattening a permuted tensor needs a copy.
  const Tensor p = y.permute({0, 2, 1, 3});
  const Tensor pf = p.flatten(1, 2);
  CHECK_FALSE(pf.same_storage(y));
  CHECK(pf.to_vector() == p.contiguous().view({2, 12, 5}).to_vector());
  CHECK(scalar_tensor(4.0).flatten().shape() == Shape{1});
  CHECK_THROWS_WITH(y.flatten(2, 1), Contains("flatten"));
}

TEST_CASE("contiguous and clone", "[tensor]") {
  const Tensor x = iota({3, 4});
  CHECK(x.contiguous().same_storage(x));
  // Without elements a tensor is contiguous, fresh or a view (a zero size not in front used to
  // make a fresh one report otherwise; found by fuzz/safetensors.cpp).
  for (const Shape& s : {Shape{0}, Shape{4, 0}, Shape{0, 0}, Shape{2, 0, 3}}) {
    INFO(shape_str(s));
    const Tensor e = empty(s);
    CHECK(e.is_contiguous());
    CHECK(e.contiguous().same_storage(e));
  }
  CHECK(empty({3, 0}).t().is_contiguous());
  const Tensor t = x.t();
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK_FALSE(c.same_storage(x));
  CHECK(c.strides() == Shape{3, 1});
  CHECK(c.to_vector() == t.to_vector());
  Tensor k = x.clone();
  CHECK_FALSE(k.same_storage(x));
  CHECK(k.to_vector() == x.to_vector());
  k.flat_set(0, 42.0);
  CHECK(x.flat_get(0) == 0.0);
  const Tensor kt = t.clone();
  CHECK(kt.is_contiguous());
  CHECK(kt.shape() == Shape{4, 3});
  CHECK(kt.to_vector() == t.to_vector());
  // is_contiguous ignores the strides of size-1 dims.
  CHECK(x.narrow(0, 1, 1).is_contiguous());
  CHECK(x.unsqueeze(0).expand({1, 3, 4}).is_contiguous());
  for (DType dt : {DType::f64, DType::f16, DType::bf16, DType::i64}) {
    const Tensor y = iota({2, 3}, dt).t().clone();
    CHECK(y.dtype() == dt);
    CHECK(y.to_vector() == Vec{0, 3, 1, 4, 2, 5});
  }
}

TEST_CASE("permuted copies: the tiled transposing copy gives every element where it belongs", "[tensor]") {
  // Note [Transposing copies] (tensor/cpu/copy.cpp), and copies by runs: sizes around and past 32 x 32 tiles, with
  // and without batch dims in front, between and behind, in 1-, 2-, 4- and 8-byte dtypes; every
  // element is checked against the index arithmetic.
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  for (const Case& c : {Case{{37, 70}, {1, 0}}, Case{{3, 50, 33}, {0, 2, 1}}, Case{{2, 9, 8, 40}, {0, 3, 1, 2}},
                        Case{{2, 40, 9, 8}, {0, 2, 3, 1}}, Case{{33, 3, 64}, {2, 1, 0}}, Case{{8, 8}, {1, 0}},
                        // the innermost dim contiguous on both sides: runs copied as blocks
                        Case{{5, 6, 40}, {1, 0, 2}}, Case{{4, 3, 2, 50}, {2, 0, 1, 3}}})
    for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::e4m3}) {
      INFO(shape_str(c.shape) << " " << dtype_name(dt));
      const int64_t n = numel_of(c.shape);
      // values that survive every dtype exactly: 0 .. 15 repeating (e4m3 holds them all)
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i % 16);
      const Tensor x = from_vector(v, c.shape).to(dt);
      const Tensor p = x.permute(c.perm);
      const Tensor y = p.contiguous();
      REQUIRE(y.is_contiguous());
      const std::vector<double> got = y.to(DType::f64).to_vector();
      // element i of y: its index in p's shape, mapped back to x's row-major position
      const Shape ps = p.shape(), xs = c.shape;
      bool ok = true;
      for (int64_t i = 0; i < n && ok; ++i) {
        int64_t rest = i, pos = 0;
        std::vector<int64_t> at(ps.size());
        for (size_t d = ps.size(); d-- > 0;) {
          at[d] = rest % ps[d];
          rest /= ps[d];
        }
        std::vector<int64_t> xi(xs.size());
        for (size_t d = 0; d < ps.size(); ++d) xi[size_t(c.perm[d])] = at[d];
        for (size_t d = 0; d < xs.size(); ++d) pos = pos * xs[d] + xi[d];
        ok = got[size_t(i)] == v[size_t(pos)];
        if (!ok) INFO("element " << i);
      }
      CHECK(ok);
    }
}

TEST_CASE("transpose_tile: every block size and ragged edge, on every conversion path", "[tensor]") {
  // Note [Transposed tiles] (tensor/cpu/transpose.h): bytes in 16 x 16 blocks, floats in 8 x 8
  // ("avx512") or 4 x 4 blocks, the rest one value at a time; strides wider than the tile.
  const std::string saved = cpu::conversion_path();
  for (const std::string& path : cpu::conversion_paths()) {
    cpu::set_conversion_path(path);
    for (int64_t rows : {0, 1, 4, 7, 8, 15, 16, 17, 33})
      for (int64_t cols : {0, 1, 3, 8, 9, 16, 31, 32, 40}) {
        INFO(path << " " << rows << " x " << cols);
        const int64_t ss = cols + 5, ds = rows + 3;
        std::vector<uint8_t> sb(size_t(rows * ss)), db(size_t(cols * ds), 0xEE);
        std::vector<float> sf(size_t(rows * ss)), df(size_t(cols * ds), -1.0f);
        for (size_t i = 0; i < sb.size(); ++i) {
          sb[i] = uint8_t(i * 7 + 3);
          sf[i] = std::bit_cast<float>(uint32_t(0x7FC00000u + i));  // NaN payloads: the bits move
        }
        cpu::transpose_tile(sb.data(), ss, db.data(), ds, rows, cols);
        cpu::transpose_tile(sf.data(), ss, df.data(), ds, rows, cols);
        bool ok = true;
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < ds; ++r) {
            const bool in = r < rows;
            ok = ok && db[size_t(c * ds + r)] == (in ? sb[size_t(r * ss + c)] : 0xEE);
            ok = ok && std::bit_cast<uint32_t>(df[size_t(c * ds + r)]) ==
                           std::bit_cast<uint32_t>(in ? sf[size_t(r * ss + c)] : -1.0f);
          }
        CHECK(ok);
      }
  }
  cpu::set_conversion_path(saved);
}

// ---- factories -----------------------------------------------------------------------------------

TEST_CASE("factories", "[tensor]") {
  const Tensor e = empty({2, 0, 3}, DType::bf16);
  CHECK(e.numel() == 0);
  CHECK(e.dtype() == DType::bf16);
  CHECK(e.device() == Device::cpu());
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64}) {
    INFO(dtype_name(dt));
    CHECK(zeros({2, 3}, dt).to_vector() == Vec(6, 0.0));
    CHECK(ones({4}, dt).to_vector() == Vec(4, 1.0));
    CHECK(full({3}, -2.5, dt).to_vector() == Vec(3, dt == DType::i64 ? -2.0 : -2.5));
    CHECK(zeros({2}, dt).dtype() == dt);
    CHECK(arange(0, 4, 1, dt).to_vector() == Vec{0, 1, 2, 3});
  }
  CHECK(full({2}, 0.1, DType::f16).to_vector() == Vec(2, 0.0999755859375));
  const Tensor z = zeros_like(iota({2, 2}, DType::f16));
  CHECK(z.dtype() == DType::f16);
  CHECK(z.shape() == Shape{2, 2});
  CHECK(ones_like(z).to_vector() == Vec(4, 1.0));
  CHECK(empty_like(z).shape() == z.shape());

  CHECK(arange(0, 5).to_vector() == Vec{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25).to_vector() == Vec{1, 1.25, 1.5, 1.75});
  CHECK(arange(5, 0, -2).to_vector() == Vec{5, 3, 1});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(3, 0).numel() == 0);
  CHECK_THROWS_WITH(arange(0, 1, 0), Contains("arange"));

  const Tensor v = from_vector(Vec{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.shape() == Shape{2, 3});
  CHECK(v.to_vector() == Vec{1, 2, 3, 4, 5, 6});
  CHECK(from_vector(std::vector<float>{0.5f, -1.5f}, {2}, DType::bf16).to_vector() == Vec{0.5, -1.5});
  const Tensor iv = from_vector(std::vector<int64_t>{-3, 9007199254740993}, {2});
  CHECK(iv.dtype() == DType::i64);
  CHECK(iv.values<int64_t>() == std::vector<int64_t>{-3, 9007199254740993});
  CHECK_THROWS_WITH(from_vector(Vec{1, 2, 3}, {2, 2}), Contains("from_vector") && Contains("[2, 2]"));
  CHECK_THROWS_WITH(from_vector(std::vector<int64_t>{1}, {2}), Contains("from_vector") && Contains("[2]"));
  CHECK_THROWS_WITH(empty({2, -1}), Contains("empty") && Contains("negative"));

  const Tensor s = scalar_tensor(3.5, DType::f64);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);
  CHECK(scalar_tensor(0.1, DType::f16).item() == 0.0999755859375);
  CHECK_THROWS_WITH(v.item(), Contains("item") && Contains("f32[2, 3]"));
  CHECK_THROWS_WITH(v.flat_get(6), Contains("out of range") && Contains("f32[2, 3]"));
  CHECK_THROWS_WITH(v.data<half>(), Contains("f16") && Contains("f32"));
  CHECK_THROWS_WITH(Tensor().shape(), Contains("undefined"));
  CHECK(v.size(-1) == 3);
  CHECK_THROWS_WITH(v.size(2), Contains("Tensor::size"));
}

// ---- casts ---------------------------------------------------------------------------------------

TEST_CASE("shapes whose element count or byte size overflows are rejected", "[tensor]") {
  const int64_t big = int64_t(1) << 32;
  // 2^32 * 2^32 wraps to 0 in 64 bits: a 0-byte storage that a later read would run off.
  CHECK_THAT(error_of([&] { zeros({big, big}); }), Contains("[4294967296, 4294967296]") && Contains("overflows"));
  CHECK_THAT(error_of([&] { empty({big, big, 2}); }), Contains("overflows"));
  // The element count fits, the byte count does not: 2^62 f32 elements are 2^64 bytes.
  CHECK_THAT(error_of([&] { empty({int64_t(1) << 62}, DType::f32); }),
             Contains("empty") && Contains("[4611686018427387904]") && Contains("bytes") && Contains("overflows"));
  CHECK_THAT(error_of([&] { empty({3, -2}); }), Contains("negative") && Contains("[3, -2]"));
  CHECK_THAT(error_of([&] { numel_of({2, -1}); }), Contains("negative") && Contains("[2, -1]"));
  CHECK_THAT(error_of([&] { numel_of({big, big}); }), Contains("overflows"));
  // A zero dim makes an empty tensor, but the other dims must still multiply without overflow
  // (their strides are that product).
  CHECK(empty({big, 0, 2}).numel() == 0);
  CHECK_THAT(error_of([&] { empty({big, big, 0}); }), Contains("overflows"));
  CHECK_THAT(error_of([&] { empty({big, 0, big}); }), Contains("overflows"));
  CHECK_THAT(error_of([&] { zeros({0}).reshape({big, big, 0}); }), Contains("overflows"));
  CHECK_THAT(error_of([&] { zeros({4}).reshape({-1, big, big}); }), Contains("reshape"));
  CHECK(numel_of({}) == 1);
  CHECK(numel_of({big, big / 2 - 1}) == big * (big / 2 - 1));
}

TEST_CASE("to(dtype) rounds to nearest even for every dtype pair", "[tensor]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double t = std::ldexp(1.0, -40);  // far below every f32 ulp used here
  // Hard cases: exact ties, values a hair off a tie (which a detour through f32 would turn into
  // a tie), subnormals, overflow thresholds, signed zero.
  const Vec vals = {0.0,
                    -0.0,
                    1.0,
                    -2.5,
                    0.1,
                    1.0 / 3.0,
                    3.141592653589793,
                    1e10,
                    -1e-3,
                    65504.0,
                    65519.0,
                    65520.0,
                    65520.0 - t,
                    -65520.0 + t,
                    1.0 + std::ldexp(1.0, -11),
                    1.0 + std::ldexp(1.0, -11) + t,
                    1.0 + std::ldexp(1.0, -11) - t,
                    1.0 + 3 * std::ldexp(1.0, -11),
                    1.0 + std::ldexp(1.0, -8) + t,
                    -(1.0 + std::ldexp(1.0, -8) + t),
                    1.0 + std::ldexp(1.0, -24),
                    1.0 + std::ldexp(1.0, -24) + t * t,
                    std::ldexp(1.0, -25),
                    std::ldexp(1.0, -25) + std::ldexp(1.0, -60),
                    std::ldexp(3.0, -25),
                    std::ldexp(1023.5, -24),
                    std::ldexp(1.0, -130),
                    std::ldexp(1.5, -134),
                    1e-45,
                    3.4028235677973366e38,
                    3.4e38,
                    1e300,
                    -1e300,
                    2049.0,
                    2051.0,
                    16777217.0,
                    33554432.0 + 131072.0 + 1.0,
                    inf,
                    -inf,
                    std::numeric_limits<double>::quiet_NaN()};
  const DType floats[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
  for (DType src : floats) {
    const Tensor x = from_vector(vals, {int64_t(vals.size())}, src);
    const Vec xv = x.to_vector();  // exact: every float dtype widens to f64 exactly
    for (size_t i = 0; i < vals.size(); ++i) {
      INFO("from_vector to " << dtype_name(src) << ": " << vals[i]);
      CHECK(same_value(xv[i], ref_cast(vals[i], src)));
    }
    for (DType dst : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64}) {
      const Tensor y = x.to(dst);
      REQUIRE(y.dtype() == dst);
      if (dst == src) CHECK(y.same_storage(x));  // nothing to do: self
      if (dst == DType::i64) {
        const std::vector<int64_t> yi = y.values<int64_t>();
        for (size_t i = 0; i < vals.size(); ++i) {
          INFO(dtype_name(src) << " -> i64: " << xv[i]);
          // Toward zero; NaN and values outside the i64 range give INT64_MIN (truncate_to_i64).
          if (std::isfinite(xv[i]) && std::fabs(xv[i]) < 0x1p63) CHECK(double(yi[i]) == std::trunc(xv[i]));
          else CHECK(yi[i] == std::numeric_limits<int64_t>::min());
        }
        continue;
      }
      const Vec yv = y.to_vector();
      for (size_t i = 0; i < vals.size(); ++i) {
        INFO(dtype_name(src) << " -> " << dtype_name(dst) << ": " << xv[i]);
        CHECK(same_value(yv[i], ref_cast(xv[i], dst)));
      }
    }
  }
  // i64 sources: exact integers, rounded once to the target.
  const std::vector<int64_t> ints = {0,
                                     1,
                                     -1,
                                     2049,
                                     2051,
                                     -2051,
                                     65519,
                                     65520,
                                     65535,
                                     16777217,
                                     -16777219,
                                     (int64_t(1) << 25) + (int64_t(1) << 17) + 1,
                                     (int64_t(1) << 60) + (int64_t(1) << 52) + 1,
                                     -((int64_t(1) << 60) + (int64_t(1) << 36) + 1),
                                     (int64_t(1) << 53) + 1,
                                     std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min()};
  const Tensor xi = from_vector(ints, {int64_t(ints.size())});
  CHECK(xi.to(DType::i64).same_storage(xi));
  for (DType dst : floats) {
    const Vec yv = xi.to(dst).to_vector();
    for (size_t i = 0; i < ints.size(); ++i) {
      INFO("i64 -> " << dtype_name(dst) << ": " << ints[i]);
      const double want = dst == DType::f64 ? ref_round_int(ints[i], {53, -1022, 1.7976931348623157e308})
                                            : ref_round_int(ints[i], ref_format_of(dst));
      CHECK(yv[i] == want);
    }
  }
  // Non-contiguous sources cast element by element in logical order.
  const Tensor nc = iota({3, 4}, DType::f64).t();
  CHECK(nc.to(DType::f16).to_vector() == nc.to_vector());
  CHECK(nc.to(DType::f16).is_contiguous());
}

TEST_CASE("flat_set and full round once to the dtype", "[tensor]") {
  const double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);  // just above an fp16 tie
  Tensor h = zeros({2}, DType::f16);
  h.flat_set(1, v);
  CHECK(h.flat_get(1) == 1.0 + std::ldexp(1.0, -10));
  CHECK(full({1}, v, DType::f16).item() == 1.0 + std::ldexp(1.0, -10));
  CHECK(full({1}, 65520.0 - std::ldexp(1.0, -30), DType::f16).item() == 65504.0);
  const double w = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(full({1}, w, DType::bf16).item() == 1.0 + std::ldexp(1.0, -7));
  Tensor i = zeros({1}, DType::i64);
  i.flat_set(0, -3.7);
  CHECK(i.item() == -3.0);
}

TEST_CASE("copy_ broadcasts and casts", "[tensor]") {
  Tensor d = zeros({2, 3});
  d.copy_(from_vector(Vec{1, 2, 3}, {3}, DType::f64));
  CHECK(d.to_vector() == Vec{1, 2, 3, 1, 2, 3});
  d.copy_(from_vector(Vec{7, 8}, {2, 1}, DType::f16));
  CHECK(d.to_vector() == Vec{7, 7, 7, 8, 8, 8});
  d.copy_(scalar_tensor(-1.0, DType::i64));
  CHECK(d.to_vector() == Vec(6, -1.0));
  // Into a strided view: writes land in the base.
  Tensor base = zeros({3, 2});
  Tensor view = base.t();  // [2, 3]
  view.copy_(iota({2, 3}));
  CHECK(base.to_vector() == Vec{0, 3, 1, 4, 2, 5});
  Tensor col = base.select(1, 0);
  col.copy_(full({1}, 9.0));
  CHECK(base.to_vector() == Vec{9, 3, 9, 4, 9, 5});
  // Rounds once from f64 to a 16-bit destination.
  Tensor h = zeros({1}, DType::f16);
  h.copy_(from_vector(Vec{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}, {1}, DType::f64));
  CHECK(h.item() == 1.0 + std::ldexp(1.0, -10));
  CHECK_THROWS_WITH(d.copy_(zeros({4})), Contains("copy_") && Contains("[4]") && Contains("[2, 3]"));
  Tensor small = zeros({3});
  CHECK_THROWS_WITH(small.copy_(zeros({2, 3})), Contains("copy_") && Contains("[2, 3]"));
}

// ---- printing --------------------------------------------------------------------------------------

TEST_CASE("printing shows meta, values and elides long dims", "[tensor]") {
  const Tensor x = iota({2, 3});
  CHECK(x.meta() == "f32[2, 3]");
  const std::string s = x.str();
  INFO(s);
  CHECK_THAT(s, Contains("f32[2, 3]"));
  CHECK_THAT(s, Contains("[[0, 1, 2]"));
  CHECK_THAT(s, Contains("[3, 4, 5]]"));
  std::ostringstream os;
  os << x;
  CHECK(os.str() == s);

  const std::string l = arange(0, 100).str();
  INFO(l);
  CHECK_THAT(l, Contains("f32[100]"));
  CHECK_THAT(l, Contains("[0, 1, 2, ..., 97, 98, 99]"));
  CHECK_THAT(l, !Contains("50"));
  const std::string m = iota({10, 10}).str();
  INFO(m);
  CHECK_THAT(m, Contains("..."));
  CHECK_THAT(m, Contains("99]]"));
  CHECK_THAT(m, !Contains("55"));
  CHECK_THAT(arange(0, 100).str(200), !Contains("..."));

  CHECK_THAT(scalar_tensor(0.1, DType::f16).str(), Contains("f16[]") && Contains("0.09998"));
  CHECK_THAT(from_vector(std::vector<int64_t>{3, -4}, {2}).str(), Contains("i64[2]") && Contains("[3, -4]"));
  CHECK_THAT(full({2}, 0.1, DType::f64).str(), Contains("f64[2]") && Contains("0.1"));
  CHECK_THAT(empty({0, 3}).str(), Contains("f32[0, 3]") && Contains("[]"));
  CHECK(Tensor().str() == "Tensor(undefined)");
  CHECK_THAT(x.t().str(), Contains("[[0, 3]"));  // logical order, not memory order
}

// ---- error messages ----------------------------------------------------------------------------------

TEST_CASE("op errors name the op, the shapes and the dtypes", "[tensor]") {
  const std::string shape_msg = error_of([] { add(zeros({2, 3}), zeros({4})); });
  INFO(shape_msg);
  CHECK_THAT(shape_msg, Contains("add") && Contains("[2, 3]") && Contains("[4]"));
  const std::string dtype_msg = error_of([] { add(zeros({2, 3}, DType::f16), zeros({2, 3}, DType::f32)); });
  INFO(dtype_msg);
  CHECK_THAT(dtype_msg, Contains("add") && Contains("f16") && Contains("f32"));
  CHECK_THAT(error_of([] { mul(zeros({3}), zeros({2})); }), Contains("mul") && Contains("[3]") && Contains("[2]"));
  CHECK_THAT(error_of([] { exp(zeros({2}, DType::i64)); }), Contains("exp") && Contains("i64"));
  CHECK_THAT(error_of([] { broadcast_shapes({2, 3}, {3, 2}, "myop"); }), Contains("myop"));
  CHECK_THAT(error_of([] { dtype_from_name("f8"); }), Contains("f8"));
  CHECK(dtype_from_name("bf16") == DType::bf16);
  CHECK(dtype_from_name("float16") == DType::f16);
  CHECK(dtype_from_name("i64") == DType::i64);
}

// ---- devices -----------------------------------------------------------------------------------------

TEST_CASE("Device::parse", "[tensor]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:0") == Device::cuda(0));
  const Device d = Device::parse("cuda:3");
  CHECK(d.is_cuda());
  CHECK(d.index == 3);
  CHECK(d.str() == "cuda:3");
  CHECK(Device::parse(d.str()) == d);
  CHECK(Device::cpu().str() == "cpu");
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda0", "cuda:99999999999"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(Device::parse(bad), Error);
    CHECK_THAT(error_of([&] { Device::parse(bad); }), Contains("device"));
  }
}

TEST_CASE("CUDA tensors in a build without CUDA", "[tensor]") {
  if (cuda::built_with_cuda()) {
    SUCCEED("built with CUDA: covered by the [cuda] tests");
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda::is_available());
  CHECK_THROWS_WITH(empty({2}, DType::f32, Device::cuda()), Contains("built without CUDA"));
  CHECK_THROWS_WITH(zeros({2}, DType::f16, Device::cuda(1)), Contains("built without CUDA"));
  CHECK_THROWS_WITH(iota({2, 2}).to(Device::cuda()), Contains("built without CUDA"));
  CHECK_THROWS_WITH(empty({2}, DType::f64, Device::cuda()), Contains("f64") && Contains("CPU"));
  const Tensor x = iota({2});
  CHECK(x.to(Device::cpu()).same_storage(x));
}

TEST_CASE("increment_ adds to an i64 counter in place", "[tensor]") {
  Tensor c = from_vector(std::vector<int64_t>{0, 5, -3, 7}, {2, 2});
  Tensor col = c.t();  // a strided view writes through to the storage
  increment_(col, 2);
  CHECK(c.to_vector() == std::vector<double>{2, 7, -1, 9});
  Tensor s = from_vector(std::vector<int64_t>{41}, Shape{});
  increment_(s);
  CHECK(s.item() == 42.0);
  Tensor top = from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::max()}, {1});
  increment_(top);  // wraps, as on the GPU
  CHECK(top.data<int64_t>()[0] == std::numeric_limits<int64_t>::min());
  Tensor f = zeros({2});
  CHECK_THROWS_WITH(increment_(f), Catch::Contains("increment_: counter f32[2] must be i64"));
  Tensor b = from_vector(std::vector<int64_t>{0}, {1}).expand({3});
  CHECK_THROWS_WITH(increment_(b), Catch::Contains("broadcast view"));
  Tensor none;
  CHECK_THROWS_WITH(increment_(none), Catch::Contains("undefined"));
}
