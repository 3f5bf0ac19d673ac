// im2col and col2im as tensor ops (tensor/ops/conv.h, tensor/cpu/im2col.cpp): the columns against
// a direct loop on every layout and dtype, conv2d as the GEMM of the columns, col2im as im2col's
// adjoint and as conv2d's input gradient, its summation order and rounding, its independence of
// the thread count, and the error messages.
#include "support/catch.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/op_cases.h"
#include "support/test_util.h"
#include "tensor/cpu/convert.h"

using namespace mixtape;
using Catch::Contains;
using test::rand_input;

namespace {

// A convolution's geometry; pe is the padding at the end when it differs.
struct Geo {
  Shape x;  // [N, C, H, W]
  Size2 k, s = 1, p = 0, d = 1;
  std::optional<Size2> pe = std::nullopt;
  const char* what = "";

  Size2 end() const { return pe.value_or(p); }
  int64_t OH() const { return (x[2] + p.h + end().h - d.h * (k.h - 1) - 1) / s.h + 1; }
  int64_t OW() const { return (x[3] + p.w + end().w - d.w * (k.w - 1) - 1) / s.w + 1; }
  int64_t P() const { return x[0] * OH() * OW(); }
  int64_t K() const { return x[1] * k.h * k.w; }
};

std::string describe(const Geo& g) {
  std::string s = "x " + shape_str(g.x) + " kernel " + size2_str(g.k) + " stride " + size2_str(g.s) + " padding " +
                  size2_str(g.p) + " dilation " + size2_str(g.d);
  if (g.pe) s += " padding at the end " + size2_str(*g.pe);
  return s + " (" + g.what + ")";
}

const std::vector<Geo>& geometries() {
  static const std::vector<Geo> all = {
      {{2, 3, 6, 5}, 3, 1, 0, 1, std::nullopt, "plain 3x3"},
      {{2, 3, 7, 6}, 3, 2, 1, 1, std::nullopt, "stride 2, padding 1"},
      {{1, 2, 9, 8}, {3, 2}, {1, 2}, {2, 1}, 2, std::nullopt, "uneven kernel, stride, padding; dilation 2"},
      {{1, 4, 5, 7}, 1, 3, 0, 1, std::nullopt, "1x1 kernel, stride 3"},
      {{2, 1, 4, 4}, 5, 1, 2, 1, std::nullopt, "kernel larger than the input"},
      {{2, 2, 2, 3}, {5, 4}, 1, {2, 1}, 1, Size2{3, 2}, "kernel larger than the input, padding_end"},
      {{2, 3, 6, 5}, {2, 4}, 1, {0, 1}, 1, Size2{1, 2}, "padding \"same\" with an even kernel"},
      {{1, 2, 7, 7}, 3, 2, 2, 1, Size2{0, 1}, "padding_end smaller than padding"},
      {{3, 2, 8, 8}, 2, 2, 0, 3, std::nullopt, "dilation 3"},
      {{1, 2, 9, 9}, 2, 4, 1, 1, std::nullopt, "stride larger than the kernel"},
      {{1, 2, 3, 4}, 2, 1, {2, 3}, 1, std::nullopt, "pixels whose taps are all in the padding"},
  };
  return all;
}

// x's values in three layouts: contiguous, channels-last (permuted), and a view that narrows C
// and H and takes every other column.
Tensor input(const Shape& s, DType dt, uint64_t seed, int layout) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const auto rand_input = [dt](const Shape& shape, DType, uint64_t seed) {  // 8-bit: codes of f32 values
    return is_8bit(dt) ? test::rand_input(shape, DType::f32, seed).to(dt) : test::rand_input(shape, dt, seed);
  };
  if (layout == 1) return rand_input({N, H, W, C}, dt, seed).permute({0, 3, 1, 2});
  if (layout == 2)
    return rand_input({N, C + 2, H + 1, 2 * W}, dt, seed).narrow(1, 1, C).narrow(2, 1, H).slice(3, 0, 2 * W, 2);
  return rand_input(s, dt, seed);
}
const char* layout_name(int layout) { return layout == 0 ? "contiguous" : layout == 1 ? "channels-last" : "sliced"; }

