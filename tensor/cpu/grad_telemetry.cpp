#include "tensor/cpu/grad_telemetry.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// |x| rounded (RNE) to the 16-bit format, as the format's magnitude bits (sign dropped).
inline uint16_t round_magnitude(float v, DType format) {
  return uint16_t((format == DType::f16 ? round_to_half(v).bits : round_to_bf16(v).bits) & 0x7FFFu);
}
inline uint16_t round_magnitude(double v, DType format) {
  return uint16_t((format == DType::f16 ? round_to_half_f64(v).bits : round_to_bf16_f64(v).bits) & 0x7FFFu);
}

}  // namespace

void grad_telemetry(const Strided& x, DType format, int64_t hist_lo, const Strided& counts, const Strided& max_abs) {
  const int64_t nbins = counts.numel() - kTelemetryCounts;
  // Magnitude bit patterns of the format: the smallest normal and infinity.
  const uint16_t min_normal = format == DType::f16 ? 0x0400u : 0x0080u;
  const uint16_t inf = format == DType::f16 ? 0x7C00u : 0x7F80u;
  dispatch_floating(x.dtype(), "grad_telemetry", [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    int64_t nonzero = 0, underflow = 0, subnormal = 0, overflow = 0;
    std::vector<int64_t> hist(size_t(nbins), 0);
    C m = C(0);
    for_each_offset<1>(x.shape(), {x.strides()}, [&](const std::array<int64_t, 1>& o) {
      const C v = load(px[o[0]]);
      if (!std::isfinite(v)) {
        ++overflow;
        return;
      }
      if (v == C(0)) return;
      ++nonzero;
      const C a = std::abs(v);
      if (a > m) m = a;
      const uint16_t r = round_magnitude(v, format);
      if (r == 0) ++underflow;
      else if (r < min_normal) ++subnormal;
      else if (r >= inf) ++overflow;
      if (nbins > 0) {
        // floor(log2|v|), exact for subnormal inputs too.
        const int64_t e = std::ilogb(a);
        ++hist[size_t(std::clamp<int64_t>(e - hist_lo, 0, nbins - 1))];
      }
    });
    int64_t* pc = counts.data<int64_t>();
    pc[0] = nonzero;
    pc[1] = underflow;
    pc[2] = subnormal;
    pc[3] = overflow;
    std::copy(hist.begin(), hist.end(), pc + kTelemetryCounts);
    max_abs.data<C>()[0] = m;
  });
}

}  // namespace mixtape::cpu
