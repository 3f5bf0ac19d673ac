#include "tensor/ops/stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/backend.h"
#include "tensor/cpu/stats.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// Runs the kernel pair into 5 fresh f64 sums on x's device and returns them on the host. f64
// tensors stay on the CPU, so on a GPU the sums land in the 8-byte elements of an i64 [5] whose
// bytes are read back as doubles.
template <class Cpu, class Cuda>
std::vector<double> raw_sums(const char* op, const Tensor& x, Cpu&& cpu, Cuda&& cuda) {
  ops::check_same(op, {&x});
  ops::check_floating(op, x);
  return on_device(
      x.device(),
      [&] {
    Tensor out = zeros({5}, DType::f64);
    cpu(x, out);
    return out.to_vector();
      },
      [&] {
    Tensor out = zeros({5}, DType::i64, x.device());
    cuda(x, out);
    const Tensor host = out.to(Device::cpu());
    std::vector<double> sums(5);
    std::memcpy(sums.data(), host.raw_data(), sizeof(double) * 5);
    return sums;
  });
}

// Mean and population std from a count, a sum and a sum of squares (all f64).
void mean_std(double n, double s, double ss, double& mean, double& std) {
  mean = n > 0.0 ? s / n : 0.0;
  std = n > 0.0 ? std::sqrt(std::max(0.0, ss / n - mean * mean)) : 0.0;
}

}  // namespace

TensorMoments tensor_moments(const Tensor& x) {
  const std::vector<double> r = raw_sums(
      "tensor_moments", x, [](const Tensor& t, Tensor& o) { cpu::tensor_moments(t, o); },
      [](const Tensor& t, Tensor& o) { cuda::tensor_moments(t, o); });
  TensorMoments m;
  m.count = int64_t(r[0]);
  m.nonfinite = int64_t(r[1]);
  mean_std(r[0], r[2], r[3], m.mean, m.std);
  m.rms = r[0] > 0.0 ? std::sqrt(r[3] / r[0]) : 0.0;
  m.max_abs = r[4];
  return m;
}

LogAbsMoments log_abs_moments(const Tensor& x) {
  const std::vector<double> r = raw_sums(
      "log_abs_moments", x, [](const Tensor& t, Tensor& o) { cpu::log_abs_moments(t, o); },
      [](const Tensor& t, Tensor& o) { cuda::log_abs_moments(t, o); });
  LogAbsMoments m;
  m.count = int64_t(r[0]);
  m.nonfinite = int64_t(r[1]);
  mean_std(r[0], r[2], r[3], m.mu, m.sigma);
  m.max_abs = r[4];
  return m;
}

}  // namespace mixtape
