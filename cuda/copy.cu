// Copy with cast and fill: the device twins of tensor/cpu/copy.cpp.
//
// This is where values become 16 bits on the device: Tensor::to(f16/bf16) of a CUDA tensor and
// every copy_ into a 16-bit view run copy_cast below, so its conversions are the ones the
// numerics contract (docs/design.md section 3) promises bit-identical to the CPU:
//   f32 / f16 / bf16 -> f16 / bf16   store (__float2half_rn / __float2bfloat16_rn), RNE;
//                                    the host's float_to_half_rn / float_to_bf16_rn match them
//                                    bit for bit, NaN -> 0x7FFF included (Note [Rounding on the
//                                    device] in common.cuh).
//   i64 -> f16 / bf16                __ll2half_rn / __ll2bfloat16_rn: one rounding (cvt.rn.*.s64,
//                                    or round-to-odd before sm_90), like round_to_*_i64.
//   -> f16 / bf16, Rounding::stochastic
//                                    store_stochastic = the host's float_to_*_sr compiled for the
//                                    device, fed rounding_word(seed, offset + i), i the
//                                    row-major index in dst: the CPU's exact draw.
// f64 tensors stay on the CPU, so no cast here reads or writes double. Widening is exact; 16-bit NaN payloads are kept like the CPU's half_to_float does (see
// exact_float). float -> i64 truncates toward zero; NaN and out-of-range values give INT64_MIN on
// the CPU (truncate_to_i64 in tensor/core/dtype.h, x86's result) and saturate here.
#include <cstring>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"

namespace mixtape::cuda {

namespace {

// ---- exact widening, NaN payloads kept -----------------------------------------------------------

// 16-bit -> float exactly, as bits16::half_to_float: cvt.f32.f16 (__half2float) returns the
// canonical NaN 0x7FFFFFFF for every NaN, while the CPU keeps sign and payload (mant << 13), so
// NaNs are rebuilt from the bits. bf16 -> float is a shift, payload included.
__device__ __forceinline__ float exact_float(__half h) {
  const float f = __half2float(h);
  if (f == f) return f;
  const uint32_t b = __half_as_ushort(h);
  return __uint_as_float(((b & 0x8000u) << 16) | 0x7F800000u | ((b & 0x3FFu) << 13));
}
__device__ __forceinline__ float exact_float(__nv_bfloat16 b) { return __bfloat162float(b); }
__device__ __forceinline__ float exact_float(float f) { return f; }

// ---- one element, Rounding::nearest: cpu convert<D, S> = store<D>(load<S>(v)) ---------------------

template <class T>
inline constexpr bool is_16bit_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class D, class S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;  // bit copy
  } else if constexpr (std::is_same_v<S, int64_t>) {
    if constexpr (std::is_same_v<D, float>) return __ll2float_rn(v);
    else if constexpr (std::is_same_v<D, __half>) return __ll2half_rn(v);  // one rounding
    else return __ll2bfloat16_rn(v);                                       // one rounding
  } else {  // S is float, __half or __nv_bfloat16: widen exactly to float first
    const float f = exact_float(v);
    if constexpr (std::is_same_v<D, float>) return f;
    else if constexpr (std::is_same_v<D, int64_t>) return __float2ll_rz(f);
    else return store<D>(f);  // the one rounding point (Note [Rounding on the device])
  }
}

// float(load<S>(v)) of the CPU's stochastic path: the value the random word rounds.
template <class S>
__device__ __forceinline__ float to_float_rn(S v) {
  if constexpr (std::is_same_v<S, int64_t>) return __ll2float_rn(v);
  else return exact_float(v);
}

// dst[o0] = convert(src[o1]); src broadcast to dst's shape.
template <class D, class S>
struct CopyNearest {
  const S* src;
  D* dst;
  __device__ void operator()(int64_t, const int64_t (&o)[2]) const { dst[o[0]] = convert<D>(src[o[1]]); }
};

// dst[o0] = stochastic round of src[o1] with the rounding word offset + i (Note [Rounding words]
// in tensor/core/rng.h), as cpu::copy_cast. D is f16 or bf16. Exact values (same-dtype copies
// included) never move; NaN becomes 0x7FFF as on the CPU. Each thread computes the whole Philox
// block of its word, of which the three neighbouring elements' threads use the other words.
template <class D, class S>
struct CopyStochastic {
  const S* src;
  D* dst;
  uint64_t seed, offset;
  __device__ void operator()(int64_t i, const int64_t (&o)[2]) const {
    const uint32_t r = rounding_word(seed, offset + uint64_t(i));
    dst[o[0]] = store_stochastic<D>(to_float_rn(src[o[1]]), r);
  }
};

