// Dropout on the GPU, the device twin of cpu::dropout (tensor/cpu/dropout.cpp): the same Philox
// draw per element (Note [Dropout mask] in tensor/ops/dropout.h) on the elementwise loop of
// cuda/elementwise.cuh, and the CPU's expression, so the mask and the values are bit-identical.
#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"

namespace mixtape::cuda {

namespace {

// Note [Dropout mask] (cpu::dropout): element i (row-major in x) is kept when the 53-bit uniform
// made of words 0 (high) and 1 (low) of Philox block (seed, offset + i) is below keep = 1 - p;
// kept values are scaled by 1 / keep in the compute type. uniform01_f64 (tensor/core/rng.h) is a
// host function, so the device's copy is here; tests/cuda/test_dropout.cpp checks the mask
// against the CPU's.
__device__ __forceinline__ double uniform01_53(uint32_t hi, uint32_t lo) {
  return double((uint64_t(hi) << 21) | (lo >> 11)) * (1.0 / 9007199254740992.0);  // exact
}

// out[o1] = kept(i) ? x[o0] * scale : 0, as cpu::dropout orders its operands (x first).
template <class T>
struct Dropout {
  using C = compute_t<T>;
  const T* x;
  T* out;
  double keep;
  C scale;
  uint64_t seed, offset;
  __device__ void operator()(int64_t i, const int64_t (&o)[2]) const {
    const PhiloxBlock r = philox_words(seed, offset + uint64_t(i));
    const bool kept = uniform01_53(r[0], r[1]) < keep;
    out[o[1]] = kept ? store<T>(C(load(x[o[0]])) * scale) : store<T>(C(0));
  }
};

}  // namespace

// p in [0, 1) (checked by the front-end). keep and scale are computed on the host exactly as
// cpu::dropout computes them.
void dropout(const Strided& x, const Strided& out, double p, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(x.device().index);
  const double keep = 1.0 - p;
  const OffsetCalculator<2> calc = offsets_for<2>(x.shape(), {&x, &out});
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Dropout<T> f{
        static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), keep, C(1.0 / keep), seed, offset};
    launch_elementwise<2>("dropout", x.numel(), calc, f, stream_of(out));
  });
}

}  // namespace mixtape::cuda
