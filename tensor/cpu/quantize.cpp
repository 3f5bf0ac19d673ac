#include "tensor/cpu/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "tensor/core/dtype.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

// The maximum of |values| with NaN winning over everything.
inline float nan_max(float m, float a) { return (a > m || a != a) && m == m ? a : m; }

int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }

// amax[rb][cb] over the blocks of x: each row's maximum per column block, then the maximum over
// each block's rows. A maximum is the same in any order, so the split over the threads changes
// nothing.
std::vector<float> block_amax(const Strided& x, int64_t br, int64_t bc) {
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbr = blocks_of(R, br), nbc = blocks_of(C, bc);
  std::vector<float> rowmax(size_t(R * nbc), 0.0f);
  dispatch_floating(x.dtype(), "quantize", [&]<class T>() {
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
  std::vector<float> amax(size_t(nbr * nbc), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t cb = 0; cb < nbc; ++cb) {
      float& m = amax[size_t((r / br) * nbc + cb)];
      m = nan_max(m, rowmax[size_t(r * nbc + cb)]);
    }
  return amax;
}

// Calls f.template operator()<F>() with the Format constant of an 8-bit dtype.
template <class Fn>
void dispatch_8bit(DType t, Fn&& fn) {
  switch (t) {
    case DType::e4m3: return fn.template operator()<bits8::kE4M3>();
    case DType::e5m2: return fn.template operator()<bits8::kE5M2>();
    case DType::e3m2: return fn.template operator()<bits8::kE3M2>();
    case DType::e2m3: return fn.template operator()<bits8::kE2M3>();
    case DType::e2m1: return fn.template operator()<bits8::kE2M1>();
    default: MT_ASSERT(false, "quantize: ", dtype_name(t), " is not an 8-bit dtype");
  }
}

struct Counts {
  int64_t saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  float amax = 0.0f;  // over the finite elements
};

}  // namespace

void quantize(const Strided& x, const BlockQuant& q, const Strided& codes, const Strided& scale_inv,
              const Strided& stats) {
  MT_ASSERT(x.dim() == 2 && q.block_rows > 0 && q.block_cols > 0);
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbc = blocks_of(C, q.block_cols), br = q.block_rows, bc = q.block_cols;
  const bits8::Format& f = format_of(q.format);
  std::vector<float> s = block_amax(x, br, bc);
  for (float& v : s) v = scales::block_scale(q, f, v);  // amax -> s in place
  float* inv = static_cast<float*>(scale_inv.raw_data());
  for (size_t i = 0; i < s.size(); ++i) inv[i] = 1.0f / s[i];  // exact for a power of two
  std::vector<Counts> per_row(static_cast<size_t>(R));
  uint8_t* out = static_cast<uint8_t*>(codes.raw_data());
  // The element loop is compiled once per format, so that the rounding's shifts and masks are
  // constants.
  dispatch_8bit(q.format, [&]<const bits8::Format & F>() {
    constexpr uint32_t exp_mask = ((1u << F.exp_bits) - 1u) << F.man_bits, mag_mask = bits8::magnitude_mask(F);
    dispatch_floating(x.dtype(), "quantize", [&]<class T>() {
      const T* p = static_cast<const T*>(x.raw_data());
      parallel_for(R, grain_for(C), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          Counts n;
          const float* srow = s.data() + (r / br) * nbc;
          uint8_t* row = out + r * C;
          for (int64_t cb = 0; cb < nbc; ++cb) {
            const float sb = srow[cb];
            for (int64_t c = cb * bc; c < std::min(C, (cb + 1) * bc); ++c) {
              const float v = float(load(p[r * rs + c * cs]));
              const bits8::Rounded q8 = bits8::from_float_rn_checked(v * sb, F, q.overflow);
              row[c] = q8.code;
              if (!std::isfinite(v)) {
                ++n.nonfinite;
                continue;
              }
              n.amax = std::max(n.amax, std::fabs(v));
              n.saturated += q8.past_max;  // an inf product too
              const uint32_t mag = q8.code & mag_mask;
              n.flushed += mag == 0 && v != 0.0f;
              n.subnormal += mag != 0 && (q8.code & exp_mask) == 0;
            }
          }
          per_row[size_t(r)] = n;
        }
      });
    });
  });
  Counts t;
  for (const Counts& n : per_row) {
    t.saturated += n.saturated;
    t.flushed += n.flushed;
    t.subnormal += n.subnormal;
    t.nonfinite += n.nonfinite;
    t.amax = std::max(t.amax, n.amax);
  }
  int64_t* st = static_cast<int64_t*>(stats.raw_data());
  st[kStatCount] = R * C;
  st[kStatSaturated] = t.saturated;
  st[kStatFlushed] = t.flushed;
  st[kStatSubnormal] = t.subnormal;
  st[kStatNonfinite] = t.nonfinite;
  st[kStatAmaxBits] = std::bit_cast<uint32_t>(t.amax);
  const auto [lo, hi] = std::minmax_element(inv, inv + s.size());
  st[kStatScaleInvMinBits] = s.empty() ? 0 : std::bit_cast<uint32_t>(*lo);
  st[kStatScaleInvMaxBits] = s.empty() ? 0 : std::bit_cast<uint32_t>(*hi);
}