// Bit pattern writes: fill is a store of one precomputed element.
template <class U>
struct FillBits {
  U* dst;
  U bits;
  __device__ void operator()(int64_t, const int64_t (&o)[1]) const { dst[o[0]] = bits; }
};

// counter += by, wrapping in two's complement like cpu::increment.
struct Increment {
  int64_t* counter;
  int64_t by;
  __device__ void operator()(int64_t, const int64_t (&o)[1]) const {
    counter[o[0]] = int64_t(uint64_t(counter[o[0]]) + uint64_t(by));
  }
};

// Calls f(T{}) for every dtype a CUDA tensor can have: float, __half, __nv_bfloat16, int64_t.
template <class F>
void dispatch_all_types(DType dtype, F&& f) {
  if (dtype == DType::i64) {
    f(int64_t{});
    return;
  }
  dispatch_floating(dtype, "copy", f);
}

// The unsigned integer of a dtype's size, for bit copies (1: the codes of an 8-bit dtype).
template <class F>
void dispatch_bits(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: throw Error(detail::cat("copy: unexpected element size ", dtype_size(dtype), " of ", dtype_name(dtype)));
  }
}

}  // namespace

// dst may be any strided view (copy_ into a slice); src is broadcast to dst's shape (the front-end
// expands it). Same dtype, both contiguous and the same size: one device-to-device memcpy.
void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  if (n == 0) return;
  const bool stochastic = rounding == Rounding::stochastic && is_16bit(dst.dtype());
  if (!stochastic && src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() &&
      dst.is_contiguous()) {
    copy_device_to_device(dst.raw_data(), src.raw_data(), size_t(n) * dtype_size(dst.dtype()), dst.device().index);
    return;
  }
  const OffsetCalculator<2> calc = offsets_for<2>(dst.shape(), {&dst, &src});
  const Stream s = stream_of(dst);
  if (!stochastic && src.dtype() == dst.dtype()) {  // a strided bit copy: one kernel per element size
    dispatch_bits(dst.dtype(), [&](auto tag) {
      using U = decltype(tag);
      const CopyNearest<U, U> f{static_cast<const U*>(src.raw_data()), static_cast<U*>(dst.raw_data())};
      launch_elementwise<2>("copy", n, calc, f, s);
    });
    return;
  }
  dispatch_all_types(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all_types(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      const S* ps = static_cast<const S*>(src.raw_data());
      D* pd = static_cast<D*>(dst.raw_data());
      if constexpr (is_16bit_v<D>) {
        if (stochastic) {
          const CopyStochastic<D, S> f{ps, pd, seed, offset};
          launch_elementwise<2>("copy_stochastic", n, calc, f, s);
          return;
        }
      }
      if constexpr (!std::is_same_v<D, S>) {  // same dtype went through the bit copy above
        const CopyNearest<D, S> f{ps, pd};
        launch_elementwise<2>("copy_cast", n, calc, f, s);
      }
    });
  });
}

const Strided& contiguous(const Strided& x, Workspace& copy) {
  if (x.is_contiguous()) return x;
  copy = Workspace(x.shape(), x.dtype(), x.device());
  copy_cast(x, copy.view(), Rounding::nearest, 0, 0);
  return copy.view();
}

// One rounding from double on the host, with the CPU's own store<T> (cpu::fill), then a strided
// write of that bit pattern.
void fill(const Strided& out, double value) {
  DeviceGuard guard(out.device().index);
  const int64_t n = out.numel();
  if (n == 0) return;
  uint64_t pattern = 0;
  dispatch_all(out.dtype(), "fill", [&]<class T>() {
    const T v = mixtape::store<T>(value);
    static_assert(sizeof(T) <= sizeof(pattern));
    std::memcpy(&pattern, &v, sizeof(T));  // little-endian: the low bytes
  });
  const OffsetCalculator<1> calc = offsets_for<1>(out.shape(), {&out});
  dispatch_bits(out.dtype(), [&](auto tag) {
    using U = decltype(tag);
    const FillBits<U> f{static_cast<U*>(out.raw_data()), U(pattern)};
    launch_elementwise<1>("fill", n, calc, f, stream_of(out));
  });
}

void increment(const Strided& counter, int64_t by) {
  DeviceGuard guard(counter.device().index);
  const int64_t n = counter.numel();
  if (n == 0) return;
  launch_elementwise<1>("increment", n, offsets_for<1>(counter.shape(), {&counter}),
                        Increment{counter.data<int64_t>(), by}, stream_of(counter));
}

}  // namespace mixtape::cuda
