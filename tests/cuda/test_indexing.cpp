// The strided-offset arithmetic of the CUDA kernels (cuda/indexing.h), run on the host against
// Tensor's own strides: no GPU needed.
#include "support/catch.h"

#include "cuda/indexing.h"
#include "tensor/tensor.h"

using namespace mixtape;

namespace {

// Offset of row-major element `linear` of t, the slow way.
int64_t reference_offset(const Tensor& t, int64_t linear) {
  int64_t off = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.shape()[size_t(d)];
    off += (linear % size) * t.strides()[size_t(d)];
    linear /= size;
  }
  return off - t.offset();
}

}  // namespace

TEST_CASE("OffsetCalculator matches tensor strides for views", "[cuda_indexing]") {
  const Tensor base = zeros({4, 6, 10});
  const std::vector<Tensor> views = {base,
                                     base.transpose(0, 2),
                                     base.slice(2, 1, 9, 3),
                                     base.permute({1, 2, 0}).narrow(0, 2, 3),
                                     base.select(1, 4),
                                     base.slice(0, 1, 2).expand({1, 6, 10}),
                                     base.unsqueeze(1).expand({4, 5, 6, 10})};
  for (const Tensor& v : views) {
    const auto calc = cuda::make_offset_calculator<1>(v.shape(), {v.strides()});
    for (int64_t i = 0; i < v.numel(); ++i) {
      int64_t off[1];
      calc.offsets(i, off);
      INFO(v.meta() << " element " << i);
      REQUIRE(off[0] == reference_offset(v, i));
    }
  }
}

TEST_CASE("OffsetCalculator merges contiguous dims and keeps broadcast ones", "[cuda_indexing]") {
  // Both operands contiguous: one dim of stride 1.
  const auto flat = cuda::make_offset_calculator<2>({2, 3, 4}, {Shape{12, 4, 1}, Shape{12, 4, 1}});
  CHECK(flat.ndim == 1);
  CHECK(flat.sizes[0] == 24);
  CHECK(flat.strides[0][0] == 1);
  CHECK(flat.strides[1][0] == 1);
  // A row vector broadcast over rows: two dims, the second operand's outer stride 0.
  const auto bc = cuda::make_offset_calculator<2>({3, 4}, {Shape{4, 1}, Shape{0, 1}});
  REQUIRE(bc.ndim == 2);
  int64_t off[2];
  bc.offsets(9, off);  // row 2, col 1
  CHECK(off[0] == 9);
  CHECK(off[1] == 1);
  // Size-1 dims vanish; a single element has no dims.
  const auto one = cuda::make_offset_calculator<1>({1, 1}, {Shape{1, 1}});
  CHECK(one.ndim == 0);
  int64_t o1[1];
  one.offsets(0, o1);
  CHECK(o1[0] == 0);
}

TEST_CASE("OffsetCalculator rejects more dims than kernels take", "[cuda_indexing]") {
  // Nine dims of size 2 with strides that never merge.
  Shape shape(9, 2), strides(9, 0);
  for (size_t i = 0; i < 9; ++i) strides[i] = int64_t(1) << (2 * (8 - i) + 1);
  REQUIRE_THROWS_WITH(cuda::make_offset_calculator<1>(shape, {strides}),
                      Catch::Contains("at most 8 non-mergeable dims"));
}
