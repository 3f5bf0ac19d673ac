// 2-D convolution layers over x [N, C, H, W] (shapes and arithmetic: tensor/ops/conv.h).
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "tensor/ops/conv.h"

namespace mixtape::nn {

struct Conv2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  Size2 kernel_size = 1;
  Size2 stride = 1;
  // A size, or torch's "same": the output keeps H and W (stride 1 required; an even dilated
  // kernel puts the extra row / column at the bottom / right, as torch), or "valid" (0).
  ConvPadding padding = 0;
  Size2 dilation = 1;
  bool bias = true;
  // in_channels and out_channels divisible by groups; groups = in_channels is depthwise.
  int64_t groups = 1;
};

// [N, in, H, W] -> [N, out, OH, OW], OH = floor((H + 2p - d (k - 1) - 1) / s) + 1 (H with
// padding "same"). W [out, in/groups, KH, KW], b [out]; init as torch (kaiming_uniform a = sqrt(5),
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * KH * KW).
//   nn::Conv2d(1, 32, 3, 1, 1)   or   nn::Conv2d({.in_channels = 1, .out_channels = 32, .kernel_size = 3, .padding = 1}, gen)
//   depthwise 3x3, same size:   nn::Conv2d({.in_channels = 8, .out_channels = 8, .kernel_size = 3, .padding = "same", .groups = 8})
class Conv2d : public UnaryModule {
 public:
  explicit Conv2d(const Conv2dOptions& options, Generator& gen = default_generator());
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, ConvPadding padding = 0,
         Size2 dilation = 1, bool bias = true, Generator& gen = default_generator());

  Variable forward(const Variable& x) override;  // parameters cast to x's dtype
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const Conv2dOptions& options() const { return options_; }

  Variable weight;  // [out, in/groups, KH, KW]
  Variable bias;    // [out] or undefined

 private:
  Conv2dOptions options_;
};

struct ConvTranspose2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  Size2 kernel_size = 1;
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  Size2 dilation = 1;
  bool bias = true;
};

// The adjoint of Conv2d: [N, in, H, W] -> [N, out, OH, OW],
// OH = (H - 1) s - 2p + d (k - 1) + output_padding + 1. W [in, out, KH, KW], b [out]; init as
// torch, whose fan_in for this layout is out * KH * KW.
class ConvTranspose2d : public UnaryModule {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options, Generator& gen = default_generator());
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
                  Size2 output_padding = 0, Size2 dilation = 1, bool bias = true, Generator& gen = default_generator());

  Variable forward(const Variable& x) override;  // parameters cast to x's dtype
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const ConvTranspose2dOptions& options() const { return options_; }

  Variable weight;  // [in, out, KH, KW]
  Variable bias;    // [out] or undefined

 private:
  ConvTranspose2dOptions options_;
};

}  // namespace mixtape::nn
