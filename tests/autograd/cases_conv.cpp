// Op cases for conv2d (with groups and padding "same"), conv_transpose2d, max_pool2d and avg_pool2d
// (with ceil_mode, dilation and count_include_pad), adaptive_avg_pool2d and upsample (nearest and
// bilinear, up and down, by size and by scale factor) (see support/op_cases.h).
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

MT_OP_CASE(OpCase{"adaptive_avg_pool2d 5x7 -> (3, 4) (overlapping windows), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 2, 5, 7}, dt, 220)};
                  },
                  [](const V& v) {
  return adaptive_avg_pool2d(v[0], {3, 4});
}});

MT_OP_CASE(OpCase{"adaptive_avg_pool2d 5x7 -> (None, 3) (rows kept), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({1, 2, 5, 7}, dt, 247)};
                  },
                  [](const V& v) {
  return adaptive_avg_pool2d(v[0], {std::nullopt, 3});
}});

MT_OP_CASE(OpCase{"adaptive_avg_pool2d 3x4 -> (5, 6) (larger than the input)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 3, 4}, dt, 221)};
                  },
                  [](const V& v) {
  return adaptive_avg_pool2d(v[0], {5, 6});
}});

MT_OP_CASE(OpCase{"conv2d groups 2 with bias, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 4, 5, 6}, dt, 222), rand_input({6, 2, 3, 3}, dt, 223),
                             rand_input({6}, dt, 224)};
                  },
                  [](const V& v) { return conv2d(v[0], v[1], v[2], 1, 1, 1, 2); }});

MT_OP_CASE(OpCase{"conv2d depthwise (groups = in_channels, 2 outputs each), stride 2, dilation (1, 2)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 6, 7}, dt, 225), rand_input({6, 1, 3, 3}, dt, 226),
                             rand_input({6}, dt, 227)};
                  },
                  [](const V& v) {
  return conv2d(v[0], v[1], v[2], 2, 1, {1, 2}, 3);
}});

MT_OP_CASE(OpCase{"conv2d padding same, kernel (4, 3) (extra row at the bottom), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({1, 2, 6, 5}, dt, 228), rand_input({3, 2, 4, 3}, dt, 229),
                             rand_input({3}, dt, 230)};
                  },
                  [](const V& v) { return conv2d(v[0], v[1], v[2], 1, "same"); }});

MT_OP_CASE(OpCase{"conv2d padding same, kernel (2, 2) dilation (1, 3), groups 2, no bias",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 4, 5, 7}, dt, 231), rand_input({2, 2, 2, 2}, dt, 232)};
                  },
                  [](const V& v) {
  return conv2d(v[0], v[1], Variable(), 1, "same", {1, 3}, 2);
}});

MT_OP_CASE(OpCase{"max_pool2d kernel 3 stride 2 padding 1 dilation 2 ceil_mode, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_distinct({2, 2, 6, 7}, dt, 233).transpose(2, 3)};
                  },
                  [](const V& v) { return max_pool2d(v[0], 3, 2, 1, 2, true); }});

MT_OP_CASE(OpCase{"max_pool2d kernel (2, 3) stride 2 padding 1 ceil_mode (clipped last windows)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_distinct({1, 2, 5, 6}, dt, 234)};
                  },
                  [](const V& v) {
  return max_pool2d(v[0], {2, 3}, 2, 1, 1, true);
}});

MT_OP_CASE(OpCase{"avg_pool2d kernel 3 stride 2 padding 1 ceil_mode count_include_pad, non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 2, 6, 7}, dt, 235)};
                  },
                  [](const V& v) { return avg_pool2d(v[0], 3, 2, 1, true, true); }});

MT_OP_CASE(OpCase{"avg_pool2d kernel (3, 2) stride (2, 3) padding 1 ceil_mode, count_include_pad false",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 6, 7}, dt, 236)};
                  },
                  [](const V& v) {
  return avg_pool2d(v[0], {3, 2}, {2, 3}, 1, true, false);
}});

// Upsample: ratios that are not integers (5 -> 7, 7 -> 5, 3 -> 8), up and down, by size and by a
// scale factor (which the index math then uses: 2.5 and 1.5 give other taps than the sizes).
MT_OP_CASE(OpCase{"upsample nearest 5x3 -> (7, 8), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 2, 5, 3}, dt, 240)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.size = Size2{7, 8}});
}});

MT_OP_CASE(OpCase{"upsample nearest 7x6 -> (5, 4) (downscaling)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 7, 6}, dt, 241)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.size = Size2{5, 4}});
}});

MT_OP_CASE(OpCase{"upsample nearest scale_factor (2.5, 1.5)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 3, 4}, dt, 242)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.scale_factor = Scale2{2.5, 1.5}});
}});

MT_OP_CASE(OpCase{"upsample bilinear 5x7 -> (7, 5), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 2, 5, 7}, dt, 243)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.size = Size2{7, 5}, .mode = UpsampleMode::bilinear});
}});

MT_OP_CASE(OpCase{"upsample bilinear scale_factor 1.5, and 0.6 recomputed",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({1, 2, 4, 5}, dt, 244)};
                  },
                  [](const V& v) {
  const Variable up = upsample(v[0], {.scale_factor = 1.5, .mode = UpsampleMode::bilinear});  // [6, 7]
  return upsample(up, {.scale_factor = 0.6, .mode = UpsampleMode::bilinear, .recompute_scale_factor = true});
}});

MT_OP_CASE(OpCase{"upsample bilinear align_corners 3x4 -> (8, 3), non-contiguous input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({1, 2, 3, 4}, dt, 245)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.size = Size2{8, 3}, .mode = UpsampleMode::bilinear, .align_corners = true});
}});

MT_OP_CASE(OpCase{"upsample bilinear align_corners 7x6 -> (5, 1) (one output column)",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 1, 7, 6}, dt, 246)};
                  },
                  [](const V& v) {
  return upsample(v[0], {.size = Size2{5, 1}, .mode = UpsampleMode::bilinear, .align_corners = true});
}});
}  // namespace