namespace {

// One operand of the 8-bit GEMM (codes [R, K], any strides) as GEMM operand A (as_b false: element (i, k)) or
// B = codes^T (element (k, j)): scales that change along K go into the operand's block scales,
// scales constant along K into `outer` (one factor per row of the codes).
GemmOperand gemm_operand(const Strided& codes, const Strided& scale_inv, int64_t br, int64_t bc, bool as_b,
                         std::vector<float>& outer) {
  const int64_t R = codes.shape()[0], K = codes.shape()[1], nbc = scale_inv.shape()[1];
  const float* inv = static_cast<const float*>(scale_inv.raw_data());
  // A: element (i, k) at codes[i][k]; B: element (k, j) at codes[j][k].
  const int64_t rs = codes.strides()[0], cs = codes.strides()[1];
  GemmOperand op = as_b ? GemmOperand{codes.dtype(), codes.raw_data(), cs, rs}
                        : GemmOperand{codes.dtype(), codes.raw_data(), rs, cs};
  outer.clear();
  if (bc >= K) {
    outer.resize(size_t(R));
    for (int64_t r = 0; r < R; ++r) outer[size_t(r)] = inv[r / br];
  } else {
    op.scales = as_b ? GemmScales{inv, bc, br, 1, nbc, 0, 0} : GemmScales{inv, br, bc, nbc, 1, 0, 0};
  }
  return op;
}

}  // namespace

void scaled_matmul_nt(const Strided& a, const Strided& a_scale_inv, int64_t a_br, int64_t a_bc, const Strided& b,
                      const Strided& b_scale_inv, int64_t b_br, int64_t b_bc, const Strided& bias, const Strided& y) {
  const int64_t M = a.shape()[0], N = b.shape()[0], K = a.shape()[1];
  std::vector<float> oa, ob;
  const GemmOperand A = gemm_operand(a, a_scale_inv, a_br, a_bc, false, oa);
  const GemmOperand B = gemm_operand(b, b_scale_inv, b_br, b_bc, true, ob);
  std::vector<float> c(size_t(M * N));
  gemm(GemmArith::dot_bf16, M, N, K, A, B, false, c.data(), N);
  std::vector<float> bv(size_t(N), 0.0f);
  if (bias.defined())
    dispatch_floating(bias.dtype(), "scaled_matmul_nt (bias)", [&]<class B>() {
      const B* bp = static_cast<const B*>(bias.raw_data());
      for (int64_t j = 0; j < N; ++j) bv[size_t(j)] = float(load(bp[j * bias.strides()[0]]));
    });
  dispatch_floating(y.dtype(), "scaled_matmul_nt", [&]<class T>() {
    T* out = static_cast<T*>(y.raw_data());
    parallel_for(M, grain_for(N), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float fa = oa.empty() ? 1.0f : oa[size_t(i)];
        for (int64_t j = 0; j < N; ++j) {
          const float f = ob.empty() ? fa : fa * ob[size_t(j)];
          out[i * N + j] = store<T>(c[size_t(i * N + j)] * f + bv[size_t(j)]);
        }
      }
    });
  });
}

}  // namespace mixtape::cpu
