// Normalization layers: batch norm (Ioffe & Szegedy 2015; kernel and formulas:
// tensor/ops/batch_norm.h), layer norm (Ba, Kiros, Hinton 2016) and group norm (Wu & He 2018)
// (tensor/ops/norm.h).
//
// Mixed precision: the statistics stay fp32. The running_mean / running_var buffers are f32,
// the op accumulates batch statistics in fp32 or wider whatever the input dtype, and f32
// weight / bias are handed to the op as they are when the input is 16-bit (the op reads fp32
// parameters with a 16-bit input, and their gradients come back in f32). Parameters of any
// other dtype are cast to the input's dtype like every other layer's. LayerNorm and GroupNorm
// follow the same rule: Note [Normalization in mixed precision] in nn/norm.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"

namespace mixtape::nn {

struct BatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  // running = (1 - momentum) running + momentum batch_stat; std::nullopt (PyTorch's momentum =
  // None): the cumulative moving average, momentum = 1 / num_batches_tracked, so the running
  // statistics are the plain average over every training batch so far.
  std::optional<double> momentum = 0.1;
  bool affine = true;  // learnable weight (init 1) and bias (init 0)
  bool track_running_stats = true;
};

// Shared by BatchNorm1d and BatchNorm2d; they differ in the input ranks they accept.
// Training mode normalizes with the batch statistics and updates the running ones in place
// (and counts num_batches_tracked, a buffer, so the count of a cumulative average is in the
// state dict and the checkpoint); eval mode normalizes with the running statistics. Without
// track_running_stats both modes use batch statistics.
class BatchNormBase : public UnaryModule {
 public:
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  void reset_parameters();     // weight 1, bias 0, and reset_running_stats()
  void reset_running_stats();  // mean 0, var 1, num_batches_tracked 0
  const BatchNormOptions& options() const { return options_; }

  // Buffers (f32 [C]; num_batches_tracked is an i64 scalar). Undefined without tracking.
  Tensor running_mean() const;
  Tensor running_var() const;
  Tensor num_batches_tracked() const;

  Variable weight;  // [C] or undefined (affine = false)
  Variable bias;    // [C] or undefined

 protected:
  BatchNormBase(const char* type, const BatchNormOptions& options);
  virtual void check_input(const Variable& x) const = 0;

  BatchNormOptions options_;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options);
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true);

 protected:
  void check_input(const Variable& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options);
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true);

 protected:
  void check_input(const Variable& x) const override;
};

// Layer norm over the last dims of the input, which must equal normalized_shape; with
// elementwise_affine, a learnable weight (init 1) and bias (init 0) of normalized_shape. As
// torch.nn.LayerNorm; statistics per sample, no running statistics.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  void reset_parameters();  // weight 1, bias 0
  const Shape& normalized_shape() const { return shape_; }

  Variable weight;  // normalized_shape, or undefined (elementwise_affine = false)
  Variable bias;

 private:
  Shape shape_;
  double eps_;
};

// Group norm: input [N, C, ...] with C = num_channels, the channels in num_groups groups of
// consecutive channels, statistics per sample and group; with affine, a per-channel weight
// (init 1) and bias (init 0) of [C]. As torch.nn.GroupNorm; no running statistics, so training
// and eval compute the same thing and small batches do not matter.
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  void reset_parameters();  // weight 1, bias 0
  int64_t num_groups() const { return groups_; }
  int64_t num_channels() const { return channels_; }

  Variable weight;  // [C], or undefined (affine = false)
  Variable bias;

 private:
  int64_t groups_, channels_;
  double eps_;
};

}  // namespace mixtape::nn
