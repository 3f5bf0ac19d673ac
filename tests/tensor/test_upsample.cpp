// upsample (nearest and bilinear) against PyTorch, and its checks. The reference values were printed
// by tests/tensor/upsample_reference.py (torch 1.13, f64) for inputs exact in every dtype, so the
// test needs no torch: the output and the input's gradient for a fixed dy.
#include "support/catch.h"

#include <cmath>
#include <limits>

#include "mixtape.h"
#include "support/torch_reference.h"

using namespace mixtape;
using Catch::Contains;

namespace {

using mixtape::test::equal;
using mixtape::test::ref_grad;
using mixtape::test::ref_input;

// Upsamples the reference input of x_shape (f64) with `options`, backward from the reference dy,
// and compares the output and the input's gradient with PyTorch's want[0] and want[1].
void check_against_torch(const Shape& x_shape, const UpsampleOptions& options, const Shape& out_shape,
                         const std::vector<std::vector<double>>& want) {
  INFO(shape_str(x_shape) << " -> " << shape_str(out_shape) << ", " << upsample_mode_name(options.mode));
  mixtape::test::check_against_torch(
      {x_shape}, [&](const std::vector<Variable>& x) { return upsample(x[0], options); }, out_shape, want);
}

}  // namespace

TEST_CASE("upsample matches PyTorch", "[pool][upsample]") {
  // nearest, 5 -> 7 rows and 3 -> 8 columns: src = min(floor(o in / out), in - 1).
  check_against_torch(
      {1, 2, 5, 3}, {.size = Size2{7, 8}}, {1, 2, 7, 8},
      {{-1.375, -1.375, -1.375, 0.375,  0.375, 0.375,  -0.75,  -0.75,  -1.375, -1.375, -1.375, 0.375,  0.375, 0.375,
        -0.75,  -0.75,  1.0,    1.0,    1.0,   -0.125, -0.125, -0.125, -1.25,  -1.25,  0.5,    0.5,    0.5,   -0.625,
        -0.625, -0.625, 1.125,  1.125,  0.5,   0.5,    0.5,    -0.625, -0.625, -0.625, 1.125,  1.125,  0.0,   0.0,
        0.0,    -1.125, -1.125, -1.125, 0.625, 0.625,  -0.5,   -0.5,   -0.5,   1.25,   1.25,   1.25,   0.125, 0.125,
        -1.0,   -1.0,   -1.0,   0.75,   0.75,  0.75,   -0.375, -0.375, -1.0,   -1.0,   -1.0,   0.75,   0.75,  0.75,
        -0.375, -0.375, 1.375,  1.375,  1.375, 0.25,   0.25,   0.25,   -0.875, -0.875, 0.875,  0.875,  0.875, -0.25,
        -0.25,  -0.25,  -1.375, -1.375, 0.875, 0.875,  0.875,  -0.25,  -0.25,  -0.25,  -1.375, -1.375, 0.375, 0.375,
        0.375,  -0.75,  -0.75,  -0.75,  1.0,   1.0,    -0.125, -0.125, -0.125, -1.25,  -1.25,  -1.25,  0.5,   0.5},
       {-0.75, 1.5, -1.25, -0.25, 0.0, -0.25, 1.5, -1.5, 0.25, 0.0, 0.25, 0.5, -0.5, -0.25, 0.75,
        -0.75, 1.5, -1.25, -0.25, 0.0, -0.25, 1.5, -1.5, 0.25, 0.0, 0.25, 0.5, -0.5, -0.25, 0.75}});
  // nearest, downscaling 7 -> 5 and 6 -> 4: some inputs are skipped (zero gradient).
  check_against_torch(
      {1, 2, 7, 6}, {.size = Size2{5, 4}}, {1, 2, 5, 4},
      {{-1.375, 0.375, 1.0,    -0.125, 0.5,    -0.625, 0.0,    -1.125, -0.5,  1.25,   -1.0,  0.75,  0.375, -0.75,
        -0.125, -1.25, -0.625, 1.125,  -1.125, 0.625,  0.25,   -0.875, -0.25, -1.375, -0.75, 1.0,   -1.25, 0.5,
        1.125,  0.0,   0.625,  -0.5,   -0.875, 0.875,  -1.375, 0.375,  1.0,   -0.125, 0.5,   -0.625},
       {-0.75, 0.25, 0.0,   -0.5,  0.5,  0.0,  -0.25, 0.75, 0.0,   0.0,   -0.75, 0.0,  0.25, -0.5, 0.0, 0.5,   -0.25,
        0.0,   0.0,  0.0,   0.0,   0.0,  0.0,  0.0,   0.75, 0.0,   0.0,   -0.75, 0.25, 0.0,  -0.5, 0.5, 0.0,   -0.25,
        0.75,  0.0,  0.0,   0.0,   0.0,  0.0,  0.0,   0.0,  0.0,   -0.75, 0.0,   0.25, -0.5, 0.0,  0.5, -0.25, 0.0,
        0.75,  0.0,  0.0,   -0.75, 0.25, 0.0,  -0.5,  0.5,  0.0,   0.0,   0.0,   0.0,  0.0,  0.0,  0.0, -0.25, 0.75,
        0.0,   0.0,  -0.75, 0.0,   0.25, -0.5, 0.0,   0.5,  -0.25, 0.0,   0.0,   0.0,  0.0,  0.0,  0.0, 0.0}});
  // nearest by scale_factor (2.5, 1.5): the index math uses 1 / 2.5 and 1 / 1.5, not 3 / 7 and 4 / 6.
  check_against_torch(
      {1, 1, 3, 4}, {.scale_factor = Scale2{2.5, 1.5}}, {1, 1, 7, 6},
      {{-1.375, -1.375, 0.375, -0.75, -0.75,  1.0,    -1.375, -1.375, 0.375, -0.75,  -0.75,  1.0,    -1.375, -1.375,
        0.375,  -0.75,  -0.75, 1.0,   -0.125, -0.125, -1.25,  0.5,    0.5,   -0.625, -0.125, -0.125, -1.25,  0.5,
        0.5,    -0.625, 1.125, 1.125, 0.0,    -1.125, -1.125, 0.625,  1.125, 1.125,  0.0,    -1.125, -1.125, 0.625},
       {-0.5, -1.0, 0.0, 1.0, 0.75, 0.75, -1.25, -0.25, -0.25, 0.25, 1.25, -0.75}});
  // bilinear, align_corners false, 5 -> 7 and 7 -> 5: src = max((o + 0.5) in / out - 0.5, 0).
  check_against_torch({1, 2, 5, 7}, {.size = Size2{7, 5}, .mode = UpsampleMode::bilinear, .align_corners = false},
                      {1, 2, 7, 5},
                      {{-1.0250000000000001,
                        -0.2999999999999998,
                        1.0,
                        -0.5749999999999994,
                        0.1499999999999997,
                        -0.5964285714285715,
                        0.12857142857142873,
                        -0.2142857142857142,
                        -0.14642857142857085,
                        0.5785714285714283,
                        -0.22500000000000003,
                        0.33571428571428574,
                        -0.9107142857142856,
                        0.38928571428571496,
                        0.45714285714285685,
                        -0.09999999999999995,
                        0.04999999999999977,
                        -0.375,
                        0.9250000000000006,
                        -0.6499999999999998,
                        0.43571428571428583,
                        -0.6464285714285715,
                        0.1607142857142858,
                        0.22857142857142795,
                        -0.11428571428571399,
                        -0.014285714285714733,
                        -0.6035714285714282,
                        0.6964285714285716,
                        -0.2214285714285718,
                        0.17500000000000004,
                        -0.9000000000000001,
                        -0.17499999999999982,
                        1.125,
                        -0.4499999999999994,
                        0.2749999999999997,
                        -0.15000000000000008,
                        0.5750000000000002,
                        -1.0,
                        0.3000000000000006,
                        1.0249999999999995,
                        -0.05000000000000001,
                        0.3464285714285714,
                        -0.5714285714285714,
                        -0.2571428571428574,
                        0.1392857142857142,
                        0.23928571428571438,
                        -0.10357142857142876,
                        -0.03571428571428564,
                        -0.4607142857142866,
                        -0.31071428571428544,
                        0.775,
                        -0.7999999999999998,
                        0.5,
                        0.07499999999999907,
                        0.2250000000000002,
                        -0.33214285714285735,
                        -0.264285714285714,
                        1.0357142857142858,
                        -0.2107142857142856,
                        0.34999999999999987,
                        -0.4535714285714285,
                        0.2714285714285718,
                        0.33928571428571375,
                        -0.003571428571427794,
                        -0.2642857142857147,
                        -0.025000000000000105,
                        0.7000000000000002,
                        -0.875,
                        0.4250000000000006,
                        -1.1499999999999997},
                       {-0.3428571428571429,
                        0.014285714285714343,
                        0.14999999999999997,
                        -0.8214285714285714,
                        0.3642857142857146,
                        0.1499999999999996,
                        -0.37142857142857133,
                        0.6285714285714286,
                        0.08571428571428565,
                        -0.10714285714285711,
                        0.1071428571428571,
                        0.08571428571428578,
                        -0.10714285714285735,
                        -0.6571428571428569,
                        0.31428571428571433,
                        -0.23571428571428577,
                        -0.4714285714285713,
                        0.7857142857142858,
                        -0.23571428571428588,
                        -0.021428571428571092,
                        0.5428571428571427,
                        -0.11428571428571424,
                        -0.07142857142857156,
                        -0.06428571428571442,
                        0.1785714285714286,
                        -0.4714285714285718,
                        -0.21428571428571372,
                        0.3999999999999999,
                        -0.48571428571428577,
                        0.20714285714285735,
                        0.4928571428571428,
                        -0.25,
                        0.25714285714285734,
                        0.19285714285714262,
                        0.08571428571428574,
                        -0.3428571428571429,
                        0.014285714285714343,
                        0.14999999999999997,
                        -0.8214285714285714,
                        0.3642857142857146,
                        0.1499999999999996,
                        -0.37142857142857133,
                        0.6285714285714286,
                        0.08571428571428565,
                        -0.10714285714285711,
                        0.1071428571428571,
                        0.08571428571428578,
                        -0.10714285714285735,
                        -0.6571428571428569,
                        0.31428571428571433,
                        -0.23571428571428577,
                        -0.4714285714285713,
                        0.7857142857142858,
                        -0.23571428571428588,
                        -0.021428571428571092,
                        0.5428571428571427,
                        -0.11428571428571424,
                        -0.07142857142857156,
                        -0.06428571428571442,
                        0.1785714285714286,
                        -0.4714285714285718,
                        -0.21428571428571372,
                        0.3999999999999999,
                        -0.48571428571428577,
                        0.20714285714285735,
                        0.4928571428571428,
                        -0.25,
                        0.25714285714285734,
                        0.19285714285714262,
                        0.08571428571428574}});
  // bilinear by scale_factor 1.5 (4 -> 6, 5 -> 7): the columns use 1 / 1.5, not 5 / 7.
  check_against_torch({1, 1, 4, 5}, {.scale_factor = 1.5, .mode = UpsampleMode::bilinear}, {1, 1, 6, 7},
                      {{-1.375,
                        -0.5,
                        0.18750000000000017,
                        -0.5625,
                        0.125,
                        0.8125000000000002,
                        0.06250000000000033,
                        -1.3125,
                        -0.4375,
                        0.25000000000000017,
                        -0.49999999999999994,
                        0.18749999999999997,
                        0.8750000000000001,
                        0.1250000000000003,
                        -1.2291666666666667,
                        -0.35416666666666674,
                        0.3333333333333335,
                        -0.41666666666666663,
                        0.27083333333333337,
                        0.9583333333333334,
                        0.2083333333333337,
                        -1.1458333333333333,
                        -0.27083333333333337,
                        0.41666666666666685,
                        -0.33333333333333326,
                        0.35416666666666663,
                        1.041666666666667,
                        0.29166666666666696,
                        -1.0625,
                        -0.18750000000000003,
                        0.5000000000000001,
                        -0.2499999999999999,
                        0.4375,
                        1.1250000000000002,
                        0.37500000000000033,
                        -1.0,
                        -0.12500000000000006,
                        0.5625000000000001,
                        -0.18749999999999992,
                        0.5,
                        1.1875,
                        0.43750000000000033},
                       {-0.9375,
                        -0.31250000000000006,
                        0.31250000000000006,
                        0.7500000000000002,
                        0.18749999999999983,
                        -0.9374999999999999,
                        -0.3125000000000001,
                        0.3125000000000001,
                        0.7500000000000001,
                        0.18749999999999983,
                        -0.9374999999999999,
                        -0.3125,
                        0.3125,
                        0.75,
                        0.1874999999999998,
                        -0.9375,
                        -0.3125,
                        0.31250000000000006,
                        0.7500000000000001,
                        0.1874999999999998}});
  // bilinear by scale_factor 0.7 (5 -> 3, 6 -> 4), downscaling with the factor's own index math,
  check_against_torch({1, 1, 5, 6}, {.scale_factor = 0.7, .mode = UpsampleMode::bilinear}, {1, 1, 3, 4},
                      {{-0.7302295918367346, -0.16645408163265304, 0.7053571428571426, -0.59375, 0.01211734693877553,
                        0.517219387755102, -0.5911989795918366, 0.031249999999999972, 1.0624999999999998,
                        -0.4126275510204079, 0.7232142857142854, -0.7812499999999999},
                       {-0.4630102040816326,   -0.056122448979591844, 0.12627551020408162,   -0.36479591836734687,
                        0.16836734693877542,   0.19642857142857142,   -0.19642857142857145,  0.0612244897959184,
                        0.2066326530612245,    -0.09948979591836733,  -0.0880102040816327,   -0.08035714285714288,
                        -0.12627551020408162,  0.13775510204081634,   0.30994897959183665,   0.0,
                        -0.24107142857142855,  -0.24107142857142855,  0.18239795918367344,   -0.11607142857142858,
                        -0.29846938775510196,  0.4311224489795917,    -0.08290816326530602,  -0.11607142857142855,
                        0.014030612244897996,  -0.008928571428571456, -0.022959183673469448, 0.03316326530612253,
                        -0.006377551020408174, -0.008928571428571452}});
  // and the same with recompute_scale_factor (the sizes' in / out).
  check_against_torch(
      {1, 1, 5, 6}, {.scale_factor = 0.7, .mode = UpsampleMode::bilinear, .recompute_scale_factor = true}, {1, 1, 3, 4},
      {{-0.5520833333333334, -0.08333333333333331, 0.3854166666666667, -0.5833333333333334, -0.0625, 0.40625, -0.5625,
        -0.09375, 0.4270833333333331, 0.1770833333333337, -0.07291666666666696, -0.3229166666666663},
       {-0.375,
        -0.08333333333333334,
        0.125,
        -0.25,
        0.0,
        0.25,
        -0.1875,
        -0.041666666666666664,
        0.0625,
        -0.125,
        0.0,
        0.125,
        -0.1875,
        0.125,
        0.5625,
        0.0,
        -0.1875,
        -0.5625,
        0.062499999999999944,
        -0.020833333333333315,
        -0.12499999999999989,
        0.12499999999999989,
        0.020833333333333315,
        -0.062499999999999944,
        0.12500000000000006,
        -0.041666666666666685,
        -0.2500000000000001,
        0.2500000000000001,
        0.041666666666666685,
        -0.12500000000000006}});
  // bilinear, align_corners true, 3 -> 8 and 4 -> 3: src = o (in - 1) / (out - 1).
  check_against_torch(
      {1, 2, 3, 4}, {.size = Size2{8, 3}, .mode = UpsampleMode::bilinear, .align_corners = true}, {1, 2, 8, 3},
      {{-1.375,
        -0.1875,
        1.0,
        -1.0178571428571428,
        -0.24107142857142858,
        0.5357142857142858,
        -0.6607142857142858,
        -0.29464285714285715,
        0.07142857142857151,
        -0.3035714285714286,
        -0.3482142857142857,
        -0.3928571428571428,
        0.05357142857142849,
        -0.4017857142857143,
        -0.4464285714285715,
        0.4107142857142855,
        -0.4553571428571428,
        -0.08928571428571452,
        0.7678571428571428,
        -0.5089285714285714,
        0.2678571428571428,
        1.125,
        -0.5625,
        0.625,
        -0.5,
        0.6875,
        -1.0,
        -0.14285714285714288,
        0.6339285714285714,
        -0.6428571428571429,
        0.21428571428571425,
        0.5803571428571429,
        -0.28571428571428575,
        0.5714285714285714,
        0.5267857142857143,
        0.07142857142857137,
        0.517857142857143,
        0.4732142857142857,
        0.01785714285714296,
        0.05357142857142888,
        0.4196428571428572,
        -0.44642857142857106,
        -0.41071428571428553,
        0.3660714285714286,
        -0.9107142857142856,
        -0.875,
        0.3125,
        -1.375},
       {-0.4642857142857143,  -0.08928571428571427, -0.08928571428571427, 0.10714285714285715, 0.42857142857142866,
        -0.07142857142857145, -0.07142857142857145, -0.2142857142857143,  -0.7142857142857144, 0.2857142857142857,
        0.2857142857142857,   -0.3928571428571429,  0.3928571428571429,   -0.2857142857142857, -0.2857142857142857,
        0.7142857142857142,   0.21428571428571414,  0.07142857142857148,  0.07142857142857148, -0.4285714285714285,
        -0.10714285714285698, 0.08928571428571422,  0.08928571428571422,  0.4642857142857143}});
  // bilinear, align_corners true, one output column: src = 0 there.
  check_against_torch({1, 1, 7, 6}, {.size = Size2{5, 1}, .mode = UpsampleMode::bilinear, .align_corners = true},
                      {1, 1, 5, 1},
                      {{-1.375, 0.0, 1.375, -0.125, 1.25},
                       {-0.75, 0.0, 0.0,  0.0, 0.0,  0.0, 0.125, 0.0, 0.0,   0.0, 0.0,  0.0, 0.125, 0.0,
                        0.0,   0.0, 0.0,  0.0, -0.5, 0.0, 0.0,   0.0, 0.0,   0.0, 0.25, 0.0, 0.0,   0.0,
                        0.0,   0.0, 0.25, 0.0, 0.0,  0.0, 0.0,   0.0, -0.25, 0.0, 0.0,  0.0, 0.0,   0.0}});
}