// The columns by the definition: cols[(n, oh, ow), (c, kh, kw)] = x[n, c, ih, iw] or 0.
std::vector<double> naive_im2col(const Tensor& x, const Geo& g) {
  const std::vector<double> X = x.to_vector();
  const int64_t N = g.x[0], C = g.x[1], H = g.x[2], W = g.x[3], OH = g.OH(), OW = g.OW();
  std::vector<double> cols;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t kh = 0; kh < g.k.h; ++kh)
            for (int64_t kw = 0; kw < g.k.w; ++kw) {
              const int64_t ih = oh * g.s.h - g.p.h + kh * g.d.h, iw = ow * g.s.w - g.p.w + kw * g.d.w;
              const bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
              cols.push_back(in ? X[size_t(((n * C + c) * H + ih) * W + iw)] : 0.0);
            }
  return cols;
}

// col2im by the definition in the documented order, in T (float or double): each pixel's sum
// from 0 over its taps (kh, kw) ascending.
template <class T>
std::vector<double> naive_col2im(const Tensor& cols, const Geo& g) {
  const std::vector<double> V = cols.to_vector();
  const int64_t N = g.x[0], C = g.x[1], H = g.x[2], W = g.x[3], OH = g.OH(), OW = g.OW(), K = g.K();
  std::vector<double> x;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw) {
          T acc = 0;
          for (int64_t kh = 0; kh < g.k.h; ++kh)
            for (int64_t kw = 0; kw < g.k.w; ++kw) {
              const int64_t th = ih + g.p.h - kh * g.d.h, tw = iw + g.p.w - kw * g.d.w;  // oh s, ow s
              if (th < 0 || tw < 0 || th % g.s.h || tw % g.s.w || th / g.s.h >= OH || tw / g.s.w >= OW) continue;
              const int64_t row = (n * OH + th / g.s.h) * OW + tw / g.s.w, col = (c * g.k.h + kh) * g.k.w + kw;
              acc += T(V[size_t(row * K + col)]);
            }
          x.push_back(double(acc));
        }
  return x;
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

void check_close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]))) ++bad;
  INFO(bad << " of " << g.size() << " elements differ");
  CHECK(bad == 0);
}

// The thread count for a scope, restored after.
struct ThreadsScope {
  int saved = num_threads();
  explicit ThreadsScope(int n) { set_num_threads(n); }
  ~ThreadsScope() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("im2col copies x into the columns as a direct loop does", "[im2col]") {
  // Every dtype, 8-bit codes among them (Note [Padded codes] where there is padding), and both
  // layouts: pixel-major contiguous, channel-major the transposed view of a contiguous
  // [C*KH*KW, N*OH*OW] (Note [Channel-major columns]).
  for (const Geo& g : geometries())
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::e4m3, DType::e5m2})
      for (int layout : {0, 1, 2})
        for (ColumnLayout cl : {ColumnLayout::pixel_major, ColumnLayout::channel_major}) {
          const bool by_channel = cl == ColumnLayout::channel_major;
          INFO(describe(g) << " " << dtype_name(dt) << " " << layout_name(layout)
                           << (by_channel ? " channel-major" : ""));
          const Tensor x = input(g.x, dt, 11, layout);
          const Tensor cols = im2col(x, g.k, g.s, g.p, g.d, g.pe, cl);
          REQUIRE(cols.shape() == Shape({g.P(), g.K()}));
          CHECK(cols.dtype() == dt);
          CHECK(cols.strides() == (by_channel ? Shape{1, g.P()} : Shape{g.K(), 1}));
          CHECK(cols.to_vector() == naive_im2col(x, g));  // copies: exact in every dtype
        }
}

TEST_CASE("conv2d is the GEMM of im2col's columns and the weight", "[im2col]") {
  // y = cols W^T: (N*OH*OW, OC) = (N*OH*OW, C*KH*KW) (OC, C*KH*KW)^T, permuted to [N, OC, OH, OW].
  // In f32 both sides are the same chain of FMAs over K per element (Note [Deterministic GEMM]),
  // so the bits agree; f64 goes through OpenBLAS, whose kernels may order the two products' sums
  // differently.
  for (const Geo& g : geometries()) {
    const bool same = g.pe.has_value() && g.s == Size2(1) && g.p == same_padding(g.k, g.d).begin &&
                      *g.pe == same_padding(g.k, g.d).end;
    if (g.pe && !same) continue;  // conv2d takes a padding at the end only as padding "same"
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(describe(g) << " " << dtype_name(dt));
      const int64_t OC = 5;
      const Tensor x = input(g.x, dt, 21, 1), w = rand_input({OC, g.x[1], g.k.h, g.k.w}, dt, 22);
      const Tensor y = same ? conv2d(x, w, Tensor(), 1, "same", g.d) : conv2d(x, w, Tensor(), g.s, g.p, g.d);
      const Tensor ym = matmul(im2col(x, g.k, g.s, g.p, g.d, g.pe), w.reshape({OC, g.K()}).t());
      const Tensor yc = ym.reshape({g.x[0], g.OH(), g.OW(), OC}).permute({0, 3, 1, 2}).contiguous();
      if (dt == DType::f32) CHECK(yc.to_vector() == y.to_vector());
      else check_close(yc, y, 1e-13, 1e-14);
    }
  }
}

