// Dropout: inverted dropout in training mode, the identity in eval mode.
//
// Each Dropout owns its Generator, so its masks are reproducible and independent of other
// random draws in the program. Without an explicit seed, the seed is drawn from the given
// generator (default_generator() when omitted): two Dropout layers built one after the other
// get different seeds, and the whole model stays reproducible from the construction seed.
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace mixtape::nn {

// A 64-bit seed drawn from `gen` (one Philox counter): seeds for the generators modules own.
uint64_t draw_seed(Generator& gen);

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Dropout(double p, uint64_t seed);

  // Training: y = x * mask / (1 - p), mask ~ Bernoulli(1 - p) (Note [Dropout mask] in
  // tensor/ops/dropout.h). Eval: y = x, and no random numbers are drawn.
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

  double p() const { return p_; }
  void set_seed(uint64_t seed) { gen_ = Generator(seed); }
  Generator& generator() { return gen_; }

 private:
  double p_;
  Generator gen_;
};

}  // namespace mixtape::nn
