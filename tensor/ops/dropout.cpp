#include "tensor/ops/dropout.h"

#include "cuda/backend.h"
#include "tensor/cpu/dropout.h"
#include "tensor/ops/common.h"

namespace mixtape {

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  MT_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.advance(uint64_t(x.numel()));
  return dropout_apply(x, p, seed, offset);
}

Tensor dropout_apply(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  ops::check_same("dropout", {&x});
  ops::check_floating("dropout", x);
  MT_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::dropout(x, out, p, seed, offset); }, [&] { cuda::dropout(x, out, p, seed, offset); });
  return out;
}

}  // namespace mixtape
