#include "nn/linear.h"

#include <cmath>

#include "autograd/functions/linalg.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
#include "nn/init.h"

namespace mixtape::nn {

Linear::Linear(const LinearOptions& options, Generator& gen) : UnaryModule("Linear"), options_(options) {
  MT_CHECK(options.in_features > 0 && options.out_features > 0,
           "Linear: in_features and out_features must be "
           "positive, got ",
           options.in_features, " and ", options.out_features);
  weight = register_parameter("weight", empty({options.out_features, options.in_features}));
  if (options.bias) bias = register_parameter("bias", empty({options.out_features}));
  reset_parameters(gen);
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen)
    : Linear(LinearOptions{in_features, out_features, bias}, gen) {}

void Linear::reset_parameters(Generator& gen) {
  // kaiming_uniform with a = sqrt(5): gain sqrt(1/3), bound gain * sqrt(3 / in) = 1 / sqrt(in).
  init::kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(options_.in_features));
    init::uniform_(bias, gen, -bound, bound);
  }
}

Variable Linear::forward(const Variable& x) {
  MT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == options_.in_features, str(), ": expected input [..., ",
           options_.in_features, "], got ", x.defined() ? x.data().meta() : "an undefined Variable");
  const DType dt = x.dtype();
  return linear(x, cast(weight, dt), bias.defined() ? cast(bias, dt) : Variable());
}

std::string Linear::extra_repr() const {
  return detail::cat(options_.in_features, ", ", options_.out_features, options_.bias ? "" : ", bias=false");
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim)
    : UnaryModule("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Variable Flatten::forward(const Variable& x) { return flatten(x, start_dim_, end_dim_); }

std::string Flatten::extra_repr() const { return detail::cat("start_dim=", start_dim_, ", end_dim=", end_dim_); }

}  // namespace mixtape::nn
