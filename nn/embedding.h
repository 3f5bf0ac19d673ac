// Embedding: a lookup table of V vectors of size D (not a UnaryModule: its input is an i64
// index tensor, not a Variable).
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"

namespace mixtape::nn {

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  // As torch's: this row is initialized to zeros and gets no gradient (its row of dW is zero), so
  // it stays what it is set to. Negative values count from the end (-1: the last row).
  std::optional<int64_t> padding_idx = std::nullopt;
};

// indices i64 [...] -> weight rows [..., D]; W [V, D] ~ N(0, 1) as in torch (the padding row, if
// any, zero).
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
  // The padding row in [0, V), resolved from options().padding_idx; -1 for none.
  int64_t padding_idx() const { return padding_idx_; }

  Variable weight;  // [V, D]

 private:
  EmbeddingOptions options_;
  int64_t padding_idx_ = -1;
};

}  // namespace mixtape::nn
