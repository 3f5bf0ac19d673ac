#include "tensor/cpu/copy.h"

#include <algorithm>

#include "tensor/core/rng.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/transpose.h"

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

// f32, f16 and bf16 all compute in float: a cast among them goes row by row through a float
// chunk (convert.h), split over the threads; any other cast element by element.
template <class T>
constexpr bool kFloatFamily = std::is_same_v<compute_t<T>, float> && !std::is_same_v<T, double>;

// Note [Transposing copies]
// A same-dtype copy from a transposed or permuted view into contiguous memory (pixel-major rows
// [N*H*W, C] to NCHW and back, a sequence's [T, B, X] to [B, T, X]): walking the destination in
// order reads the source one element per cache line. When, after merging, the source is
// contiguous along a dim other than the destination's innermost, the copy runs in tiles of
// kTile x kTile elements over those two dims, so that a tile reads each source line once. The
// bits are copied either way. (8-bit codes are copied as char8_t, a byte type that does not alias
// the loop's other variables as unsigned char would.)
template <class T>
bool copy_transposed(const Strided& src, const Strided& dst, const std::array<Shape, 2>& strides) {
  const MergedDims<2> m = merge_dims<2>(dst.shape(), strides);
  const size_t r = m.size.size();
  if (r < 2 || m.stride[0][r - 1] != 1 || m.stride[1][r - 1] == 1) return false;
  size_t k = r;  // the source's contiguous dim
  for (size_t i = 0; i + 1 < r; ++i)
    if (m.stride[1][i] == 1) k = i;
  constexpr int64_t kTile = 32;
  const int64_t A = k < r ? m.size[k] : 0, L = m.size[r - 1];
  if (A < kTile / 4 || L < kTile / 4) return false;
  const int64_t dsa = m.stride[0][k], ssl = m.stride[1][r - 1], tiles = (A + kTile - 1) / kTile;
  const int64_t batches = m.numel / (A * L);
  T* d = static_cast<T*>(dst.raw_data());
  const T* s = static_cast<const T*>(src.raw_data());
  parallel_for(batches * tiles, grain_for(kTile * L), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      int64_t od = 0, os = 0, rest = u / tiles;  // the batch index over the other dims
      for (size_t i = r - 1; i-- > 0;) {
        if (i == k) continue;
        const int64_t at = rest % m.size[i];
        rest /= m.size[i];
        od += at * m.stride[0][i];
        os += at * m.stride[1][i];
      }
      const int64_t a0 = u % tiles * kTile, a1 = std::min(A, a0 + kTile);
      for (int64_t l0 = 0; l0 < L; l0 += kTile) {
        const int64_t l1 = std::min(L, l0 + kTile);
        if constexpr (std::is_same_v<T, char8_t> || std::is_same_v<T, float>) {  // Note [Transposed tiles]
          using V = std::conditional_t<std::is_same_v<T, float>, float, uint8_t>;
          transpose_tile(reinterpret_cast<const V*>(s + os + a0 + l0 * ssl), ssl,
                         reinterpret_cast<V*>(d + od + a0 * dsa + l0), dsa, l1 - l0, a1 - a0);
          continue;
        }
        for (int64_t a = a0; a < a1; ++a) {
          T* out = d + od + a * dsa;
          const T* in = s + os + a;
          for (int64_t l = l0; l < l1; ++l) out[l] = in[l * ssl];
        }
      }
    }
  });
  return true;
}

// A same-dtype copy whose innermost (merged) dim is contiguous on both sides but which is not one
// block (a [T, B, X] sequence to [B, T, X]): each run of that dim copied as a block, the runs split
// over the threads.
template <class T>
bool copy_runs(const Strided& dst, const Strided& src, const std::array<Shape, 2>& strides) {
  const MergedDims<2> m = merge_dims<2>(dst.shape(), strides);
  const size_t r = m.size.size();
  if (r < 2 || m.stride[0][r - 1] != 1 || m.stride[1][r - 1] != 1) return false;
  const int64_t L = m.size[r - 1], runs = m.numel / L;
  T* d = static_cast<T*>(dst.raw_data());
  const T* s = static_cast<const T*>(src.raw_data());
  parallel_for(runs, grain_for(L), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      int64_t od = 0, os = 0, rest = u;
      for (size_t i = r - 1; i-- > 0;) {
        const int64_t at = rest % m.size[i];
        rest /= m.size[i];
        od += at * m.stride[0][i];
        os += at * m.stride[1][i];
      }
      std::copy(s + os, s + os + L, d + od);
    }
  });
  return true;
}

