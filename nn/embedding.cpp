#include "nn/embedding.h"

#include "autograd/functions/embedding.h"
#include "autograd/functions/shape.h"
#include "nn/init.h"

namespace mixtape::nn {

Embedding::Embedding(const EmbeddingOptions& o, Generator& gen) : Module("Embedding"), options_(o) {
  MT_CHECK(o.num_embeddings > 0 && o.embedding_dim > 0,
           "Embedding: num_embeddings and embedding_dim must be "
           "positive, got ",
           o.num_embeddings, " and ", o.embedding_dim);
  padding_idx_ = padding_row(o.padding_idx, o.num_embeddings, "Embedding");
  weight = register_parameter("weight", empty({o.num_embeddings, o.embedding_dim}));
  reset_parameters(gen);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen)
    : Embedding(EmbeddingOptions{num_embeddings, embedding_dim}, gen) {}

void Embedding::reset_parameters(Generator& gen) {
  init::normal_(weight, gen, 0.0, 1.0);
  if (padding_idx_ >= 0) init::zeros_(weight.data().select(0, padding_idx_));
}

Variable Embedding::forward(const Tensor& indices) {
  MT_CHECK(indices.defined() && indices.dtype() == DType::i64, str(), ": expected i64 indices, got ",
           indices.defined() ? indices.meta() : "an undefined tensor");
  // range-checks every index against V
  return embedding(indices, weight, padding_idx_ >= 0 ? std::optional<int64_t>(padding_idx_) : std::nullopt);
}

Variable Embedding::forward(const Tensor& indices, DType dtype) { return cast(forward(indices), dtype); }

std::string Embedding::extra_repr() const {
  std::string s = detail::cat(options_.num_embeddings, ", ", options_.embedding_dim);
  if (padding_idx_ >= 0) s += detail::cat(", padding_idx=", padding_idx_);
  return s;
}

}  // namespace mixtape::nn
