// 2-D pooling and resampling layers over x [N, C, H, W] (semantics in tensor/ops/pool.h):
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and Upsample. The stride defaults to the kernel size, as
// in torch.
#pragma once

#include <optional>

#include "nn/module.h"
#include "tensor/ops/pool.h"

namespace mixtape::nn {

// Arguments in torch's order: nn::MaxPool2d(3, 2, 1, /*dilation=*/1, /*ceil_mode=*/true).
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                     Size2 dilation = 1, bool ceil_mode = false);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

// Padded positions count in the average unless count_include_pad is false. Arguments in torch's
// order: nn::AvgPool2d(3, 2, 1, /*ceil_mode=*/true, /*count_include_pad=*/false).
class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

// [N, C, H, W] -> [N, C, OH, OW] = output_size, whatever H and W (PyTorch's adaptive windows).
// A dim left open keeps the input's size, as PyTorch's AdaptiveAvgPool2d((None, 7)):
//   nn::AdaptiveAvgPool2d({std::nullopt, 7})
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(OptionalSize2 output_size);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  OptionalSize2 output_size_;
};

// torch.nn.Upsample: [N, C, H, W] -> [N, C, OH, OW], nearest or bilinear, to a size or by a scale
// factor (the options of upsample in tensor/ops/pool.h, checked here already):
//   nn::Upsample({.scale_factor = 2})
//   nn::Upsample({.size = Size2{14, 14}, .mode = UpsampleMode::bilinear, .align_corners = true})
// str() is PyTorch's repr, plus align_corners and recompute_scale_factor when set (PyTorch shows
// neither, though both change the result).
class Upsample : public UnaryModule {
 public:
  explicit Upsample(const UpsampleOptions& options);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  UpsampleOptions options_;
};

}  // namespace mixtape::nn
