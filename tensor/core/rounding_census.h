// The rounding census: counts of what store<> rounds to 16 bits while a census is open
// (Note [Rounding census]). A telemetry concern with global counters, kept out of dtype.h, whose
// store<> specializations call detail::counted() below.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "tensor/core/half.h"

namespace mixtape {

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
  if (census_open.load(std::memory_order_relaxed)) [[unlikely]]
    count_rounding(v, h.bits, 0x7C00u);
  return h;
}
template <class C>
inline bfloat16 counted(bfloat16 h, C v) {
  if (census_open.load(std::memory_order_relaxed)) [[unlikely]]
    count_rounding(v, h.bits, 0x7F80u);
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

}  // namespace mixtape
