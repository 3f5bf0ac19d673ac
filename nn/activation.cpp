#include "nn/activation.h"

#include <cmath>
#include <utility>

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

GELU::GELU(std::string approximate) : UnaryModule("GELU"), approximate_(std::move(approximate)) {
  MT_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"",
           approximate_, "\"");
}

Variable GELU::forward(const Variable& x) { return gelu(x, approximate_); }

std::string GELU::extra_repr() const { return detail::cat("approximate=", approximate_); }

Variable SiLU::forward(const Variable& x) { return silu(x); }

ELU::ELU(double alpha) : UnaryModule("ELU"), alpha_(alpha) {
  MT_CHECK(std::isfinite(alpha), "ELU: alpha must be finite, got ", alpha);
}

Variable ELU::forward(const Variable& x) { return elu(x, alpha_); }

std::string ELU::extra_repr() const { return detail::cat("alpha=", alpha_); }

Softplus::Softplus(double beta, double threshold) : UnaryModule("Softplus"), beta_(beta), threshold_(threshold) {
  MT_CHECK(std::isfinite(beta) && beta != 0.0, "Softplus: beta must be finite and nonzero, got ", beta);
  MT_CHECK(!std::isnan(threshold), "Softplus: threshold must not be NaN");
}

Variable Softplus::forward(const Variable& x) { return softplus(x, beta_, threshold_); }

std::string Softplus::extra_repr() const { return detail::cat("beta=", beta_, ", threshold=", threshold_); }

Hardtanh::Hardtanh(double min_val, double max_val) : UnaryModule("Hardtanh"), min_(min_val), max_(max_val) {
  MT_CHECK(min_val <= max_val, "Hardtanh: min_val ", min_val, " > max_val ", max_val);
}

Variable Hardtanh::forward(const Variable& x) { return hardtanh(x, min_, max_); }

std::string Hardtanh::extra_repr() const { return detail::cat("min_val=", min_, ", max_val=", max_); }

}  // namespace mixtape::nn
