// cuda::dropout against the CPU kernel (tensor/cpu/dropout.cpp): the same mask bit for bit
// (Note [Dropout mask]), on contiguous and strided inputs of ragged sizes, in f32, f16 and bf16.
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <string>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda dropout draws the CPU's mask", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : kTypes)
    for (double p : {0.1, 0.5, 0.9})
      for (uint64_t offset : {uint64_t(0), uint64_t(777), (uint64_t(1) << 32) - 100})
        for (const Shape& shape : std::vector<Shape>{{1}, {33}, {3, 5, 67}, {64, 129}}) {
          const Tensor x = random(shape, dt, 21, 0.5, 1.5);  // never 0, so zeros mark dropped elements
          const uint64_t seed = 42 + offset;
          const Tensor want = dropout_apply(x, p, seed, offset);
          const std::string what = std::string("dropout ") + dtype_name(dt) + " p=" + std::to_string(p) + " " +
                                   shape_str(shape) + " offset " + std::to_string(offset);
          const Tensor got = dropout_apply(on_gpu(x), p, seed, offset);
          require_bit_identical(got, want, what);
          require_bit_identical(dropout_apply(strided_copy(on_gpu(x)), p, seed, offset), want, what + " strided");
          if (x.numel() >= 8000) {  // the mask is a real draw: about p of the elements are dropped
            const std::vector<double> g = on_cpu(got).to_vector();
            double zeros = 0;
            for (double e : g) zeros += e == 0.0;
            CHECK(std::fabs(zeros / double(g.size()) - p) < 0.03);
          }
        }
}
