// Runtime element types. f64 is CPU-only (gradient checks); i64 holds indices and class labels.
#pragma once

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "tensor/core/error.h"
#include "tensor/core/half.h"

namespace mixtape {

enum class DType : uint8_t { f32, f64, f16, bf16, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
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
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t != DType::i64; }
constexpr bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

// Machine epsilon (2^-p, the unit roundoff times two) used by dtype-aware tolerances.
constexpr double dtype_eps(DType t) {
  switch (t) {
    case DType::f32: return 1.1920928955078125e-07;
    case DType::f64: return 2.220446049250313e-16;
    case DType::f16: return 9.765625e-04;
    case DType::bf16: return 7.8125e-03;
    case DType::i64: return 0.0;
  }
  return 0.0;
}

DType dtype_from_name(const std::string& name);  // throws on an unknown name

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };

// Compute type: 16-bit and f32 storage compute in float, f64 in double (numerics contract).
template <class T> struct compute_type { using type = float; };
template <> struct compute_type<double> { using type = double; };
template <> struct compute_type<int64_t> { using type = int64_t; };
template <class T> using compute_t = typename compute_type<T>::type;

// Loading a stored element into its compute type, and storing a computed value back.
// store<T> is the single round-to-16-bit (RNE) point for every CPU kernel.
template <class T> inline compute_t<T> load(T v) { return v; }
template <> inline float load<half>(half v) { return to_float(v); }
template <> inline float load<bfloat16>(bfloat16 v) { return to_float(v); }

template <class T, class C> inline T store(C v) { return static_cast<T>(v); }

// Note [Rounding census]
// While a RoundingCensus is open, every float or double that store<> rounds to f16 or bf16 is
// counted: how many were rounded, how many of them were nonzero and finite, how many of those
// became +-0 (underflow), a nonzero subnormal, or +-inf (overflow). This measures underflow where
// it happens, inside the op that computed the value in fp32, which a look at the stored 16-bit
// result cannot (Note [What telemetry measures] in autograd/telemetry.h). Closed, the census
// costs one test of a global flag per rounded value. The counters are atomics, so kernels that
// store from several threads are counted correctly; open a census from one thread at a time.
struct RoundingCounts {
  uint64_t rounded = 0;    // values rounded to 16 bits
  uint64_t nonzero = 0;    // of which nonzero and finite
  uint64_t underflow = 0;  // nonzero finite values that became +-0
  uint64_t subnormal = 0;  // nonzero finite values that became nonzero subnormals
  uint64_t overflow = 0;   // finite values that became +-inf
  double underflow_rate() const { return nonzero ? double(underflow) / double(nonzero) : 0.0; }
  double subnormal_rate() const { return nonzero ? double(subnormal) / double(nonzero) : 0.0; }
};

namespace detail {
struct CensusCounters {
  std::atomic<uint64_t> rounded{0}, nonzero{0}, underflow{0}, subnormal{0}, overflow{0};
};
inline std::atomic<bool> census_open{false};
inline std::atomic<uint64_t> census_generation{0};
inline CensusCounters census;
template <class C>
void count_rounding(C v, uint16_t bits, uint16_t exp_mask) {
  census.rounded.fetch_add(1, std::memory_order_relaxed);
  if (v == C(0) || !std::isfinite(v)) return;
  census.nonzero.fetch_add(1, std::memory_order_relaxed);
  const uint16_t mag = bits & 0x7FFFu;
  if (mag == 0) census.underflow.fetch_add(1, std::memory_order_relaxed);
  else if ((mag & exp_mask) == 0) census.subnormal.fetch_add(1, std::memory_order_relaxed);
  else if ((mag & exp_mask) == exp_mask) census.overflow.fetch_add(1, std::memory_order_relaxed);
}
template <class C>
inline half counted(half h, C v) {
  if (census_open.load(std::memory_order_relaxed)) [[unlikely]] count_rounding(v, h.bits, 0x7C00u);
  return h;
}
template <class C>
inline bfloat16 counted(bfloat16 h, C v) {
  if (census_open.load(std::memory_order_relaxed)) [[unlikely]] count_rounding(v, h.bits, 0x7F80u);
  return h;
}
}  // namespace detail

// Opens the census for its lifetime (RAII) and reads what was counted since it opened.
// Censuses do not nest: opening a second one while one is open throws.
class RoundingCensus {
 public:
  RoundingCensus();
  ~RoundingCensus();
  RoundingCensus(const RoundingCensus&) = delete;
  RoundingCensus& operator=(const RoundingCensus&) = delete;
  RoundingCounts counts() const;

  // For observers inside the measured code (autograd/telemetry.h): whether a census is open,
  // its counts so far, and how many censuses have been opened (to tell one from the next).
  static bool is_open();
  static RoundingCounts current();
  static uint64_t generation();
};

// a - b, field by field (counts taken from the same census, b earlier); a += b adds them.
RoundingCounts operator-(const RoundingCounts& a, const RoundingCounts& b);
RoundingCounts& operator+=(RoundingCounts& a, const RoundingCounts& b);

template <> inline half store<half, float>(float v) { return detail::counted(round_to_half(v), v); }
template <> inline bfloat16 store<bfloat16, float>(float v) { return detail::counted(round_to_bf16(v), v); }
// From double and int64 the value is rounded once, not through float (Note [Rounding f64 and i64
// to 16 bits] in half.h).
template <> inline half store<half, double>(double v) { return detail::counted(round_to_half_f64(v), v); }
template <> inline bfloat16 store<bfloat16, double>(double v) { return detail::counted(round_to_bf16_f64(v), v); }
template <> inline half store<half, int64_t>(int64_t v) { return round_to_half_i64(v); }
template <> inline bfloat16 store<bfloat16, int64_t>(int64_t v) { return round_to_bf16_i64(v); }

// Dispatch on a floating dtype: MT_DISPATCH_FLOAT(dtype, "op", [&]<class T>() { ... });
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
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
  return dispatch_float(t, op, std::forward<F>(f));
}

}  // namespace mixtape
