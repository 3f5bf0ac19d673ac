// Numerics: every kernel loads its operands into the compute type (float for f32/f16/bf16,
// double for f64), computes, and rounds once on store (dtype.h). For + - * / sqrt on 16-bit
// inputs this equals native 16-bit arithmetic bit for bit (fp32 has >= 2p+2 bits).
#include "tensor/cpu/elementwise.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/math.h"
#include "tensor/cpu/target_region.h"
#include "tensor/core/elementwise_formulas.h"

namespace mixtape::cpu {

// Each kernel walks its output in row pieces (loops.h), converts a chunk of each operand to the
// compute type (convert.h), applies the formula to the chunk, and rounds the chunk once.

namespace {

// Note [ReLU on bit patterns]
// relu and its gradient only select: relu(x) = x < 0 ? 0 : x is x or +0, its gradient
// x <= 0 ? 0 : dy is dy or +0. On f16 and bf16 the generic kernel widens, selects and rounds
// back, which gives the selected value's own bits, except that store<> writes every NaN as the
// canonical 0x7FFF; on f32 it selects in place, a comparison and a branch per element. These
// select on the bit patterns instead (integer operations the compiler vectorizes), with the NaN
// rule of the 16-bit stores: the same bits, and for 16 bits one pass over the data instead of
// three (test_elementwise.cpp compares both kernels on all 65,536 16-bit patterns and on f32
// specials and random bits). While a rounding census is open the generic kernel runs, so that
// its stores are counted (Note [Rounding census]).
template <class T>
struct ReluBits {
  using U = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint16_t>;
  static constexpr U kSign = U(U(1) << (8 * sizeof(U) - 1)), kMag = U(~kSign);
  static constexpr U kInf = std::is_same_v<T, float> ? U(0x7F800000) : std::is_same_v<T, half> ? U(0x7C00) : U(0x7F80);

  // The bits store<T> gives the value x selected (half.h's round trip for 16 bits).
  static U stored(U x) {
    if constexpr (std::is_same_v<T, half>) return bits16::round_trip_half_bits(x);
    else if constexpr (std::is_same_v<T, bfloat16>) return bits16::round_trip_bf16_bits(x);
    else return x;
  }
  static U relu(U x) {
    const U mag = U(x & kMag);
    return (x & kSign) && mag != 0 && mag <= kInf ? U(0) : stored(x);  // x < 0: +0
  }
  static U grad(U x, U dy) {
    const U mag = U(x & kMag);
    if (mag <= kInf && ((x & kSign) || mag == 0)) return U(0);  // x <= 0: +0
    return stored(dy);
  }
};

template <class T>
constexpr bool kSelectsBits = std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// Note [Vector leaky ReLU]
// leaky_relu and its gradient multiply by the slope that leaky_slope picks (x > 0 ? 1 : a), one
// multiply per element; the scalar form's table lookup keeps the compiler from vectorizing it.
// On the AVX-512 conversion path (avx512_path_active()) float rows run sixteen lanes at a time:
// the slope chosen by a compare mask (false for NaN, as the table's index is), then the same
// multiply, x * slope or dy * slope, so the same bits (test_elementwise.cpp compares the paths).
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f")
namespace avx512 {

inline __m512 slope16(__m512 x, __m512 a) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), a, _mm512_set1_ps(1.0f));
}

// v[i] * leaky_slope(x[i], a) for i < n.
void times_leaky_slope(const float* x, const float* v, float* out, int64_t n, float a) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = __mmask16(first_lanes(n - i, 16));
    const __m512 xs = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, v + i), slope16(xs, av)));
  }
}

}  // namespace avx512
MT_TARGET_END
#endif

// out[i] = v[i] * leaky_slope(x[i], a): the forward (v = x) and the gradient (v = dy).
template <class C>
void times_leaky_slope(const C* x, const C* v, C* out, int64_t n, C a) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<C, float>)
    if (avx512_path_active()) return avx512::times_leaky_slope(x, v, out, n, a);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = v[i] * leaky_slope(x[i], a);
}

}  // namespace

