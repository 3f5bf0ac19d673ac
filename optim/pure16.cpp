#include "optim/pure16.h"

#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

#include "tensor/core/error.h"
#include "tensor/core/half.h"

namespace mixtape {

const char* update_rounding_name(UpdateRounding r) {
  switch (r) {
    case UpdateRounding::nearest: return "nearest";
    case UpdateRounding::stochastic: return "stochastic";
    case UpdateRounding::kahan: return "kahan";
  }
  return "?";
}

UpdateRounding update_rounding_from_name(const std::string& name) {
  if (name == "nearest") return UpdateRounding::nearest;
  if (name == "stochastic") return UpdateRounding::stochastic;
  if (name == "kahan") return UpdateRounding::kahan;
  throw Error(detail::cat("unknown update rounding '", name, "' (expected nearest, stochastic or kahan)"));
}

DecayRate16 decay_rate_16(double rate, DType format) {
  MT_CHECK(is_16bit(format), "decay_rate_16: format must be bf16 or f16, got ", dtype_name(format));
  const double r =
      format == DType::bf16 ? double(to_float(round_to_bf16_f64(rate))) : double(to_float(round_to_half_f64(rate)));
  if (rate < 1.0 && r >= 1.0) {
    // The largest value below 1: 1 - 2^-(p) with p = 8 (bf16) or 11 (f16) significand bits.
    return DecayRate16{1.0 - std::ldexp(1.0, format == DType::bf16 ? -8 : -11), true};
  }
  return DecayRate16{r, false};
}

void warn_once(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(msg).second) std::fprintf(stderr, "mixtape warning: %s\n", msg.c_str());
}

}  // namespace mixtape