TEST_CASE("col2im is the adjoint of im2col", "[im2col]") {
  // <im2col(x), c> = <x, col2im(c)> for random x and c, in f64; c also as a transposed view.
  for (const Geo& g : geometries())
    for (bool transposed : {false, true}) {
      INFO(describe(g) << (transposed ? " transposed columns" : ""));
      const Tensor x = input(g.x, DType::f64, 31, 2);
      const Tensor c =
          transposed ? rand_input({g.K(), g.P()}, DType::f64, 32).t() : rand_input({g.P(), g.K()}, DType::f64, 32);
      const double lhs = dot(im2col(x, g.k, g.s, g.p, g.d, g.pe), c);
      const Tensor back = col2im(c, g.x, g.k, g.s, g.p, g.d, g.pe);
      REQUIRE(back.shape() == g.x);
      const double rhs = dot(x, back);
      CHECK(std::abs(lhs - rhs) <= 1e-12 * std::abs(lhs));
    }
}

TEST_CASE("col2im sums in the documented order and rounds once", "[im2col]") {
  // Each pixel: from 0 over its taps (kh, kw) ascending, in fp32 (f64 for f64), rounded once to
  // the columns' dtype: f32 and f64 bit for bit against that loop, the 16-bit columns as the
  // f32 columns of the same values rounded after the sum.
  for (const Geo& g : geometries()) {
    INFO(describe(g));
    const Tensor c32 = rand_input({g.P(), g.K()}, DType::f32, 41);
    const Tensor x32 = col2im(c32, g.x, g.k, g.s, g.p, g.d, g.pe);
    CHECK(x32.to_vector() == naive_col2im<float>(c32, g));
    // channel-major columns (Note [Channel-major columns]), read where they lie: the same bits
    CHECK(col2im(c32.t().contiguous().t(), g.x, g.k, g.s, g.p, g.d, g.pe).to_vector() == x32.to_vector());
    // rounded once to a 16-bit out_dtype: the f32 sums' rounding
    for (DType out : {DType::f16, DType::bf16}) {
      const Tensor x16 = col2im(c32, g.x, g.k, g.s, g.p, g.d, g.pe, out);
      CHECK(x16.dtype() == out);
      CHECK(x16.to_vector() == x32.to(out).to_vector());
    }
    const Tensor c64 = rand_input({g.P(), g.K()}, DType::f64, 42);
    CHECK(col2im(c64, g.x, g.k, g.s, g.p, g.d, g.pe).to_vector() == naive_col2im<double>(c64, g));
    for (DType dt : {DType::f16, DType::bf16}) {
      INFO(dtype_name(dt));
      const Tensor c16 = c32.to(dt);
      const Tensor want = col2im(c16.to(DType::f32), g.x, g.k, g.s, g.p, g.d, g.pe).to(dt);
      CHECK(col2im(c16, g.x, g.k, g.s, g.p, g.d, g.pe).to_vector() == want.to_vector());
    }
  }
}

TEST_CASE("col2im of dy W is conv2d's input gradient", "[im2col]") {
  // cols = dy_mat W: (N*OH*OW, C*KH*KW) = (N*OH*OW, OC) (OC, C*KH*KW), dy_mat the pixels of dy as
  // rows; col2im(cols) = conv2d_backward_input(dy, w). In f32 both GEMMs sum each element in one
  // chain over OC and both col2im add in (kh, kw) order, so the bits agree; f64 within rounding
  // (OpenBLAS).
  for (const Geo& g : geometries())
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(describe(g) << " " << dtype_name(dt));
      const int64_t OC = 4;
      const Tensor w = rand_input({OC, g.x[1], g.k.h, g.k.w}, dt, 51);
      const Tensor dy = rand_input({g.x[0], OC, g.OH(), g.OW()}, dt, 52);
      const Tensor dy_mat = dy.permute({0, 2, 3, 1}).reshape({g.P(), OC});
      const Tensor dx = col2im(matmul(dy_mat, w.reshape({OC, g.K()})), g.x, g.k, g.s, g.p, g.d, g.pe);
      const Tensor want = conv2d_backward_input(dy, w, g.x, g.s, g.p, g.d, 1, g.pe);
      if (dt == DType::f32) CHECK(dx.to_vector() == want.to_vector());
      else check_close(dx, want, 1e-13, 1e-14);
    }
}