void unary(UnaryOp op, const Strided& x, const Strided& out, double a, double b) {
  dispatch_floating(x.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const C ca = C(a), cb = C(b);
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      if constexpr (OP == UnaryOp::relu && kSelectsBits<T>) {
        if (!RoundingCensus::is_open()) {  // Note [ReLU on bit patterns]
          using B = ReluBits<T>;
          using U = typename B::U;
          parallel_for_each_row<2>(out.shape(), {out.strides(), x.strides()}, [&](const RowPiece<2>& r) {
            const U* xs = reinterpret_cast<const U*>(px) + r.at[1];
            U* os = reinterpret_cast<U*>(po) + r.at[0];
            if (r.step[0] == 1 && r.step[1] == 1) {
              for (int64_t i = 0; i < r.len; ++i) os[i] = B::relu(xs[i]);
            } else {
              for (int64_t i = 0; i < r.len; ++i) os[i * r.step[0]] = B::relu(xs[i * r.step[1]]);
            }
          });
          return;
        }
      }
      parallel_for_each_row<2>(out.shape(), {out.strides(), x.strides()}, [&](const RowPiece<2>& r) {
        for_chunks(r.len, [&](int64_t j, int64_t n) {
          C xb[kRowChunk], yb[kRowChunk];
          const C* xv = load_row(px + r.at[1] + j * r.step[1], r.step[1], n, xb);
          T* pout = po + r.at[0] + j * r.step[0];
          C* yv = out_row(pout, r.step[0], yb);
          if constexpr (OP == UnaryOp::leaky_relu) {  // Note [Vector leaky ReLU]
            times_leaky_slope(xv, xv, yv, n, ca);
          } else {
            for (int64_t i = 0; i < n; ++i) yv[i] = formulas::unary_forward<OP, HostMath>(xv[i], ca, cb);
          }
          store_row(yv, pout, r.step[0], n);
        });
      });
    });
  });
}

void unary_backward(UnaryOp op, const Strided& x, const Strided& y, const Strided& dy, const Strided& dx, double a,
                    double b) {
  dispatch_floating(dx.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    const C ca = C(a), cb = C(b);
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      if constexpr (OP == UnaryOp::relu && kSelectsBits<T>) {
        if (!RoundingCensus::is_open()) {  // Note [ReLU on bit patterns]
          using B = ReluBits<T>;
          using U = typename B::U;
          parallel_for_each_row<3>(dx.shape(), {dx.strides(), x.strides(), dy.strides()}, [&](const RowPiece<3>& r) {
            const U* xs = reinterpret_cast<const U*>(px) + r.at[1];
            const U* gs = reinterpret_cast<const U*>(pdy) + r.at[2];
            U* ds = reinterpret_cast<U*>(pdx) + r.at[0];
            if (r.step[0] == 1 && r.step[1] == 1 && r.step[2] == 1) {
              for (int64_t i = 0; i < r.len; ++i) ds[i] = B::grad(xs[i], gs[i]);
            } else {
              for (int64_t i = 0; i < r.len; ++i) ds[i * r.step[0]] = B::grad(xs[i * r.step[1]], gs[i * r.step[2]]);
            }
          });
          return;
        }
      }
      parallel_for_each_row<4>(dx.shape(), {dx.strides(), x.strides(), y.strides(), dy.strides()},
                               [&](const RowPiece<4>& r) {
        for_chunks(r.len, [&](int64_t j, int64_t n) {
          // Only the operands the formula reads are loaded (the others are passed as 0).
          constexpr bool kx = formulas::backward_reads_x<OP>, ky = formulas::backward_reads_y<OP>;
          C xb[kRowChunk], yb[kRowChunk], gb[kRowChunk], db[kRowChunk];
          const C* xv = kx ? load_row(px + r.at[1] + j * r.step[1], r.step[1], n, xb) : nullptr;
          const C* yv = ky ? load_row(py + r.at[2] + j * r.step[2], r.step[2], n, yb) : nullptr;
          const C* gv = load_row(pdy + r.at[3] + j * r.step[3], r.step[3], n, gb);
          T* pout = pdx + r.at[0] + j * r.step[0];
          C* dv = out_row(pout, r.step[0], db);
          if constexpr (OP == UnaryOp::leaky_relu) {  // Note [Vector leaky ReLU]
            times_leaky_slope(xv, gv, dv, n, ca);
          } else {
            for (int64_t i = 0; i < n; ++i)
              dv[i] = formulas::unary_backward<OP, HostMath>(kx ? xv[i] : C(0), ky ? yv[i] : C(0), gv[i], ca, cb);
          }
          store_row(dv, pout, r.step[0], n);
        });
      });
    });
  });
}

void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& out) {
  dispatch_floating(out.dtype(), binary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    formulas::dispatch_binary(op, [&]<BinaryOp OP>() {
      parallel_for_each_row<3>(out.shape(),
                               {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())},
                               [&](const RowPiece<3>& r) {
        for_chunks(r.len, [&](int64_t j, int64_t n) {
          C ab[kRowChunk], bb[kRowChunk], ob[kRowChunk];
          const C* av = load_row(pa + r.at[1] + j * r.step[1], r.step[1], n, ab);
          const C* bv = load_row(pb + r.at[2] + j * r.step[2], r.step[2], n, bb);
          T* pout = po + r.at[0] + j * r.step[0];
          C* ov = out_row(pout, r.step[0], ob);
          for (int64_t i = 0; i < n; ++i) ov[i] = formulas::binary<OP>(av[i], bv[i]);
          store_row(ov, pout, r.step[0], n);
        });
      });
    });
  });
}

}  // namespace mixtape::cpu
