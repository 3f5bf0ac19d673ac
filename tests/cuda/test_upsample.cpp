// upsample (nearest and bilinear) on the GPU against the CPU kernels (tensor/cpu/pool.cpp). Every
// result is bit-identical (but for the sign of a NaN the arithmetic makes, below): both devices
// take the taps and weights from tensor/core/upsample_formulas.h, and the backward gathers, per
// input, the terms the CPU's scatter adds, in the CPU's order (cuda/pool.cu), so it does not
// depend on the schedule either.
#include "tests/cuda/cuda_test.h"

#include <limits>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

std::string options_name(const UpsampleOptions& o) {
  std::string s = upsample_mode_name(o.mode);
  if (o.size) s += " size " + size2_str(*o.size);
  if (o.scale_factor)
    s += " scale_factor " + std::to_string(o.scale_factor->h) + " x " + std::to_string(o.scale_factor->w);
  if (o.align_corners.value_or(false)) s += " align_corners";
  if (o.recompute_scale_factor) s += " recomputed";
  return s;
}

// Up and down, ratios that are not integers, the special cases out == in and out == 2 in, one
// output row, factors the index math uses (2.5, 1.5, 0.7) and a recomputed one; every mode.
std::vector<UpsampleOptions> upsample_cases() {
  std::vector<UpsampleOptions> cases;
  for (UpsampleMode mode : {UpsampleMode::nearest, UpsampleMode::bilinear})
    for (std::optional<bool> align : {std::optional<bool>(), std::optional<bool>(true)}) {
      if (align && mode == UpsampleMode::nearest) continue;
      cases.push_back({.size = Size2{7, 5}, .mode = mode, .align_corners = align});
      cases.push_back({.size = Size2{1, 17}, .mode = mode, .align_corners = align});
      cases.push_back({.size = Size2{3, 64}, .mode = mode, .align_corners = align});
      cases.push_back({.scale_factor = Scale2{2.5, 1.5}, .mode = mode, .align_corners = align});
      cases.push_back({.scale_factor = Scale2{2, 0.7}, .mode = mode, .align_corners = align});
      cases.push_back(
          {.scale_factor = Scale2{1.1, 0.7}, .mode = mode, .align_corners = align, .recompute_scale_factor = true});
    }
  return cases;
}

const std::vector<Shape>& upsample_shapes() {
  static const std::vector<Shape> shapes = {{1, 1, 5, 7}, {3, 2, 8, 8}, {2, 3, 1, 32}, {1, 2, 13, 6}};
  return shapes;
}

}  // namespace

TEST_CASE("cuda upsample forward and backward are bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 1200;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& s : upsample_shapes())
      for (const UpsampleOptions& o : upsample_cases())
        for (bool strided : {false, true}) {
          ++seed;
          const std::string what =
              std::string(dtype_name(dt)) + " " + shape_str(s) + " " + options_name(o) + " " + layout_name(strided);
          const Tensor x = random(s, dt, seed, -2.0, 2.0);
          const Tensor want = upsample(x, o);
          require_bit_identical(upsample(gpu_input(x, strided), o), want, what + ": out");
          const Tensor dy = random(want.shape(), dt, seed + 1);
          require_bit_identical(upsample_backward(gpu_input(dy, strided), s, o), upsample_backward(dy, s, o),
                                what + ": dx");
        }
}

// An infinity times its zero weight makes a NaN whose sign bit is not fixed: the compiler may
// order the operands of a sum either way (x86 returns the first NaN operand), and a GPU makes its
// canonical NaN. So NaN matches NaN whatever its bits here (require_close with 0 ulps); every
// other value, infinities included, must be exactly the CPU's.
TEST_CASE("cuda upsample keeps NaN and infinities where the CPU does", "[cuda]") {
  MT_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = from_vector(std::vector<double>{1, nan, 3, -inf, 5, 2, inf, 0, -1}, {1, 1, 3, 3}, dt);
    for (const UpsampleOptions& o : upsample_cases()) {
      const std::string what = std::string(dtype_name(dt)) + " " + options_name(o);
      const Tensor want = upsample(x, o);
      require_close(upsample(on_gpu(x), o), want, what + ": out", 0.0);
      const Tensor dy = from_vector(std::vector<double>(size_t(want.numel()), inf), want.shape(), dt);
      require_close(upsample_backward(on_gpu(dy), x.shape(), o), upsample_backward(dy, x.shape(), o), what + ": dx",
                    0.0);
    }
  }
}
