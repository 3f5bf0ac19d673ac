// The CUDA convolutions (cuda/conv.cu: im2col / col2im around the GEMM) against the CPU kernels
// (tensor/cpu/conv.cpp): forward with bias, input, weight and bias gradients, for stride, padding
// and dilation variants, ragged sizes, a pointwise (1x1) conv, a weight gradient spread over
// several workspace chunks, conv_transpose2d through its public ops, and the examples' shapes with
// the GEMM's load path. f32 / f16 / bf16.
// Tolerances: Note [GEMM tolerance] in gemm_check.h, with K the number of products per output.
#include <cstring>
#include <vector>

#include "cuda/gemm.h"
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
    {2, 3, 7, 9, 5, 3, 3, 1, 1, 1},              // same-size 3x3
    {3, 2, 17, 13, 7, 3, 2, {2, 1}, {1, 0}, 1},  // rectangular kernel, mixed stride/padding
    {1, 4, 33, 31, 3, 3, 3, 2, 2, 2},            // dilation 2
    {2, 5, 8, 8, 6, 1, 1, 1, 0, 1},              // pointwise: no im2col
    {2, 3, 9, 11, 4, 5, 5, 3, 0, 1},             // stride 3 leaves pixels no tap reaches
    {1, 33, 5, 5, 17, 2, 2, 1, 1, 2},            // more channels than pixels
    {4, 1, 28, 28, 32, 3, 3, 1, 1, 1},           // the example CNN's first layer
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
      const Tensor dy = random(conv2d(x, w, b, c.stride, c.padding, c.dilation).shape(), dt, seed++);
      // x or dy also in a non-contiguous layout (every other element of a transposed buffer)
      const Tensor xs = strided_copy(x), dys = strided_copy(dy);
      const int64_t taps = c.KH * c.KW, pixels = c.N * dy.size(2) * dy.size(3);
      const auto forward = [&](const std::vector<Tensor>& t) {
        return conv2d(t[0], t[1], t[2], c.stride, c.padding, c.dilation);
      };
      const auto input_grad = [&](const std::vector<Tensor>& t) {
        return conv2d_backward_input(t[0], t[1], x.shape(), c.stride, c.padding, c.dilation);
      };
      const auto weight_grad = [&](const std::vector<Tensor>& t) {
        return conv2d_backward_weight(t[0], t[1], w.shape(), c.stride, c.padding, c.dilation);
      };
      // forward: C*KH*KW products per output; with a strided input and no bias
      require_gpu_fp32_accumulated(forward, {x, w, b}, c.C * taps, "conv2d forward " + name);
      require_gpu_fp32_accumulated(forward, {xs, w, Tensor()}, c.C * taps, "conv2d forward, strided input " + name);
      // input gradient: up to OC*KH*KW products per pixel (GEMM over OC, then col2im over the taps)
      require_gpu_fp32_accumulated(input_grad, {dy, w}, c.OC * taps, "conv2d backward input " + name);
      require_gpu_fp32_accumulated(input_grad, {dys, w}, c.OC * taps, "conv2d backward input, strided dy " + name);
      // weight gradient: N*OH*OW products per weight
      require_gpu_fp32_accumulated(weight_grad, {x, dy}, pixels, "conv2d backward weight " + name);
      require_gpu_fp32_accumulated(weight_grad, {x, dys}, pixels, "conv2d backward weight, strided dy " + name);
      // bias gradient: a sum over N*OH*OW in double on both devices; the 2 + K term still bounds it
      require_gpu_fp32_accumulated([](const std::vector<Tensor>& t) { return conv2d_backward_bias(t[0]); }, {dy},
                                   pixels, "conv2d backward bias " + name);
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
    require_gpu_fp32_accumulated(
        [&](const std::vector<Tensor>& t) { return conv2d_backward_weight(t[0], t[1], ws, 1, 1, 1); }, {x, dy},
        9 * 64 * 64, detail::cat("conv2d backward weight, two chunks, ", dtype_name(dt)));
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
      {2, 4, 7, 7, 3, 4, 4, 2, 1, 0, 1},  // the DCGAN upsampling block
      {3, 5, 5, 6, 2, 3, 3, 2, 1, 1, 1},  // output_padding 1
      {1, 3, 4, 9, 6, 3, 2, {3, 1}, {1, 0}, {2, 0}, {1, 2}},
  };
  for (DType dt : kDtypes)
    for (const TCase& c : cases) {
      INFO(dtype_name(dt) << " x[" << c.N << "," << c.IC << "," << c.H << "," << c.W << "] w[" << c.IC << "," << c.OC
                          << "," << c.KH << "," << c.KW << "]");
      const Tensor x = random({c.N, c.IC, c.H, c.W}, dt, seed++), w = random({c.IC, c.OC, c.KH, c.KW}, dt, seed++);
      const Tensor b = random({c.OC}, dt, seed++);
      const Tensor dy =
          random(conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.dilation).shape(), dt, seed++);
      const int64_t taps = c.KH * c.KW;
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) {
        return conv_transpose2d(t[0], t[1], t[2], c.stride, c.padding, c.output_padding, c.dilation);
          },
          {x, w, b}, c.IC * taps, "conv_transpose2d forward");
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) {
        return conv_transpose2d_backward_input(t[0], t[1], x.shape(), c.stride, c.padding, c.dilation);
          },
          {dy, w}, c.OC * taps, "conv_transpose2d backward input");
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) {
        return conv_transpose2d_backward_weight(t[0], t[1], w.shape(), c.stride, c.padding, c.dilation);
          },
          {x, dy}, c.N * c.H * c.W, "conv_transpose2d backward weight");
    }
}

