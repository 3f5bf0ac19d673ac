// Embedding: a lookup table of V vectors of size D (not a UnaryModule: its input is an i64
// index tensor, not a Variable).
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace mixtape::nn {

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
};

// indices i64 [...] -> weight rows [..., D]; W [V, D] ~ N(0, 1) as in torch.
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options, Generator& gen = default_generator());
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());

  // Rows in the weight's dtype.
  Variable forward(const Tensor& indices);
  // Rows cast to `dtype` (the compute dtype of a mixed-precision model): the gathered rows are
  // cast rather than the whole table, which gives the same values for a fraction of the work.
  Variable forward(const Tensor& indices, DType dtype);
  Variable operator()(const Tensor& indices) { return forward(indices); }
  Variable operator()(const Tensor& indices, DType dtype) { return forward(indices, dtype); }

  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const EmbeddingOptions& options() const { return options_; }

  Variable weight;  // [V, D]

 private:
  EmbeddingOptions options_;
};

}  // namespace mixtape::nn
