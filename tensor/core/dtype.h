// Runtime element types. f64 is CPU-only (gradient checks); i64 holds indices and class labels.
// The 8-bit element formats (e4m3, e5m2, and the MX fp6 / fp4 formats e3m2, e2m3, e2m1, one code
// per byte: fp6 and fp4 are not packed) hold the codes of scaled GEMM operands
// (tensor/ops/quantize.h); no other op computes on them (Note [Eight-bit formats] in fp8.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

#include "tensor/core/error.h"
#include "tensor/core/fp8.h"
#include "tensor/core/half.h"
#include "tensor/core/rounding_census.h"

namespace mixtape {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, e4m3, e5m2, e3m2, e2m3, e2m1 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::e4m3:
    case DType::e5m2:
    case DType::e3m2:
    case DType::e2m3:
    case DType::e2m1: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::e3m2: return "e3m2";
    case DType::e2m3: return "e2m3";
    case DType::e2m1: return "e2m1";
  }
  return "?";
}

// The dtypes ops compute on: f32, f64, f16, bf16 (not the 8-bit codes, which only GEMM-like ops
// read, with their scales).
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }
constexpr bool is_8bit(DType t) {
  return t == DType::e4m3 || t == DType::e5m2 || t == DType::e3m2 || t == DType::e2m3 || t == DType::e2m1;
}

// The bit layout of an 8-bit dtype (throws for any other dtype).
constexpr const bits8::Format& format_of(DType t) {
  switch (t) {
    case DType::e4m3: return bits8::kE4M3;
    case DType::e5m2: return bits8::kE5M2;
    case DType::e3m2: return bits8::kE3M2;
    case DType::e2m3: return bits8::kE2M3;
    case DType::e2m1: return bits8::kE2M1;
    default: break;
  }
  throw Error(detail::cat("format_of: ", int(t), " is not an 8-bit dtype"));
}

// Machine epsilon (2^-p, the unit roundoff times two) used by dtype-aware tolerances.
constexpr double dtype_eps(DType t) {
  switch (t) {
    case DType::f32: return 1.1920928955078125e-07;
    case DType::f64: return 2.220446049250313e-16;
    case DType::f16: return 9.765625e-04;
    case DType::bf16: return 7.8125e-03;
    case DType::i64: return 0.0;
    case DType::e4m3: return 0.125;
    case DType::e5m2: return 0.25;
    case DType::e3m2: return 0.25;
    case DType::e2m3: return 0.125;
    case DType::e2m1: return 0.5;
  }
  return 0.0;
}

DType dtype_from_name(const std::string& name);  // throws on an unknown name

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};

// Compute type: 16-bit and f32 storage compute in float, f64 in double (numerics contract).
template <class T>
struct compute_type {
  using type = float;
};
template <>
struct compute_type<double> {
  using type = double;
};
template <>
struct compute_type<int64_t> {
  using type = int64_t;
};
template <class T>
using compute_t = typename compute_type<T>::type;

// Loading a stored element into its compute type, and storing a computed value back.
// store<T> is the single round-to-16-bit (RNE) point for every CPU kernel.
template <class T>
inline compute_t<T> load(T v) {
  return v;
}
template <>
inline float load<half>(half v) {
  return to_float(v);
}
template <>
inline float load<bfloat16>(bfloat16 v) {
  return to_float(v);
}

template <class T, class C>
inline T store(C v) {
  return static_cast<T>(v);
}

// Float -> i64 truncates toward zero. A plain cast is undefined for NaN and for values outside
// the i64 range; those give INT64_MIN, the value x86's conversion instruction returns (what the
// CPU has always produced there with GCC, now defined for every compiler; the emulated CUDA
// device's __float2ll_rz does the same).
template <class F>
inline int64_t truncate_to_i64(F v) {
  if (!(v >= F(-0x1p63) && v < F(0x1p63))) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}
template <>
inline int64_t store<int64_t, float>(float v) {
  return truncate_to_i64(v);
}
template <>
inline int64_t store<int64_t, double>(double v) {
  return truncate_to_i64(v);
}

// The 16-bit stores: each value is rounded once, and counted while a RoundingCensus is open
// (Note [Rounding census] in rounding_census.h).
template <>
inline half store<half, float>(float v) {
  return detail::counted(round_to_half(v), v);
}
template <>
inline bfloat16 store<bfloat16, float>(float v) {
  return detail::counted(round_to_bf16(v), v);
}
// From double and int64 the value is rounded once, not through float (Note [Rounding f64 and i64
// to 16 bits] in half.h).
template <>
inline half store<half, double>(double v) {
  return detail::counted(round_to_half_f64(v), v);
}
template <>
inline bfloat16 store<bfloat16, double>(double v) {
  return detail::counted(round_to_bf16_f64(v), v);
}
template <>
inline half store<half, int64_t>(int64_t v) {
  return round_to_half_i64(v);
}
template <>
inline bfloat16 store<bfloat16, int64_t>(int64_t v) {
  return round_to_bf16_i64(v);
}

// How a cast or a 16-bit weight update rounds: to nearest even, or stochastically with a Philox
// word (Note [Stochastic rounding] in half.h).
enum class Rounding : uint8_t { nearest, stochastic };

// The dtype switch of the CPU kernels: dispatch_floating(dtype, "op", [&]<class T>() { ... }),
// T the storage type (float, double, half, bfloat16); anything else throws naming the op. The
// CUDA launchers have their own of the same name (cuda/common.cuh), without f64.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<half>();
    case DType::bf16: return f.template operator()<bfloat16>();
    default: break;
  }
  throw Error(detail::cat(op, ": expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(t)));
}

template <class F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  if (t == DType::i64) return f.template operator()<int64_t>();
  return dispatch_floating(t, op, std::forward<F>(f));
}

}  // namespace mixtape
