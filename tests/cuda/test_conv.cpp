// The CUDA convolutions (cuda/conv.cu: im2col / col2im around the GEMM) against the CPU kernels
// (tensor/cpu/conv.cpp): forward with bias, input, weight and bias gradients, for stride, padding
// and dilation variants, ragged sizes, a pointwise (1x1) conv, a weight gradient spread over
// several workspace chunks, and conv_transpose2d through its public ops. f32 / f16 / bf16.
// Tolerances: Note [GEMM tolerance] in gemm_check.h, with K the number of products per output.
#include <vector>

#include "mixtape.h"
#include "tests/cuda/cuda_test.h"
#include "tests/cuda/gemm_check.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

struct ConvCase {
  int64_t N, C, H, W, OC, KH, KW;
  Size2 stride, padding, dilation;
};

const std::vector<ConvCase> kCases = {
    {2, 3, 7, 9, 5, 3, 3, 1, 1, 1},                   // same-size 3x3
    {3, 2, 17, 13, 7, 3, 2, {2, 1}, {1, 0}, 1},       // rectangular kernel, mixed stride/padding
    {1, 4, 33, 31, 3, 3, 3, 2, 2, 2},                 // dilation 2
    {2, 5, 8, 8, 6, 1, 1, 1, 0, 1},                   // pointwise: no im2col
    {2, 3, 9, 11, 4, 5, 5, 3, 0, 1},                  // stride 3 leaves pixels no tap reaches
    {1, 33, 5, 5, 17, 2, 2, 1, 1, 2},                 // more channels than pixels
    {4, 1, 28, 28, 32, 3, 3, 1, 1, 1},                // the example CNN's first layer
};

std::string case_name(const ConvCase& c, DType dt) {
  return detail::cat(dtype_name(dt), " x[", c.N, ",", c.C, ",", c.H, ",", c.W, "] w[", c.OC, ",", c.C, ",", c.KH, ",",
                     c.KW, "] stride ", size2_str(c.stride), " padding ", size2_str(c.padding), " dilation ",
                     size2_str(c.dilation));
}

}  // namespace