TEST_CASE("upsample rounds 16 bits once and copies exactly in nearest mode", "[pool][upsample]") {
  // A strided input: [2, 3, 5, 7] stored transposed.
  const Tensor x = ref_input({2, 3, 7, 5}, DType::f32).transpose(2, 3);
  const std::vector<UpsampleOptions> opts = {
      {.size = Size2{7, 5}},
      {.scale_factor = Scale2{1.5, 0.7}},
      {.size = Size2{8, 3}, .mode = UpsampleMode::bilinear},
      {.scale_factor = 2.5, .mode = UpsampleMode::bilinear},
      {.size = Size2{3, 9}, .mode = UpsampleMode::bilinear, .align_corners = true}};
  for (const UpsampleOptions& o : opts) {
    INFO(upsample_mode_name(o.mode) << (o.size ? " size " + size2_str(*o.size) : std::string(" scale_factor")));
    for (DType dt : {DType::f16, DType::bf16}) {
      INFO(dtype_name(dt));
      const Tensor x16 = x.to(dt);
      // The 16-bit output is the fp32 result (on the same inputs) rounded once, and so is dx.
      const Tensor y = upsample(x16, o);
      CHECK(equal(y, upsample(x16.to(DType::f32), o).to(dt)));
      const Tensor dy = ref_grad(y.shape(), dt);
      CHECK(equal(upsample_backward(dy, x.shape(), o), upsample_backward(dy.to(DType::f32), x.shape(), o).to(dt)));
    }
  }
  // Nearest by an integer factor repeats every input exactly, NaN and infinities included.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor e = from_vector(std::vector<double>{1.0, nan, -inf, 0.1}, {1, 1, 2, 2}, DType::f16);
  const Tensor up = upsample(e, {.scale_factor = 2});
  const std::vector<double> got = up.to_vector();
  const std::vector<double> want = e.to_vector();
  REQUIRE(up.shape() == Shape{1, 1, 4, 4});
  for (int64_t i = 0; i < 16; ++i) {
    const double w = want[size_t((i / 8) * 2 + (i % 4) / 2)];
    CHECK((got[size_t(i)] == w || (std::isnan(w) && std::isnan(got[size_t(i)]))));
  }
  // Bilinear multiplies an infinity by its zero weight where an output sits on its neighbour: NaN,
  // as PyTorch's (torch 1.13 gives [nan, nan, nan, nan, nan, 2.25, 2.75, 3] here).
  const Tensor row = from_vector(std::vector<double>{1.0, inf, 2.0, 3.0}, {1, 1, 1, 4});
  const std::vector<double> b = upsample(row, {.size = Size2{1, 8}, .mode = UpsampleMode::bilinear}).to_vector();
  for (int i = 0; i < 5; ++i) CHECK(std::isnan(b[size_t(i)]));
  CHECK(b[5] == 2.25);
  CHECK(b[6] == 2.75);
  CHECK(b[7] == 3.0);
}

