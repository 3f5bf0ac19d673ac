// Linear and Flatten (torch/nn/modules/linear.h keeps them together too).
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace mixtape::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
};

// y = x W^T + b: x [..., in] -> [..., out]; W [out, in], b [out].
// Init as torch: W ~ kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), b ~ the same.
class Linear : public UnaryModule {
 public:
  explicit Linear(const LinearOptions& options, Generator& gen = default_generator());
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Linear(int64_t in_features, int64_t out_features, Generator& gen) : Linear(in_features, out_features, true, gen) {}

  // The parameters are cast to x's dtype (a node-free no-op when they match).
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const LinearOptions& options() const { return options_; }

  Variable weight;  // [out, in]
  Variable bias;    // [out], undefined without a bias

 private:
  LinearOptions options_;
};

// Flattens dims start_dim..end_dim into one: [N, C, H, W] -> [N, C*H*W] by default.
class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace mixtape::nn