TEST_CASE("cuda conv2d forward and backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (DType dt : kDtypes)
    for (const ConvCase& c : kCases) {
      const std::string name = case_name(c, dt);
      const Tensor x = random({c.N, c.C, c.H, c.W}, dt, seed++), w = random({c.OC, c.C, c.KH, c.KW}, dt, seed++);
      const Tensor b = random({c.OC}, dt, seed++);
      const Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation);
      const int64_t taps = c.KH * c.KW;
      // forward: C*KH*KW products per output
      require_fp32_accumulated(conv2d(on_gpu(x), on_gpu(w), on_gpu(b), c.stride, c.padding, c.dilation), y,
                               conv2d(abs64(x), abs64(w), abs64(b), c.stride, c.padding, c.dilation), c.C * taps,
                               "conv2d forward " + name);
      // non-contiguous input (strided view of a transposed buffer), no bias
      require_fp32_accumulated(conv2d(strided_copy(on_gpu(x)), on_gpu(w), Tensor(), c.stride, c.padding, c.dilation),
                               conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation),
                               conv2d(abs64(x), abs64(w), Tensor(), c.stride, c.padding, c.dilation), c.C * taps,
                               "conv2d forward, strided input " + name);
      const Tensor dy = random(y.shape(), dt, seed++);
      // input gradient: up to OC*KH*KW products per pixel (GEMM over OC, then col2im over the taps)
      require_fp32_accumulated(
          conv2d_backward_input(on_gpu(dy), on_gpu(w), x.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_input(dy, w, x.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_input(abs64(dy), abs64(w), x.shape(), c.stride, c.padding, c.dilation), c.OC * taps,
          "conv2d backward input " + name);
      // weight gradient: N*OH*OW products per weight
      require_fp32_accumulated(
          conv2d_backward_weight(on_gpu(x), on_gpu(dy), w.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_weight(x, dy, w.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_weight(abs64(x), abs64(dy), w.shape(), c.stride, c.padding, c.dilation),
          c.N * y.size(2) * y.size(3), "conv2d backward weight " + name);
      // strided dy for both gradients
      require_fp32_accumulated(
          conv2d_backward_input(strided_copy(on_gpu(dy)), on_gpu(w), x.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_input(dy, w, x.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_input(abs64(dy), abs64(w), x.shape(), c.stride, c.padding, c.dilation), c.OC * taps,
          "conv2d backward input, strided dy " + name);
      require_fp32_accumulated(
          conv2d_backward_weight(on_gpu(x), strided_copy(on_gpu(dy)), w.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_weight(x, dy, w.shape(), c.stride, c.padding, c.dilation),
          conv2d_backward_weight(abs64(x), abs64(dy), w.shape(), c.stride, c.padding, c.dilation),
          c.N * y.size(2) * y.size(3), "conv2d backward weight, strided dy " + name);
      // bias gradient: a sum over N*OH*OW in double on both devices; the 2 + K term still bounds it
      require_fp32_accumulated(conv2d_backward_bias(on_gpu(dy)), conv2d_backward_bias(dy),
                               conv2d_backward_bias(abs64(dy)), c.N * y.size(2) * y.size(3),
                               "conv2d backward bias " + name);
    }
}

TEST_CASE("cuda conv2d weight gradient over several workspace chunks (fp32 accumulator, split-K)", "[cuda]") {
  MT_REQUIRE_GPU();
  // R = 64*3*3 = 576 rows and L = 64*64 per image: 2^24 / (576 * 4096) = 7 images per chunk, so
  // 9 images take two chunks summed in an fp32 buffer; M = 8 output channels makes one tile row,
  // so each chunk's GEMM (K = up to 7 * 4096) is split along K.
  uint64_t seed = 2000;
  for (DType dt : kDtypes) {
    const Tensor x = random({9, 64, 64, 64}, dt, seed++), dy = random({9, 8, 64, 64}, dt, seed++);
    const Shape ws{8, 64, 3, 3};
    require_fp32_accumulated(conv2d_backward_weight(on_gpu(x), on_gpu(dy), ws, 1, 1, 1),
                             conv2d_backward_weight(x, dy, ws, 1, 1, 1),
                             conv2d_backward_weight(abs64(x), abs64(dy), ws, 1, 1, 1), 9 * 64 * 64,
                             detail::cat("conv2d backward weight, two chunks, ", dtype_name(dt)));
  }
}

TEST_CASE("cuda conv_transpose2d forward and backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 3000;
  struct TCase {
    int64_t N, IC, H, W, OC, KH, KW;
    Size2 stride, padding, output_padding, dilation;
  };
  const std::vector<TCase> cases = {
      {2, 4, 7, 7, 3, 4, 4, 2, 1, 0, 1},     // the DCGAN upsampling block
      {3, 5, 5, 6, 2, 3, 3, 2, 1, 1, 1},     // output_padding 1
      {1, 3, 4, 9, 6, 3, 2, {3, 1}, {1, 0}, {2, 0}, {1, 2}},
  };
  for (DType dt : kDtypes)
    for (const TCase& c : cases) {
      INFO(dtype_name(dt) << " x[" << c.N << "," << c.IC << "," << c.H << "," << c.W << "] w[" << c.IC << "," << c.OC
                          << "," << c.KH << "," << c.KW << "]");
      const Tensor x = random({c.N, c.IC, c.H, c.W}, dt, seed++), w = random({c.IC, c.OC, c.KH, c.KW}, dt, seed++);
      const Tensor b = random({c.OC}, dt, seed++);
      const Tensor y = conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.dilation);
      const int64_t taps = c.KH * c.KW;
      require_fp32_accumulated(
          conv_transpose2d(on_gpu(x), on_gpu(w), on_gpu(b), c.stride, c.padding, c.output_padding, c.dilation), y,
          conv_transpose2d(abs64(x), abs64(w), abs64(b), c.stride, c.padding, c.output_padding, c.dilation),
          c.IC * taps, "conv_transpose2d forward");
      const Tensor dy = random(y.shape(), dt, seed++);
      require_fp32_accumulated(
          conv_transpose2d_backward_input(on_gpu(dy), on_gpu(w), x.shape(), c.stride, c.padding, c.dilation),
          conv_transpose2d_backward_input(dy, w, x.shape(), c.stride, c.padding, c.dilation),
          conv_transpose2d_backward_input(abs64(dy), abs64(w), x.shape(), c.stride, c.padding, c.dilation),
          c.OC * taps, "conv_transpose2d backward input");
      require_fp32_accumulated(
          conv_transpose2d_backward_weight(on_gpu(x), on_gpu(dy), w.shape(), c.stride, c.padding, c.dilation),
          conv_transpose2d_backward_weight(x, dy, w.shape(), c.stride, c.padding, c.dilation),
          conv_transpose2d_backward_weight(abs64(x), abs64(dy), w.shape(), c.stride, c.padding, c.dilation),
          c.N * c.H * c.W, "conv_transpose2d backward weight");
    }
}