TEST_CASE("upsample rejects bad arguments with clear messages", "[pool][upsample]") {
  const Tensor x = zeros({1, 2, 5, 5});
  REQUIRE_THROWS_WITH(upsample(zeros({2, 5, 5}), {.scale_factor = 2}),
                      Contains("upsample") && Contains("[N, C, H, W]") && Contains("[2, 5, 5]"));
  REQUIRE_THROWS_WITH(upsample(zeros({1, 2, 0, 5}), {.scale_factor = 2}),
                      Contains("upsample") && Contains("[1, 2, 0, 5]"));
  REQUIRE_THROWS_WITH(upsample(zeros({1, 1, 4, 4}, DType::i64), {.scale_factor = 2}),
                      Contains("upsample") && Contains("i64"));
  REQUIRE_THROWS_WITH(upsample(x, {}), Contains("upsample") && Contains("neither was given"));
  REQUIRE_THROWS_WITH(upsample(x, {.size = 3, .scale_factor = 2}),
                      Contains("upsample") && Contains("either size or scale_factor, not both"));
  REQUIRE_THROWS_WITH(upsample(x, {.size = Size2{0, 3}}),
                      Contains("upsample") && Contains("size must be positive") && Contains("[0, 3]"));
  REQUIRE_THROWS_WITH(upsample(x, {.scale_factor = Scale2{2, -1}}),
                      Contains("upsample") && Contains("scale_factor must be positive") && Contains("[2, -1]"));
  REQUIRE_THROWS_WITH(upsample(x, {.scale_factor = std::numeric_limits<double>::infinity()}),
                      Contains("upsample") && Contains("scale_factor must be positive and finite"));
  REQUIRE_THROWS_WITH(
      upsample(x, {.scale_factor = 0.1}),
      Contains("upsample") && Contains("scale_factor [0.1, 0.1] gives an empty output") && Contains("[1, 2, 5, 5]"));
  REQUIRE_THROWS_WITH(upsample(x, {.scale_factor = 1e7}), Contains("upsample") && Contains("below 2^23"));
  REQUIRE_THROWS_WITH(
      upsample(x, {.size = 3, .align_corners = false}),
      Contains("upsample") && Contains("align_corners is only for mode bilinear") && Contains("nearest"));
  REQUIRE_THROWS_WITH(upsample(x, {.size = 3, .mode = UpsampleMode::bilinear, .recompute_scale_factor = true}),
                      Contains("upsample") && Contains("recompute_scale_factor needs a scale_factor"));
  REQUIRE_THROWS_WITH(upsample_backward(zeros({1, 2, 9, 10}), x.shape(), {.scale_factor = 2}),
                      Contains("upsample backward") && Contains("[1, 2, 9, 10]") && Contains("[1, 2, 10, 10]"));
  REQUIRE_THROWS_WITH(nn::Upsample({.scale_factor = 2, .align_corners = true}),
                      Contains("Upsample") && Contains("align_corners"));
  REQUIRE_THROWS_WITH(nn::Upsample({}), Contains("Upsample") && Contains("size or scale_factor"));
}