TEST_CASE("cuda conv2d on the examples' shapes matches the CPU and loads its GEMM operands as vectors", "[cuda]") {
  MT_REQUIRE_GPU();
  // The cnn's second conv (Conv2d(32, 64, 3, pad 1) on 14 x 14: L = 196 outputs per channel, not a
  // multiple of 8) and a DCGAN discriminator block (Conv2d(32, 64, 4, stride 2, pad 1) on 16 x 16),
  // two images each. In 16 bits every full 16-byte chunk of every GEMM operand must load as a
  // vector (Note [Padded column rows] in cuda/conv.cu): only the ragged edges go element by element.
  // dy itself is the tensor as given: its 196-element rows are 8-byte aligned, so 8-byte loads.
  struct Shape4 {
    const char* name;
    ConvCase c;
  };
  const Shape4 shapes[] = {{"cnn conv2", {2, 32, 14, 14, 64, 3, 3, 1, 1, 1}},
                           {"dcgan discriminator block", {2, 32, 16, 16, 64, 4, 4, 2, 1, 1}}};
  uint64_t seed = 4000;
  for (const Shape4& s : shapes)
    for (DType dt : kDtypes) {
      const ConvCase& c = s.c;
      const std::string name = std::string(s.name) + " " + case_name(c, dt);
      const Tensor x = random({c.N, c.C, c.H, c.W}, dt, seed++), w = random({c.OC, c.C, c.KH, c.KW}, dt, seed++);
      const Tensor b = random({c.OC}, dt, seed++);
      const Tensor dy = random(conv2d(x, w, b, c.stride, c.padding, c.dilation).shape(), dt, seed++);
      const int64_t taps = c.KH * c.KW, pixels = c.N * dy.size(2) * dy.size(3);
      const cuda::GemmLoadCounts before = cuda::gemm_load_counts();
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], c.stride, c.padding, c.dilation); },
          {x, w, b}, c.C * taps, "conv2d forward " + name);
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) {
        return conv2d_backward_input(t[0], t[1], x.shape(), c.stride, c.padding, c.dilation);
          },
          {dy, w}, c.OC * taps, "conv2d backward input " + name);
      require_gpu_fp32_accumulated(
          [&](const std::vector<Tensor>& t) {
        return conv2d_backward_weight(t[0], t[1], w.shape(), c.stride, c.padding, c.dilation);
          },
          {x, dy}, pixels, "conv2d backward weight " + name);
      const cuda::GemmLoadCounts after = cuda::gemm_load_counts();
      INFO(name << ": GEMM operands loaded with 16-byte vectors " << after.vec16 - before.vec16 << ", 8-byte "
                << after.vec8 - before.vec8 << ", 4-byte " << after.vec4 - before.vec4 << ", element by element "
                << after.elementwise - before.elementwise);
      CHECK(after.vec16 > before.vec16);
      CHECK(after.elementwise == before.elementwise);
    }
}

