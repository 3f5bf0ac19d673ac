#include "tensor/cpu/copy.h"

#include "tensor/core/rng.h"
#include "tensor/cpu/convert.h"
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

// f32, f16 and bf16 all compute in float: a cast among them goes row by row through a float
// chunk (convert.h), split over the threads; any other cast element by element.
template <class T>
constexpr bool kFloatFamily = std::is_same_v<compute_t<T>, float> && !std::is_same_v<T, double>;

void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset) {
  const std::array<Shape, 2> strides{dst.strides(), broadcast_strides(src, dst.shape())};
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      const bool stochastic = rounding == Rounding::stochastic && is_16bit(dst.dtype());
      if constexpr (std::is_same_v<D, S>) {
        if (!stochastic) {  // the same type: the bits are copied (NaN payloads included)
          parallel_for_each_offset<2>(dst.shape(), strides,
                                      [&](const std::array<int64_t, 2>& o) { d[o[0]] = s[o[1]]; });
          return;
        }
      }
      if constexpr (kFloatFamily<D> && kFloatFamily<S>) {
        // The row-major index of each element selects its random word (thread-independent).
        parallel_for_each_row<2>(dst.shape(), strides, [&](const RowPiece<2>& r) {
          for_chunks(r.len, [&](int64_t j, int64_t n) {
            float in[kRowChunk];
            const float* v = load_row(s + r.at[1] + j * r.step[1], r.step[1], n, in);
            D* out = d + r.at[0] + j * r.step[0];
            // Only the 16-bit types round stochastically. (Asked of D alone: the test above also
            // depends on S, so for D = i64 clang checks this branch before S is known, and "D is not
            // float" would keep the call below in it.)
            if constexpr (std::is_same_v<D, half> || std::is_same_v<D, bfloat16>) {
              if (stochastic) {
                store_stochastic_row(v, out, r.step[0], n, seed, offset + uint64_t(r.first + j));
                return;
              }
            }
            store_row(v, out, r.step[0], n);
          });
        });
      } else if (stochastic) {
        for_each_offset<2>(dst.shape(), strides, [&](const std::array<int64_t, 2>& o, int64_t i) {
          const uint32_t r = rounding_word(seed, offset + uint64_t(i));
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
