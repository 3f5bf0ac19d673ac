#include "nn/dropout.h"

#include "autograd/functions/dropout.h"

namespace mixtape::nn {

uint64_t draw_seed(Generator& gen) {
  const PhiloxBlock w = philox_words(gen.seed(), gen.advance(1));
  return (uint64_t(w[0]) << 32) | w[1];
}

Dropout::Dropout(double p, Generator& gen) : Dropout(p, draw_seed(gen)) {}

Dropout::Dropout(double p, uint64_t seed) : UnaryModule("Dropout"), p_(p), gen_(seed) {
  MT_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
  register_generator("mask", gen_);
}

Variable Dropout::forward(const Variable& x) { return dropout(x, p_, is_training(), gen_); }

std::string Dropout::extra_repr() const { return detail::cat("p=", p_); }

}  // namespace mixtape::nn
