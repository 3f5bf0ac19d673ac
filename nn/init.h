// Parameter initializers (torch.nn.init). Each fills a tensor in place from a Generator, so a
// model is reproducible from one seed: values are drawn in f32 (f64 for f64 tensors) by the
// Philox factories and rounded once to the tensor's dtype.
//
//   nn::init::kaiming_normal_(conv->weight, gen, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
//   nn::init::dcgan_init(*generator_net, gen);
//
// Fans follow torch: for a weight [d0, d1, k...], fan_in = d1 * prod(k), fan_out = d0 * prod(k)
// (so a ConvTranspose2d weight [IC, OC, KH, KW] has fan_in = OC * KH * KW, as in torch).
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace mixtape::nn {
class Module;
}

namespace mixtape::nn::init {

enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu };
enum class FanMode { fan_in, fan_out };

// torch.nn.init.calculate_gain: linear, conv, sigmoid -> 1; tanh -> 5/3; relu -> sqrt(2);
// leaky_relu -> sqrt(2 / (1 + negative_slope^2)).
double calculate_gain(Nonlinearity nonlinearity, double negative_slope = 0.01);

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
// Throws for tensors with fewer than 2 dims.
Fans calculate_fans(const Shape& shape);

// Each returns its argument (the same handle, now filled).
Tensor uniform_(const Tensor& t, Generator& gen, double lo = 0.0, double hi = 1.0);
Tensor normal_(const Tensor& t, Generator& gen, double mean = 0.0, double stddev = 1.0);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(const Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// N(0, std) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, Generator& gen, double gain = 1.0);
// N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, Generator& gen, double gain = 1.0);

// The same on a parameter's data.
inline Variable uniform_(const Variable& v, Generator& gen, double lo = 0.0, double hi = 1.0) {
  uniform_(v.data(), gen, lo, hi);
  return v;
}
inline Variable normal_(const Variable& v, Generator& gen, double mean = 0.0, double stddev = 1.0) {
  normal_(v.data(), gen, mean, stddev);
  return v;
}
inline Variable constant_(const Variable& v, double value) {
  constant_(v.data(), value);
  return v;
}
inline Variable zeros_(const Variable& v) { return constant_(v, 0.0); }
inline Variable ones_(const Variable& v) { return constant_(v, 1.0); }
inline Variable kaiming_uniform_(const Variable& v, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in,
                                 Nonlinearity nonlinearity = Nonlinearity::leaky_relu) {
  kaiming_uniform_(v.data(), gen, a, mode, nonlinearity);
  return v;
}
inline Variable kaiming_normal_(const Variable& v, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in,
                                Nonlinearity nonlinearity = Nonlinearity::leaky_relu) {
  kaiming_normal_(v.data(), gen, a, mode, nonlinearity);
  return v;
}
inline Variable xavier_uniform_(const Variable& v, Generator& gen, double gain = 1.0) {
  xavier_uniform_(v.data(), gen, gain);
  return v;
}
inline Variable xavier_normal_(const Variable& v, Generator& gen, double gain = 1.0) {
  xavier_normal_(v.data(), gen, gain);
  return v;
}

// The DCGAN scheme (Radford et al. 2016, as in the PyTorch DCGAN example): every Conv2d and
// ConvTranspose2d weight ~ N(0, 0.02); every BatchNorm weight ~ N(1, 0.02) and bias = 0.
// Other parameters (conv biases, linear layers) keep their values. Modules are visited
// children first, in registration order (Module::apply), so the draws are reproducible.
void dcgan_init(Module& module, Generator& gen);

}  // namespace mixtape::nn::init
