#include "nn/init.h"

#include <cmath>

#include "nn/conv.h"
#include "nn/module.h"
#include "nn/norm.h"

namespace mixtape::nn::init {

namespace {

// Draw on the CPU in the tensor's dtype (f32 draws rounded once; f64 for f64) and copy in.
Tensor fill_from(const Tensor& t, const Tensor& values) {
  Tensor dst = t;
  dst.copy_(values.to(t.device()));
  return t;
}

void check_floating(const Tensor& t, const char* fn) {
  MT_CHECK(t.defined(), "nn::init::", fn, ": the tensor is undefined");
  MT_CHECK(is_floating(t.dtype()), "nn::init::", fn, ": expected a floating tensor, got ", t.meta());
}

// gain / sqrt(fan): the standard deviation of the kaiming initializers.
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity, const char* fn) {
  check_floating(t, fn);
  const Fans f = calculate_fans(t.shape());
  const int64_t fan = mode == FanMode::fan_in ? f.fan_in : f.fan_out;
  MT_CHECK(fan > 0, "nn::init::", fn, ": the fan of ", t.meta(), " is zero");
  return calculate_gain(nonlinearity, a) / std::sqrt(double(fan));
}

double xavier_std(const Tensor& t, double gain, const char* fn) {
  check_floating(t, fn);
  const Fans f = calculate_fans(t.shape());
  MT_CHECK(f.fan_in + f.fan_out > 0, "nn::init::", fn, ": the fans of ", t.meta(), " are zero");
  return gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double negative_slope) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  }
  return 1.0;
}

Fans calculate_fans(const Shape& shape) {
  MT_CHECK(shape.size() >= 2, "nn::init: fans need a tensor with at least 2 dims, got ", shape_str(shape));
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

Tensor uniform_(const Tensor& t, Generator& gen, double lo, double hi) {
  check_floating(t, "uniform_");
  MT_CHECK(lo <= hi && std::isfinite(lo) && std::isfinite(hi), "nn::init::uniform_: need finite lo <= hi, got [", lo,
           ", ", hi, ")");
  return fill_from(t, uniform(t.shape(), lo, hi, gen, t.dtype()));
}

Tensor normal_(const Tensor& t, Generator& gen, double mean, double stddev) {
  check_floating(t, "normal_");
  MT_CHECK(stddev >= 0.0 && std::isfinite(stddev) && std::isfinite(mean),
           "nn::init::normal_: need a finite mean and stddev >= 0, got mean ", mean, ", stddev ", stddev);
  return fill_from(t, normal(t.shape(), mean, stddev, gen, t.dtype()));
}

Tensor constant_(const Tensor& t, double value) {
  check_floating(t, "constant_");
  return fill_from(t, full(t.shape(), value, t.dtype()));
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nonlinearity) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity, "kaiming_uniform_");
  return uniform_(t, gen, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nonlinearity) {
  return normal_(t, gen, 0.0, kaiming_std(t, a, mode, nonlinearity, "kaiming_normal_"));
}

Tensor xavier_uniform_(const Tensor& t, Generator& gen, double gain) {
  const double bound = std::sqrt(3.0) * xavier_std(t, gain, "xavier_uniform_");
  return uniform_(t, gen, -bound, bound);
}

Tensor xavier_normal_(const Tensor& t, Generator& gen, double gain) {
  return normal_(t, gen, 0.0, xavier_std(t, gain, "xavier_normal_"));
}

void dcgan_init(Module& module, Generator& gen) {
  module.apply([&gen](Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m)) normal_(c->weight, gen, 0.0, 0.02);
    else if (auto* ct = dynamic_cast<ConvTranspose2d*>(&m)) normal_(ct->weight, gen, 0.0, 0.02);
    else if (auto* bn = dynamic_cast<BatchNormBase*>(&m)) {
      if (bn->weight.defined()) normal_(bn->weight, gen, 1.0, 0.02);
      if (bn->bias.defined()) zeros_(bn->bias);
    }
  });
}

}  // namespace mixtape::nn::init
