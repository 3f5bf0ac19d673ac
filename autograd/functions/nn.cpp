#include "autograd/functions/nn.h"

#include "autograd/tape.h"
#include "tensor/ops/nn.h"

namespace mixtape {

Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps) {
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  BatchNormOutput r = batch_norm_forward(x.data(), w, b, running_mean, running_var, training, momentum, eps);
  const DType param_dtype = w.defined() ? w.dtype() : b.defined() ? b.dtype() : x.dtype();
  // Saved: the input, the weight (dx scales by it) and the statistics that normalized.
  return record(OpId::batch_norm, {x, weight, bias}, r.y,
                [xs = x.data(), w, mean = r.mean, invstd = r.invstd, training, param_dtype](
                    const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
                  BatchNormGrads g = batch_norm_backward(dy[0], xs, w, mean, invstd, training, needs[0], needs[1],
                                                         needs[2], param_dtype);
                  return std::vector<Tensor>{g.dx, g.dweight, g.dbias};
                });
}

Variable dropout(const Variable& x, double p, bool training, Generator& gen) {
  MT_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.advance(uint64_t(x.numel()));
  // dx = dy * mask / (1 - p): the forward function applied to dy with the same Philox counters.
  return record(OpId::dropout, {x}, dropout_apply(x.data(), p, seed, offset),
                [p, seed, offset](const std::vector<Tensor>& dy, const std::vector<bool>&) {
                  return std::vector<Tensor>{dropout_apply(dy[0], p, seed, offset)};
                });
}

Variable embedding(const Tensor& indices, const Variable& weight) {
  Tensor y = mixtape::embedding(indices, weight.data());  // validates
  const int64_t rows = weight.size(0);
  return record(OpId::embedding, {weight}, y,
                [indices, rows](const std::vector<Tensor>& dy, const std::vector<bool>&) {
                  return std::vector<Tensor>{embedding_backward(indices, dy[0], rows)};
                });
}

}  // namespace mixtape
