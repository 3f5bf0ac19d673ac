#include "autograd/functions/embedding.h"

#include "autograd/tape.h"
#include "tensor/ops/embedding.h"

namespace mixtape {

Variable embedding(const Tensor& indices, const Variable& weight) {
  Tensor y = mixtape::embedding(indices, weight.data());  // validates
  const int64_t rows = weight.size(0);
  return record(OpId::embedding, {weight}, y, [indices, rows](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{embedding_backward(indices, dy[0], rows)};
  });
}

}  // namespace mixtape
