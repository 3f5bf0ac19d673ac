// Batch normalization layers (Ioffe & Szegedy 2015; kernel and formulas:
// tensor/ops/batch_norm.h).
//
// Mixed precision: the statistics stay fp32. The running_mean / running_var buffers are f32,
// the op accumulates batch statistics in fp32 or wider whatever the input dtype, and f32
// weight / bias are handed to the op as they are when the input is 16-bit (the op reads fp32
// parameters with a 16-bit input, and their gradients come back in f32). Parameters of any
// other dtype are cast to the input's dtype like every other layer's.
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace mixtape::nn {

struct BatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) running + momentum batch_stat
  bool affine = true;     // learnable weight (init 1) and bias (init 0)
  bool track_running_stats = true;
};

// Shared by BatchNorm1d and BatchNorm2d; they differ in the input ranks they accept.
// Training mode normalizes with the batch statistics and updates the running ones in place
// (and counts num_batches_tracked); eval mode normalizes with the running statistics. Without
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
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);

 protected:
  void check_input(const Variable& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options);
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);

 protected:
  void check_input(const Variable& x) const override;
};

}  // namespace mixtape::nn