TEST_CASE("im2col and col2im give the same bits with 1 and 2 threads", "[im2col][threads]") {
  // 32 planes of 24 x 24 with a 3 x 3 kernel: col2im splits the planes, im2col the 2,304 rows.
  const Geo g{{4, 8, 24, 24}, 3, 1, 1, 1, std::nullopt, "threads"};
  // 8-bit codes: padded images first, in the same region (Note [Padded codes]); and channel-major.
  for (DType dt : {DType::f32, DType::bf16, DType::e4m3}) {
    INFO(dtype_name(dt));
    const Tensor x = input(g.x, dt, 61, 1), c = rand_input({g.P(), g.K()}, is_8bit(dt) ? DType::f32 : dt, 62);
    std::vector<std::vector<double>> cols, by_channel, imgs;
    for (int threads : {1, 2}) {
      ThreadsScope scope(threads);
      cols.push_back(im2col(x, g.k, g.s, g.p, g.d).to_vector());
      by_channel.push_back(im2col(x, g.k, g.s, g.p, g.d, std::nullopt, ColumnLayout::channel_major).to_vector());
      imgs.push_back(col2im(c, g.x, g.k, g.s, g.p, g.d).to_vector());
    }
    CHECK(cols[0] == cols[1]);
    CHECK(by_channel[0] == by_channel[1]);
    CHECK(by_channel[0] == cols[0]);
    CHECK(imgs[0] == imgs[1]);
  }
}

TEST_CASE("col2im reads a thread's planes in groups, each summed as alone", "[im2col][threads]") {
  // 7 planes of 47 x 47 with a 3 x 3 kernel: 9 * 2,209 taps a plane, so col2im reads three planes
  // of an image at a time (groups of 3, 3 and 1), also from a transposed
  // view of the columns; every pixel the documented sum, with 1 and 2 threads.
  const Geo g{{2, 7, 47, 47}, 3, 1, 1, 1, std::nullopt, "plane groups"};
  for (bool transposed : {false, true}) {
    INFO((transposed ? "transposed columns" : "columns"));
    const Tensor c =
        transposed ? rand_input({g.K(), g.P()}, DType::f32, 71).t() : rand_input({g.P(), g.K()}, DType::f32, 71);
    const std::vector<double> want = naive_col2im<float>(c, g);
    for (const std::string& path : cpu::conversion_paths())  // AVX-512's: rows transposed 8 x 8
      for (int threads : {1, 2}) {
        INFO("conversion path " << path << ", " << threads << " threads");
        const test::ConversionPathScope conversion(path);
        ThreadsScope scope(threads);
        CHECK(col2im(c, g.x, g.k, g.s, g.p, g.d).to_vector() == want);
      }
  }
}

