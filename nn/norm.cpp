#include "nn/norm.h"

#include <cmath>

#include "autograd/functions/batch_norm.h"
#include "autograd/functions/shape.h"
#include "nn/init.h"

namespace mixtape::nn {

BatchNormBase::BatchNormBase(const char* type, const BatchNormOptions& o) : UnaryModule(type), options_(o) {
  MT_CHECK(o.num_features > 0, type, ": num_features must be positive, got ", o.num_features);
  MT_CHECK(o.eps > 0.0 && std::isfinite(o.eps), type, ": eps must be positive and finite, got ", o.eps);
  MT_CHECK(o.momentum >= 0.0 && o.momentum <= 1.0, type, ": momentum must be in [0, 1], got ", o.momentum);
  const int64_t C = o.num_features;
  if (o.affine) {
    weight = register_parameter("weight", empty({C}));
    bias = register_parameter("bias", empty({C}));
  }
  if (o.track_running_stats) {
    register_buffer("running_mean", empty({C}));
    register_buffer("running_var", empty({C}));
    register_buffer("num_batches_tracked", from_vector(std::vector<int64_t>{0}, Shape{}));
  }
  reset_parameters();
}

Tensor BatchNormBase::running_mean() const { return options_.track_running_stats ? buffer("running_mean") : Tensor(); }
Tensor BatchNormBase::running_var() const { return options_.track_running_stats ? buffer("running_var") : Tensor(); }
Tensor BatchNormBase::num_batches_tracked() const {
  return options_.track_running_stats ? buffer("num_batches_tracked") : Tensor();
}

void BatchNormBase::reset_running_stats() {
  if (!options_.track_running_stats) return;
  init::zeros_(running_mean());
  init::ones_(running_var());
  Tensor n = num_batches_tracked();
  n.copy_(from_vector(std::vector<int64_t>{0}, Shape{}).to(n.device()));
}

void BatchNormBase::reset_parameters() {
  if (options_.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
  reset_running_stats();
}

Variable BatchNormBase::forward(const Variable& x) {
  MT_CHECK(x.defined(), str(), ": got an undefined Variable");
  check_input(x);
  // fp32 parameters go to the op as they are with a 16-bit input (see the header).
  auto param = [&](const Variable& p) {
    if (!p.defined()) return Variable();
    return (is_16bit(x.dtype()) && p.dtype() == DType::f32) ? p : cast(p, x.dtype());
  };
  const bool track = options_.track_running_stats;
  const bool batch_stats = is_training() || !track;
  Variable y = batch_norm(x, param(weight), param(bias), track ? running_mean() : Tensor(),
                          track ? running_var() : Tensor(), batch_stats, options_.momentum, options_.eps);
  if (is_training() && track) {
    // The counter lives with the module (on its device, like the running statistics) and is
    // counted there: no host round trip per layer and step on a GPU.
    Tensor n = num_batches_tracked();
    increment_(n);
  }
  return y;
}

std::string BatchNormBase::extra_repr() const {
  std::string s = detail::cat(options_.num_features, ", eps=", options_.eps, ", momentum=", options_.momentum);
  if (!options_.affine) s += ", affine=false";
  if (!options_.track_running_stats) s += ", track_running_stats=false";
  return s;
}

BatchNorm1d::BatchNorm1d(const BatchNormOptions& options) : BatchNormBase("BatchNorm1d", options) {}
BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, double momentum, bool affine, bool track_running_stats)
    : BatchNorm1d(BatchNormOptions{num_features, eps, momentum, affine, track_running_stats}) {}

void BatchNorm1d::check_input(const Variable& x) const {
  MT_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == options_.num_features, str(), ": expected input [N, ",
           options_.num_features, "] or [N, ", options_.num_features, ", L], got ", x.data().meta());
}

BatchNorm2d::BatchNorm2d(const BatchNormOptions& options) : BatchNormBase("BatchNorm2d", options) {}
BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, bool affine, bool track_running_stats)
    : BatchNorm2d(BatchNormOptions{num_features, eps, momentum, affine, track_running_stats}) {}

void BatchNorm2d::check_input(const Variable& x) const {
  MT_CHECK(x.dim() == 4 && x.size(1) == options_.num_features, str(), ": expected input [N, ", options_.num_features,
           ", H, W], got ", x.data().meta());
}

}  // namespace mixtape::nn
