#include "tensor/cpu/dropout.h"

#include "tensor/core/rng.h"
#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

void dropout(const Strided& x, const Strided& out, double p, uint64_t seed, uint64_t offset) {
  const double keep = 1.0 - p;
  dispatch_floating(x.dtype(), "dropout", [&]<class T>() {
    using A = compute_t<T>;
    const A scale = A(1.0 / keep);
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    // i: the row-major index that selects the element's Philox counter (Note [Dropout mask]).
    parallel_for_each_offset<2>(x.shape(), {x.strides(), out.strides()},
                                [&](const std::array<int64_t, 2>& o, int64_t i) {
      const PhiloxBlock r = philox_words(seed, offset + uint64_t(i));
      const bool kept = uniform01_f64(r[0], r[1]) < keep;
      po[o[1]] = kept ? store<T>(A(load(px[o[0]])) * scale) : store<T>(A(0));
    });
  });
}

}  // namespace mixtape::cpu
