// 2-D pooling layers over x [N, C, H, W] (semantics in tensor/ops/pool.h): MaxPool2d, AvgPool2d
// and AdaptiveAvgPool2d. The stride defaults to the kernel size, as in torch.
#pragma once

#include <optional>

#include "nn/module.h"

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
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  Size2 output_size_;
};

}  // namespace mixtape::nn
