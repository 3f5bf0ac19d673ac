#include "autograd/functions/embedding.h"

#include "autograd/tape.h"
#include "tensor/ops/embedding.h"

namespace mixtape {

int64_t padding_row(std::optional<int64_t> padding_idx, int64_t rows, const char* who) {
  if (!padding_idx) return -1;
  const int64_t p = *padding_idx;
  MT_CHECK(p >= -rows && p < rows, who, ": padding_idx ", p, " is out of range for ", rows, " embeddings (expected ",
           -rows, " to ", rows - 1, ", negative counting from the end, or none)");
  return p < 0 ? p + rows : p;
}

Variable embedding(const Tensor& indices, const Variable& weight, std::optional<int64_t> padding_idx_or_none) {
  Tensor y = mixtape::embedding(indices, weight.data());  // validates
  const int64_t rows = weight.size(0);
  const int64_t padding_idx = padding_row(padding_idx_or_none, rows, "embedding");
  return record(OpId::embedding, {weight}, y,
                [indices, rows, padding_idx](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{embedding_backward(indices, dy[0], rows, padding_idx)};
  });
}

}  // namespace mixtape