TEST_CASE("nn::Upsample shows PyTorch's repr and runs the op", "[pool][upsample][nn]") {
  nn::Upsample twice({.scale_factor = 2});
  CHECK(twice.str() == "Upsample(scale_factor=2.0, mode=nearest)");
  nn::Upsample sized({.size = Size2{3, 4}, .mode = UpsampleMode::bilinear});
  CHECK(sized.str() == "Upsample(size=(3, 4), mode=bilinear)");
  nn::Upsample aligned({.size = 5, .mode = UpsampleMode::bilinear, .align_corners = true});
  CHECK(aligned.str() == "Upsample(size=5, mode=bilinear, align_corners=true)");
  nn::Upsample rect({.scale_factor = Scale2{1.5, 2}, .mode = UpsampleMode::bilinear, .recompute_scale_factor = true});
  CHECK(rect.str() == "Upsample(scale_factor=(1.5, 2.0), mode=bilinear, recompute_scale_factor=true)");
  const Variable img(ref_input({2, 3, 4, 5}, DType::f32));
  CHECK(twice(img).shape() == Shape{2, 3, 8, 10});
  CHECK(equal(rect(img).data(), upsample(img.data(), {.scale_factor = Scale2{1.5, 2},
                                                      .mode = UpsampleMode::bilinear,
                                                      .recompute_scale_factor = true})));
  CHECK(equal(sized(img).data(), upsample(img.data(), {.size = Size2{3, 4}, .mode = UpsampleMode::bilinear})));
}