// A cast to or from an 8-bit dtype, unscaled (as torch's .to(torch.float8_e4m3fn)): codes are
// copied as they are, decoded exactly to a floating dtype, or rounded to nearest even from the
// float value (from double rounded to odd in float first: Note [Rounding f64 and i64 to 16 bits]
// in half.h holds for these narrower formats too) without
// saturation: past the range E5M2 gives inf and E4M3 NaN; fp6 and fp4 have neither and saturate.
// Scaled 8-bit operands are tensor/ops/quantize.h's.
void copy_8bit(const Strided& src, const Strided& dst, const std::array<Shape, 2>& strides) {
  if (src.dtype() == dst.dtype()) {
    // (char8_t: Note [Transposing copies])
    if (copy_transposed<char8_t>(src, dst, strides) || copy_runs<char8_t>(dst, src, strides)) return;
    uint8_t* d = static_cast<uint8_t*>(dst.raw_data());
    const uint8_t* s = static_cast<const uint8_t*>(src.raw_data());
    parallel_for_each_offset<2>(dst.shape(), strides, [&](const std::array<int64_t, 2>& o) { d[o[0]] = s[o[1]]; });
  } else if (is_8bit(src.dtype())) {
    MT_CHECK(is_floating(dst.dtype()), "copy: cannot cast ", dtype_name(src.dtype()), " to ", dtype_name(dst.dtype()));
    const bits8::Format& f = format_of(src.dtype());
    const uint8_t* s = static_cast<const uint8_t*>(src.raw_data());
    dispatch_floating(dst.dtype(), "copy", [&]<class D>() {
      D* d = static_cast<D*>(dst.raw_data());
      parallel_for_each_offset<2>(dst.shape(), strides, [&](const std::array<int64_t, 2>& o) {
        d[o[0]] = store<D>(bits8::to_float(s[o[1]], f));  // exact in every floating dtype
      });
    });
  } else {
    MT_CHECK(is_floating(src.dtype()), "copy: cannot cast ", dtype_name(src.dtype()), " to ", dtype_name(dst.dtype()));
    const bits8::Format& f = format_of(dst.dtype());
    uint8_t* d = static_cast<uint8_t*>(dst.raw_data());
    dispatch_floating(src.dtype(), "copy", [&]<class S>() {
      const S* s = static_cast<const S*>(src.raw_data());
      parallel_for_each_offset<2>(dst.shape(), strides, [&](const std::array<int64_t, 2>& o) {
        float v;
        if constexpr (std::is_same_v<S, double>) v = bits16::f64_to_f32_round_odd(s[o[1]]);
        else v = float(load<S>(s[o[1]]));
        d[o[0]] = bits8::from_float_rn(v, f, bits8::Overflow::no_saturate);
      });
    });
  }
}

}  // namespace

void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset) {
  const std::array<Shape, 2> strides{dst.strides(), broadcast_strides(src, dst.shape())};
  if (is_8bit(src.dtype()) || is_8bit(dst.dtype())) {
    MT_CHECK(rounding == Rounding::nearest, "copy: stochastic rounding to ", dtype_name(dst.dtype()),
             " is not a cast (quantize it with its scale: tensor/ops/quantize.h)");
    copy_8bit(src, dst, strides);
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      const bool stochastic = rounding == Rounding::stochastic && is_16bit(dst.dtype());
      if constexpr (std::is_same_v<D, S>) {
        if (!stochastic) {  // the same type: the bits are copied (NaN payloads included)
          if (copy_transposed<D>(src, dst, strides) || copy_runs<D>(dst, src, strides)) return;
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