TEST_CASE("cuda grouped, depthwise and padding-same conv2d match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  struct GCase {
    int64_t N, C, H, W, OC, KH, KW;
    Size2 stride, padding, dilation;
    int64_t groups;
    bool same;  // padding "same" (stride 1, `padding` unused)
  };
  const std::vector<GCase> cases = {
      {2, 4, 7, 9, 6, 3, 3, 1, 1, 1, 2, false},        // two groups
      {3, 6, 9, 8, 12, 3, 3, 2, 1, {1, 2}, 6, false},  // depthwise, two outputs per channel
      {2, 8, 6, 6, 8, 1, 1, 1, 0, 1, 4, false},        // pointwise groups: no im2col
      {2, 3, 7, 6, 3, 4, 3, 1, 0, 1, 1, true},         // even kernel: extra row at the bottom
      {1, 4, 9, 10, 4, 2, 2, 1, 0, {1, 3}, 4, true},   // depthwise, dilated, uneven both ways
      {4, 1, 28, 28, 8, 3, 3, 1, 0, 1, 1, true},       // the example CNN's first layer, "same"
  };
  uint64_t seed = 5000;
  for (DType dt : kDtypes)
    for (const GCase& c : cases) {
      const std::string name =
          detail::cat(dtype_name(dt), " x[", c.N, ",", c.C, ",", c.H, ",", c.W, "] w[", c.OC, ",", c.C / c.groups, ",",
                      c.KH, ",", c.KW, "] groups ", c.groups, c.same ? " padding same" : "");
      const Tensor x = random({c.N, c.C, c.H, c.W}, dt, seed++);
      const Tensor w = random({c.OC, c.C / c.groups, c.KH, c.KW}, dt, seed++), b = random({c.OC}, dt, seed++);
      const SamePadding sp = same_padding({c.KH, c.KW}, c.dilation);
      const Size2 pb = c.same ? sp.begin : c.padding, pe = c.same ? sp.end : c.padding,
                  st = c.same ? Size2(1) : c.stride;
      const auto forward = [&](const std::vector<Tensor>& t) {
        return c.same ? conv2d(t[0], t[1], t[2], 1, "same", c.dilation, c.groups)
                      : conv2d(t[0], t[1], t[2], c.stride, c.padding, c.dilation, c.groups);
      };
      const Tensor dy = random(forward({x, w, b}).shape(), dt, seed++);
      const Tensor xs = strided_copy(x), dys = strided_copy(dy);
      const int64_t taps = c.KH * c.KW, pixels = c.N * dy.size(2) * dy.size(3);
      const auto input_grad = [&](const std::vector<Tensor>& t) {
        return conv2d_backward_input(t[0], t[1], x.shape(), st, pb, c.dilation, c.groups, pe);
      };
      const auto weight_grad = [&](const std::vector<Tensor>& t) {
        return conv2d_backward_weight(t[0], t[1], w.shape(), st, pb, c.dilation, c.groups, pe);
      };
      require_gpu_fp32_accumulated(forward, {x, w, b}, c.C / c.groups * taps, "conv2d forward " + name);
      require_gpu_fp32_accumulated(forward, {xs, w, Tensor()}, c.C / c.groups * taps,
                                   "conv2d forward, strided input " + name);
      require_gpu_fp32_accumulated(input_grad, {dy, w}, c.OC / c.groups * taps, "conv2d backward input " + name);
      require_gpu_fp32_accumulated(input_grad, {dys, w}, c.OC / c.groups * taps,
                                   "conv2d backward input, strided dy " + name);
      require_gpu_fp32_accumulated(weight_grad, {x, dy}, pixels, "conv2d backward weight " + name);
      require_gpu_fp32_accumulated(weight_grad, {xs, dys}, pixels, "conv2d backward weight, strided " + name);
    }
}

TEST_CASE("cuda im2col and col2im equal the CPU's bit for bit, 8-bit codes included", "[cuda][fp8]") {
  MT_REQUIRE_GPU();
  // im2col copies (so every dtype, and 8-bit codes, must give the CPU's bits); col2im sums each
  // pixel's taps in (kh, kw) order from 0 in fp32 and rounds once, as the CPU does. The cases
  // include padding "same" with an even kernel (padding after the image differs) and a stride
  // that leaves pixels no tap reaches (col2im gives them 0).
  uint64_t seed = 70;
  for (const ConvCase& c : kCases) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::e4m3}) {
      INFO(case_name(c, dt));
      const Tensor x =
          dt == DType::e4m3
              ? quantize(random({c.N * c.C * c.H, c.W}, DType::f32, seed++), {}).codes.view({c.N, c.C, c.H, c.W})
              : random({c.N, c.C, c.H, c.W}, dt, seed++);
      const Size2 k{c.KH, c.KW};
      const Tensor cols = im2col(x, k, c.stride, c.padding, c.dilation);
      const Tensor gcols = im2col(on_gpu(x), k, c.stride, c.padding, c.dilation);
      REQUIRE(gcols.device() == gpu());
      const Tensor host = on_cpu(gcols);
      CHECK(std::memcmp(host.raw_data(), cols.raw_data(), size_t(cols.numel()) * dtype_size(dt)) == 0);
      if (dt == DType::e4m3) continue;
      const Tensor d = random(cols.shape(), dt, seed++);
      const Tensor back = col2im(d, x.shape(), k, c.stride, c.padding, c.dilation);
      const Tensor gback = on_cpu(col2im(on_gpu(d), x.shape(), k, c.stride, c.padding, c.dilation));
      CHECK(std::memcmp(gback.raw_data(), back.raw_data(), size_t(back.numel()) * dtype_size(dt)) == 0);
      // columns read through a transposed view
      const Tensor dt_view = on_gpu(d.t().contiguous()).t();
      CHECK(on_cpu(col2im(dt_view, x.shape(), k, c.stride, c.padding, c.dilation)).to_vector() == back.to_vector());
    }
  }
  // padding "same" with a 4 x 4 kernel: one row and column more after the image than before
  const Tensor x = random({2, 3, 6, 7}, DType::bf16, seed++);
  const SamePadding same = same_padding({4, 4});
  const Tensor cols = im2col(x, {4, 4}, 1, same.begin, 1, same.end);
  CHECK(on_cpu(im2col(on_gpu(x), {4, 4}, 1, same.begin, 1, same.end)).to_vector() == cols.to_vector());
  CHECK(on_cpu(col2im(on_gpu(cols), x.shape(), {4, 4}, 1, same.begin, 1, same.end)).to_vector() ==
        col2im(cols, x.shape(), {4, 4}, 1, same.begin, 1, same.end).to_vector());
}
