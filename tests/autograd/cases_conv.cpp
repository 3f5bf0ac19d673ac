// Op cases for conv2d, conv_transpose2d, max_pool2d and avg_pool2d (see support/op_cases.h).
// Tensors stay tiny: the f64 gradient check reruns the forward for every input element.
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"conv2d with bias",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 2, 5, 5}, dt, 201), rand_input({3, 2, 3, 3}, dt, 202),
                             rand_input({3}, dt, 203)};
                  },
                  [](const V& v) { return conv2d(v[0], v[1], v[2]); }});

MT_OP_CASE(OpCase{"conv2d stride 2 padding 1 odd sizes",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 2, 7, 6}, dt, 204), rand_input({2, 2, 3, 3}, dt, 205),
                             rand_input({2}, dt, 206)};
                  },
                  [](const V& v) { return conv2d(v[0], v[1], v[2], 2, 1); }});

MT_OP_CASE(OpCase{"conv2d dilation 2, stride (1, 2), padding (2, 1), non-contiguous input, no bias",
                  [](DType dt) {
  Tensor x = rand_input({1, 7, 6, 3}, dt, 207).permute({0, 3, 1, 2});  // [1, 3, 7, 6]
  return std::vector<Tensor>{x, rand_input({2, 3, 2, 3}, dt, 208)};
                  },
                  [](const V& v) {
  return conv2d(v[0], v[1], Variable(), {1, 2}, {2, 1}, 2);
}});

MT_OP_CASE(OpCase{"conv2d stride 3 kernel 1x2 (columns skipped)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 5, 7}, dt, 209), rand_input({2, 2, 1, 2}, dt, 210)};
                  },
                  [](const V& v) { return conv2d(v[0], v[1], Variable(), 3); }});

MT_OP_CASE(OpCase{"conv_transpose2d stride 2 padding 1 output_padding 1",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 2, 3, 4}, dt, 211), rand_input({2, 3, 3, 3}, dt, 212),
                             rand_input({3}, dt, 213)};
                  },
                  [](const V& v) { return conv_transpose2d(v[0], v[1], v[2], 2, 1, 1); }});

MT_OP_CASE(OpCase{"conv_transpose2d stride (2, 1), dilation 2, output_padding (1, 0), no bias",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 3, 3, 3}, dt, 214), rand_input({3, 2, 2, 3}, dt, 215)};
                  },
                  [](const V& v) {
  return conv_transpose2d(v[0], v[1], Variable(), {2, 1}, 0, {1, 0}, 2);
}});

// Distinct inputs keep each window's maximum unique, also after rounding to 16 bits.
MT_OP_CASE(OpCase{"max_pool2d kernel 3 stride 2 padding 1 (overlapping windows)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_distinct({2, 2, 5, 6}, dt, 216)};
                  },
                  [](const V& v) { return max_pool2d(v[0], 3, 2, 1); }});

MT_OP_CASE(OpCase{"max_pool2d kernel 2 default stride, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_distinct({1, 3, 5, 4}, dt, 217).transpose(2, 3)};
                  },
                  [](const V& v) { return max_pool2d(v[0], 2); }});

MT_OP_CASE(OpCase{"avg_pool2d kernel 3 stride 2 padding 1",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 2, 5, 6}, dt, 218)};
                  },
                  [](const V& v) { return avg_pool2d(v[0], 3, 2, 1); }});

MT_OP_CASE(OpCase{"avg_pool2d kernel (2, 3) stride 1 padding (1, 0)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 4, 5}, dt, 219)};
                  },
                  [](const V& v) {
  return avg_pool2d(v[0], {2, 3}, 1, {1, 0});
}});
}  // namespace
