// 2-D pooling layers over x [N, C, H, W] (semantics in tensor/ops/pool.h). The stride
// defaults to the kernel size, as in torch.
#pragma once

#include <optional>

#include "nn/module.h"

namespace mixtape::nn {

class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_;
};

// Padded positions count in the average (count_include_pad).
class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_;
};

}  // namespace mixtape::nn
