#include "autograd/functions/dropout.h"

#include "autograd/tape.h"
#include "tensor/ops/dropout.h"

namespace mixtape {

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

}  // namespace mixtape
