// Sum and mean over leading or trailing dims of contiguous tensors take the loops of
// Note [Reduce fast paths]; a non-contiguous view of the same values takes the general loop.
#include <catch2/catch.hpp>

#include "mixtape.h"

using namespace mixtape;

namespace {

// The same values as x in a non-contiguous layout: x [A, B] stored transposed.
Tensor strided_copy(const Tensor& x) {
  const Tensor t = x.transpose(0, 1).contiguous().transpose(0, 1);
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

}  // namespace

TEST_CASE("sum and mean over leading and trailing dims match hand-computed values", "[reduce]") {
  // x[i, j] = 10 i + j, i < 3, j < 4
  std::vector<double> v;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) v.push_back(10.0 * i + j);
  const Tensor x = from_vector(v, {3, 4});
  CHECK(sum(x, {0}).to_vector() == std::vector<double>{30, 33, 36, 39});
  CHECK(sum(x, {1}).to_vector() == std::vector<double>{6, 46, 86});
  CHECK(mean(x, {0}).to_vector() == std::vector<double>{10, 11, 12, 13});
  CHECK(mean(x, {1}).to_vector() == std::vector<double>{1.5, 11.5, 21.5});
  CHECK(sum(x).item() == 138.0);
  // [2, 3, 2] over the leading pair and the trailing pair of dims
  const Tensor y = arange(0, 12).reshape({2, 3, 2});
  CHECK(sum(y, {0, 1}).to_vector() == std::vector<double>{30, 36});
  CHECK(sum(y, {1, 2}, true).to_vector() == std::vector<double>{15, 51});
  CHECK(sum(y, {1, 2}, true).shape() == Shape({2, 1, 1}));
}

TEST_CASE("the contiguous reduce loops are bit-identical to the strided loop in every float dtype", "[reduce]") {
  Generator gen(7);
  // Values of mixed magnitude, so that a different summation order would change low bits.
  const Tensor base = normal({37, 29}, 0.0, 1.0, gen) * exp(normal({37, 29}, 0.0, 3.0, gen));
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = base.to(dt);
    const Tensor xs = strided_copy(x);
    for (int64_t d : {0, 1}) {
      const Tensor a = sum(x, {d}), b = sum(xs, {d});
      const Tensor am = mean(x, {d}), bm = mean(xs, {d});
      REQUIRE(a.dtype() == dt);
      CHECK(a.to_vector() == b.to_vector());
      CHECK(am.to_vector() == bm.to_vector());
    }
    CHECK(sum(x).item() == sum(xs).item());
  }
}
