#include "tensor/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/core/dtype.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

// max that keeps NaN: the maximum of |values| with NaN winning over everything.
inline float nan_max(float m, float a) { return (a > m || a != a) && m == m ? a : m; }

int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }

}  // namespace

void block_amax(const Strided& x, int64_t br, int64_t bc, float* amax) {
  MT_ASSERT(x.dim() == 2 && br > 0 && bc > 0);
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbr = blocks_of(R, br), nbc = blocks_of(C, bc);
  // Each row's maximum per column block, then the maximum over each block's rows: a maximum is
  // the same in any order, so the split over the threads changes nothing.
  std::vector<float> rowmax(size_t(R * nbc), 0.0f);
  dispatch_floating(x.dtype(), "block_amax", [&]<class T>() {
    const T* p = static_cast<const T*>(x.raw_data());
    parallel_for(R, grain_for(C), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t cb = 0; cb < nbc; ++cb) {
          float m = 0.0f;
          for (int64_t c = cb * bc; c < std::min(C, (cb + 1) * bc); ++c)
            m = nan_max(m, std::fabs(float(load(p[r * rs + c * cs]))));
          rowmax[size_t(r * nbc + cb)] = m;
        }
    });
  });
  for (int64_t rb = 0; rb < nbr; ++rb)
    for (int64_t cb = 0; cb < nbc; ++cb) {
      float m = 0.0f;
      for (int64_t r = rb * br; r < std::min(R, (rb + 1) * br); ++r) m = nan_max(m, rowmax[size_t(r * nbc + cb)]);
      amax[rb * nbc + cb] = m;
    }
}

QuantCounts quantize_blocks(const Strided& x, int64_t br, int64_t bc, const float* s, const bits8::Format& format,
                            bits8::Overflow overflow, uint8_t* codes) {
  MT_ASSERT(x.dim() == 2 && br > 0 && bc > 0);
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbc = blocks_of(C, bc);
  const uint8_t exp_mask = uint8_t(((1u << format.exp_bits) - 1u) << format.man_bits);
  const uint8_t mag_mask = uint8_t((1u << (format.exp_bits + format.man_bits)) - 1u);
  std::vector<QuantCounts> per_row(static_cast<size_t>(R));
  dispatch_floating(x.dtype(), "quantize", [&]<class T>() {
    const T* p = static_cast<const T*>(x.raw_data());
    parallel_for(R, grain_for(C), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        QuantCounts n;
        const float* srow = s + (r / br) * nbc;
        uint8_t* out = codes + r * C;
        for (int64_t c = 0; c < C; ++c) {
          const float v = float(load(p[r * rs + c * cs]));
          const float scaled = v * srow[c / bc];
          const uint8_t q = bits8::from_float_rn(scaled, format, overflow);
          out[c] = q;
          if (!std::isfinite(v)) {
            ++n.nonfinite;
            continue;
          }
          n.amax = std::max(n.amax, std::fabs(v));
          if (bits8::rounds_past_max(scaled, format)) ++n.saturated;  // an inf product too
          const uint8_t mag = q & mag_mask;
          if (mag == 0 && v != 0.0f) ++n.flushed;
          else if (mag != 0 && (q & exp_mask) == 0) ++n.subnormal;
        }
        per_row[size_t(r)] = n;
      }
    });
  });
  QuantCounts total;
  for (const QuantCounts& n : per_row) {
    total.saturated += n.saturated;
    total.flushed += n.flushed;
    total.subnormal += n.subnormal;
    total.nonfinite += n.nonfinite;
    total.amax = std::max(total.amax, n.amax);
  }
  return total;
}

void scaled_gemm_epilogue(const float* c, int64_t M, int64_t N, const float* oa, const float* ob, const Strided& bias,
                          const Strided& y) {
  dispatch_floating(y.dtype(), "scaled_matmul", [&]<class T>() {
    T* out = static_cast<T*>(y.raw_data());
    std::vector<float> b(size_t(N), 0.0f);
    if (bias.defined())
      dispatch_floating(bias.dtype(), "scaled_matmul (bias)", [&]<class B>() {
        const B* bp = static_cast<const B*>(bias.raw_data());
        for (int64_t j = 0; j < N; ++j) b[size_t(j)] = float(load(bp[j * bias.strides()[0]]));
      });
    parallel_for(M, grain_for(N), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float fa = oa ? oa[i] : 1.0f;
        for (int64_t j = 0; j < N; ++j) {
          const float f = ob ? fa * ob[j] : fa;
          out[i * N + j] = store<T>(c[i * N + j] * f + b[size_t(j)]);
        }
      }
    });
  });
}

}  // namespace mixtape::cpu
