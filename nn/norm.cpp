#include "nn/norm.h"

#include <cmath>
#include <utility>

#include "autograd/functions/batch_norm.h"
#include "autograd/functions/norm.h"
#include "autograd/functions/shape.h"
#include "nn/init.h"

namespace mixtape::nn {

BatchNormBase::BatchNormBase(const char* type, const BatchNormOptions& o) : UnaryModule(type), options_(o) {
  MT_CHECK(o.num_features > 0, type, ": num_features must be positive, got ", o.num_features);
  MT_CHECK(o.eps > 0.0 && std::isfinite(o.eps), type, ": eps must be positive and finite, got ", o.eps);
  if (o.momentum)
    MT_CHECK(*o.momentum >= 0.0 && *o.momentum <= 1.0, type, ": momentum must be in [0, 1] or None, got ", *o.momentum);
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

namespace {

// A normalization layer's parameter as the op takes it: an f32 parameter as it is with a 16-bit
// input (the op reads fp32 parameters and returns fp32 gradients), anything else cast to the
// input's dtype.
Variable norm_param(const Variable& p, const Variable& x) {
  if (!p.defined()) return Variable();
  return (is_16bit(x.dtype()) && p.dtype() == DType::f32) ? p : cast(p, x.dtype());
}

}  // namespace

Variable BatchNormBase::forward(const Variable& x) {
  MT_CHECK(x.defined(), str(), ": got an undefined Variable");
  check_input(x);
  const bool track = options_.track_running_stats;
  const bool batch_stats = is_training() || !track;
  const bool count = is_training() && track;
  // The counter lives with the module (on its device, like the running statistics) and is
  // counted there: no host round trip per layer and step on a GPU. The cumulative average
  // (momentum = None) reads it, already counting this batch, inside the kernel.
  const bool cumulative = count && !options_.momentum;
  Tensor n = count ? num_batches_tracked() : Tensor();
  if (cumulative) increment_(n);
  Variable y = batch_norm(x, norm_param(weight, x), norm_param(bias, x), track ? running_mean() : Tensor(),
                          track ? running_var() : Tensor(), batch_stats, options_.momentum.value_or(0.0), options_.eps,
                          cumulative ? n : Tensor());
  if (count && !cumulative) increment_(n);
  return y;
}

std::string BatchNormBase::extra_repr() const {
  const std::string momentum = options_.momentum ? detail::cat(*options_.momentum) : std::string("None");
  std::string s = detail::cat(options_.num_features, ", eps=", options_.eps, ", momentum=", momentum);
  if (!options_.affine) s += ", affine=false";
  if (!options_.track_running_stats) s += ", track_running_stats=false";
  return s;
}

BatchNorm1d::BatchNorm1d(const BatchNormOptions& options) : BatchNormBase("BatchNorm1d", options) {}
BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                         bool track_running_stats)
    : BatchNorm1d(BatchNormOptions{num_features, eps, momentum, affine, track_running_stats}) {}

void BatchNorm1d::check_input(const Variable& x) const {
  MT_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == options_.num_features, str(), ": expected input [N, ",
           options_.num_features, "] or [N, ", options_.num_features, ", L], got ", x.data().meta());
}

BatchNorm2d::BatchNorm2d(const BatchNormOptions& options) : BatchNormBase("BatchNorm2d", options) {}
BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                         bool track_running_stats)
    : BatchNorm2d(BatchNormOptions{num_features, eps, momentum, affine, track_running_stats}) {}

void BatchNorm2d::check_input(const Variable& x) const {
  MT_CHECK(x.dim() == 4 && x.size(1) == options_.num_features, str(), ": expected input [N, ", options_.num_features,
           ", H, W], got ", x.data().meta());
}

// Note [Normalization in mixed precision]
// LayerNorm and GroupNorm are on the fp32 allow-list as accumulate entries, as batch_norm is
// (Note [The fp32 allow-list] in nn/precision.h): a 16-bit input stays 16-bit, and the op
// computes the statistics in double, saves them in fp32, normalizes in fp32 and rounds y once.
// What PyTorch's autocast gets by casting the input to fp32 (no 16-bit sum of many squares, no
// cancellation in E[x^2] - E[x]^2) happens inside the kernel, without an fp32 copy of the
// activation on the way in and a cast back to 16 bits for the next layer on the way out: y is
// O(1) after normalization and fits any 16-bit format with one rounding. f32 parameters reach
// the op as they are (norm_param), so the affine part is applied with fp32 weights and their
// gradients (sums over the batch, in double) come back in fp32 for the master weights.

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : UnaryModule("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  MT_CHECK(!shape_.empty() && numel_of(shape_) > 0, "LayerNorm: normalized_shape must be non-empty, got ",
           shape_str(shape_));
  MT_CHECK(eps > 0.0 && std::isfinite(eps), "LayerNorm: eps must be positive and finite, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", empty(shape_));
    bias = register_parameter("bias", empty(shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (!weight.defined()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Variable LayerNorm::forward(const Variable& x) {
  MT_CHECK(x.defined(), str(), ": got an undefined Variable");
  return layer_norm(x, shape_, norm_param(weight, x), norm_param(bias, x), eps_);
}

std::string LayerNorm::extra_repr() const {
  std::string s = detail::cat(shape_str(shape_), ", eps=", eps_);
  if (!weight.defined()) s += ", elementwise_affine=false";
  return s;
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : UnaryModule("GroupNorm"), groups_(num_groups), channels_(num_channels), eps_(eps) {
  MT_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0,
           "GroupNorm: num_channels must be a positive multiple of num_groups, got num_groups = ", num_groups,
           ", num_channels = ", num_channels);
  MT_CHECK(eps > 0.0 && std::isfinite(eps), "GroupNorm: eps must be positive and finite, got ", eps);
  if (affine) {
    weight = register_parameter("weight", empty({num_channels}));
    bias = register_parameter("bias", empty({num_channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!weight.defined()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Variable GroupNorm::forward(const Variable& x) {
  MT_CHECK(x.defined(), str(), ": got an undefined Variable");
  MT_CHECK(x.dim() >= 2 && x.size(1) == channels_, str(), ": expected input [N, ", channels_, ", ...], got ",
           x.data().meta());
  return group_norm(x, groups_, norm_param(weight, x), norm_param(bias, x), eps_);
}

std::string GroupNorm::extra_repr() const {
  std::string s = detail::cat(groups_, ", ", channels_, ", eps=", eps_);
  if (!weight.defined()) s += ", affine=false";
  return s;
}

}  // namespace mixtape::nn
