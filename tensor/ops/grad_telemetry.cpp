#include "tensor/ops/grad_telemetry.h"

#include "cuda/backend.h"
#include "tensor/cpu/grad_telemetry.h"
#include "tensor/ops/common.h"

namespace mixtape {

GradTelemetry grad_telemetry(const Tensor& x, DType format, bool histogram, int64_t hist_lo, int64_t hist_hi) {
  const char* op = "grad_telemetry";
  ops::check_same(op, {&x});
  ops::check_floating(op, x);
  MT_CHECK(is_16bit(format), op, ": the target format must be f16 or bf16, got ", dtype_name(format));
  MT_CHECK(hist_lo <= hist_hi && hist_hi - hist_lo < 4096, op, ": exponent histogram range [", hist_lo, ", ", hist_hi,
           "] must be non-empty and hold at most 4096 bins");
  const int64_t nbins = histogram ? hist_hi - hist_lo + 1 : 0;
  // counts = [nonzero, underflow, subnormal, overflow, hist...]; max_abs in x's compute dtype.
  Tensor counts = empty({cpu::kTelemetryCounts + nbins}, DType::i64, x.device());
  Tensor max_abs = empty({1}, x.dtype() == DType::f64 ? DType::f64 : DType::f32, x.device());
  on_device(
      x.device(), [&] { cpu::grad_telemetry(x, format, hist_lo, counts, max_abs); },
      [&] { cuda::grad_telemetry(x, format, hist_lo, counts, max_abs); });

  const std::vector<int64_t> c = counts.values<int64_t>();
  GradTelemetry r;
  r.numel = x.numel();
  r.nonzero = c[0];
  r.underflow = c[1];
  r.subnormal = c[2];
  r.overflow = c[3];
  r.max_abs = max_abs.to_vector()[0];
  r.hist_lo = hist_lo;
  r.hist_hi = hist_hi;
  r.hist.assign(c.begin() + cpu::kTelemetryCounts, c.end());
  return r;
}

}  // namespace mixtape
