#include "tensor/ops/embedding.h"

#include "cuda/backend.h"
#include "tensor/cpu/embedding.h"
#include "tensor/ops/common.h"

namespace mixtape {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  ops::check_same("embedding", {&indices, &weight}, false);
  MT_CHECK(indices.dtype() == DType::i64, "embedding: indices must be i64, got ", indices.meta());
  ops::check_floating("embedding", weight);
  ops::check_dim("embedding", weight, 2, "weight [V, D]");
  Shape os = indices.shape();
  os.push_back(weight.size(1));
  Tensor out = empty(os, weight.dtype(), weight.device());
  on_device(
      weight.device(), [&] { cpu::embedding(indices, weight, out); }, [&] { cuda::embedding(indices, weight, out); });
  return out;
}

Tensor embedding_backward(const Tensor& indices, const Tensor& dy, int64_t num_rows, int64_t padding_idx) {
  ops::check_same("embedding backward", {&indices, &dy}, false);
  MT_CHECK(indices.dtype() == DType::i64, "embedding backward: indices must be i64, got ", indices.meta());
  ops::check_floating("embedding backward", dy);
  Shape expect = indices.shape();
  MT_CHECK(dy.dim() == indices.dim() + 1, "embedding backward: gradient ", dy.meta(), " does not fit indices ",
           indices.meta());
  expect.push_back(dy.size(-1));
  MT_CHECK(dy.shape() == expect, "embedding backward: gradient ", dy.meta(), " does not fit indices ", indices.meta());
  MT_CHECK(num_rows >= 0, "embedding backward: bad row count ", num_rows);
  MT_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < num_rows), "embedding backward: padding_idx ",
           padding_idx, " is out of range for ", num_rows, " rows (expected -1 for none, or 0 to ", num_rows - 1, ")");
  Tensor dw = empty({num_rows, dy.size(-1)}, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::embedding_backward(indices, dy, padding_idx, dw); },
      [&] { cuda::embedding_backward(indices, dy, padding_idx, dw); });
  return dw;
}

}  // namespace mixtape
