#include "tensor/cpu/copy.h"

#include "tensor/core/rng.h"
#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// One element's conversion. Every float -> 16-bit rounding in casts happens here.
template <class D, class S>
D convert(S v) {
  if constexpr (std::is_same_v<S, D>) return v;
  else return store<D>(load<S>(v));
}

template <class D>
D convert_stochastic(float v, uint32_t r) {
  if constexpr (std::is_same_v<D, half>) return round_to_half_stochastic(v, r);
  else if constexpr (std::is_same_v<D, bfloat16>) return round_to_bf16_stochastic(v, r);
  else return store<D>(v);
}

}  // namespace

void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset) {
  const std::array<Shape, 2> strides{dst.strides(), broadcast_strides(src, dst.shape())};
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      if (rounding == Rounding::stochastic && is_16bit(dst.dtype())) {
        // The row-major index i of each element selects its random word (thread-independent).
        int64_t i = 0;
        for_each_offset<2>(dst.shape(), strides, [&](const std::array<int64_t, 2>& o) {
          const uint32_t r = philox_words(seed, offset + uint64_t(i++))[0];
          d[o[0]] = convert_stochastic<D>(float(load<S>(s[o[1]])), r);
        });
      } else {
        for_each_offset<2>(dst.shape(), strides,
                           [&](const std::array<int64_t, 2>& o) { d[o[0]] = convert<D>(s[o[1]]); });
      }
    });
  });
}

void fill(const Strided& out, double value) {
  dispatch_all(out.dtype(), "fill", [&]<class T>() {
    const T v = store<T>(value);  // one rounding from double
    T* d = static_cast<T*>(out.raw_data());
    for_each_offset<1>(out.shape(), {out.strides()}, [&](const std::array<int64_t, 1>& o) { d[o[0]] = v; });
  });
}

void increment(const Strided& counter, int64_t by) {
  int64_t* c = counter.data<int64_t>();
  for_each_offset<1>(counter.shape(), {counter.strides()}, [&](const std::array<int64_t, 1>& o) {
    c[o[0]] = int64_t(uint64_t(c[o[0]]) + uint64_t(by));  // two's-complement wrap, as on the GPU
  });
}

}  // namespace mixtape::cpu