TEST_CASE("im2col and col2im reject bad arguments with clear messages", "[im2col]") {
  const Tensor x = zeros({1, 3, 5, 5});
  REQUIRE_THROWS_WITH(im2col(zeros({3, 5, 5}), 3), Contains("im2col") && Contains("4 dims") && Contains("[3, 5, 5]"));
  REQUIRE_THROWS_WITH(im2col(from_vector(std::vector<int64_t>(75, 1), {1, 3, 5, 5}), 3),
                      Contains("im2col") && Contains("floating") && Contains("i64"));
  REQUIRE_THROWS_WITH(im2col(x, {3, 0}), Contains("im2col") && Contains("kernel") && Contains("[3, 0]"));
  REQUIRE_THROWS_WITH(im2col(x, 3, 0), Contains("im2col") && Contains("stride") && Contains("[0, 0]"));
  REQUIRE_THROWS_WITH(im2col(x, 3, 1, 0, {1, -1}), Contains("im2col") && Contains("dilation"));
  REQUIRE_THROWS_WITH(im2col(x, 3, 1, 1, 1, Size2{-1, 0}), Contains("im2col") && Contains("padding"));
  REQUIRE_THROWS_WITH(im2col(x, 7),
                      Contains("im2col") && Contains("larger than the padded input") && Contains("[1, 3, 5, 5]"));
  CHECK_NOTHROW(im2col(x, 7, 1, 1));  // fits with the padding

  const Tensor cols = zeros({9, 27});  // x [1, 3, 5, 5], 3 x 3, stride 1, no padding
  CHECK(col2im(cols, {1, 3, 5, 5}, 3).shape() == Shape({1, 3, 5, 5}));
  REQUIRE_THROWS_WITH(col2im(zeros({1, 9, 27}), {1, 3, 5, 5}, 3), Contains("col2im") && Contains("2 dims"));
  REQUIRE_THROWS_WITH(col2im(cols, {3, 5, 5}, 3),
                      Contains("col2im") && Contains("[N, C, H, W]") && Contains("[3, 5, 5]"));
  REQUIRE_THROWS_WITH(col2im(cols, {1, 3, 6, 5}, 3), Contains("col2im") && Contains("[9, 27]") &&
                                                         Contains("[1, 3, 6, 5]") && Contains("expected [12, 27]"));
  REQUIRE_THROWS_WITH(col2im(cols, {1, 2, 5, 5}, 3), Contains("col2im") && Contains("expected [9, 18]"));
  REQUIRE_THROWS_WITH(col2im(cols.to(DType::bf16), {1, 3, 5, 5}, 3, 1, 0, 1, std::nullopt, DType::f32),
                      Contains("col2im") && Contains("out_dtype f32"));
  REQUIRE_THROWS_WITH(col2im(cols, {1, 3, 5, 5}, 3, 2),
                      Contains("col2im") && Contains("expected [4, 27]") && Contains("stride [2, 2]"));
  REQUIRE_THROWS_WITH(col2im(from_vector(std::vector<int64_t>(243, 1), {9, 27}), {1, 3, 5, 5}, 3),
                      Contains("col2im") && Contains("floating") && Contains("i64"));
  REQUIRE_THROWS_WITH(col2im(cols, {1, 3, 5, 5}, 0), Contains("col2im") && Contains("kernel"));
  REQUIRE_THROWS_WITH(col2im(cols, {1, 3, 2, 2}, 3), Contains("col2im") && Contains("larger than the padded input"));
}

TEST_CASE("col2im_product gives the bits of col2im of the scaled product", "[im2col][fp8]") {
  // Note [Scaled columns]: on the CPU, two per-tensor operands' product is left as its sums and
  // col2im applies the epilogue's factor as it reads them; every other case is the composition.
  // Both must be col2im(scaled_matmul_nt(a, b, {}, f32)[.t()]) bit for bit, zeros' signs included.
  Generator gen(21);
  const Shape xs{3, 5, 9, 8};  // N, C, H, W; 3 x 3 kernel, padding 1
  const int64_t C = xs[1], KK = 9, OC = 6;
  for (int64_t stride : {1, 2}) {
    const int64_t oh = conv_out_size(xs[2], 3, stride, 1, 1), ow = conv_out_size(xs[3], 3, stride, 1, 1);
    const int64_t P = xs[0] * oh * ow;
    // Row 0 all -0 and row 2 all 1e-30 (flushed by the scale): sums of zeros.
    std::vector<double> v = normal({P, OC}, 0.0, 1.0, gen).to_vector();
    for (int64_t j = 0; j < OC; ++j) v[size_t(j)] = -0.0, v[size_t(2 * OC + j)] = 1e-30;
    const Tensor dy = from_vector(v, {P, OC}, DType::bf16);
    const Tensor w = normal({OC, C * KK}, 0.0, 0.1, gen, DType::bf16);
    for (const QuantSpec& spec : {QuantSpec{.format = DType::e5m2}, QuantSpec{.format = DType::e4m3, .margin = 2},
                                  QuantSpec{.format = DType::e4m3, .layout = {1, 32}, .rule = ScaleRule::pow2_up}}) {
      INFO("stride " << stride << ", blocks " << spec.layout.block_rows << " x " << spec.layout.block_cols);
      const Quantized wq = quantize(w.t(), spec);  // [C*KK, OC]
      const Quantized dq = quantize(dy, spec);     // [P, OC]
      for (DType out : {DType::bf16, DType::f32}) {
        // transposed: the product [C*KK, P], read as its transpose (channel-major columns)
        const Tensor want_t =
            col2im(scaled_matmul_nt(wq, dq, Tensor(), DType::f32).t(), xs, 3, stride, 1, 1, std::nullopt, out);
        const Tensor got_t = col2im_product(wq, dq, true, xs, 3, stride, 1, 1, std::nullopt, out);
        CHECK(test::same_bytes(got_t, want_t));
        const Tensor want =
            col2im(scaled_matmul_nt(dq, wq, Tensor(), DType::f32), xs, 3, stride, 1, 1, std::nullopt, out);
        CHECK(test::same_bytes(col2im_product(dq, wq, false, xs, 3, stride, 1, 1, std::nullopt, out), want));
      }
    }
  }
}
