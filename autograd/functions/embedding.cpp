#include "autograd/functions/embedding.h"

#include "autograd/tape.h"
#include "tensor/ops/embedding.h"

namespace mixtape {

Variable embedding(const Tensor& indices, const Variable& weight, int64_t padding_idx) {
  Tensor y = mixtape::embedding(indices, weight.data());  // validates
  const int64_t rows = weight.size(0);
  MT_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < rows), "embedding: padding_idx ", padding_idx,
           " is out of range for weight ", weight.data().meta(), " (expected -1 for none, or 0 to ", rows - 1, ")");
  return record(OpId::embedding, {weight}, y,
                [indices, rows, padding_idx](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{embedding_backward(indices, dy[0], rows, padding_idx)};
  });
}

}  // namespace mixtape
