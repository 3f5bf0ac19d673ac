#include "nn/activation.h"

#include <cmath>

#include "autograd/functions/elementwise.h"

namespace mixtape::nn {

Variable ReLU::forward(const Variable& x) { return relu(x); }

LeakyReLU::LeakyReLU(double negative_slope) : UnaryModule("LeakyReLU"), slope_(negative_slope) {
  MT_CHECK(std::isfinite(negative_slope), "LeakyReLU: negative_slope must be finite, got ", negative_slope);
}

Variable LeakyReLU::forward(const Variable& x) { return leaky_relu(x, slope_); }

std::string LeakyReLU::extra_repr() const { return detail::cat("negative_slope=", slope_); }

Variable Sigmoid::forward(const Variable& x) { return sigmoid(x); }

Variable Tanh::forward(const Variable& x) { return tanh(x); }

}  // namespace mixtape::nn
