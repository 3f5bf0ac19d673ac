// Fused optimizer updates: one strided pass per parameter. The update rules are documented in
// tensor/ops/optim.h, and their arithmetic is tensor/core/update_formulas.h, shared with
// cuda/optim.cu: this file loads, calls the formulas and stores.
//
// Note [Update kernel dtypes]
// Each kernel is a template over the parameter's storage type P and the state's storage type
// S, and computes in C = compute_t<P> (float for f32 and 16-bit storage, double for f64). The
// gradient arrives unscaled in C. Values are loaded with load<>, updated in C, and written once
// with store<> (dtype.h, the single rounding point). dispatch_update lists the (P, S) pairs a
// kernel accepts: today (f32, f32), the fp32 parameters and fp32 master weights of mixed
// precision, and (f64, f64) for the reference tests. Pure 16-bit training (bf16 or f16 params
// and state) rounds the update differently (stochastically, or with a Kahan compensation
// buffer), so those rules are separate kernels below (Note [16-bit update rules]). The fp32
// kernels take a third type, Q, for the optional 16-bit copy of a master weight that the same
// pass writes (half, bfloat16, or NoCopy; Note [Fused master copy] in tensor/ops/optim.h).
//
// Note [16-bit update rules]
// sgd16_update and adamw16_update implement Zamirai et al.'s Algorithms 2-5 for weights and
// state stored in bf16 (or f16). The paper rounds every operator output to bf16 (a simulated
// 16-bit unit); these kernels are fused: each element is loaded, computed in fp32, and the
// values that the algorithm keeps in memory are rounded once when stored. Those stores are the
// only rounding points, each a call of the device's D::nearest or D::stochastic in
// update_formulas.h, which on the CPU are the host conversions round_to_* (HostUpdate below):
//   state (m, v)           round_to_bf16 / round_to_half (nearest), and the update then reads
//                          the state back as stored, as the algorithm's next line would
//   the weight w + u       nearest, or round_to_*_stochastic with the element's rounding word
//                          rounding_word(seed, offset + i), i its row-major index (Note
//                          [Rounding words] in rng.h); the kernels draw the words of up to
//                          kRowChunk elements of a row at once on the conversion path's vector
//                          Philox (rounding_words_n, 64 or 128 words per call of the AVX2 or
//                          AVX-512 code) and then update the elements one by one with them
//                          (for_each_update16), so the bits are those of the scalar draw on
//                          every path and thread count
//   Kahan's s and c        nearest: y = u - c and (s - w) - y are fp32 values, s and c are stored
// Consequences of fusing: intermediates (g + d w, the Adam ratio, y) carry fp32 precision where
// the paper's simulator rounded them to bf16, so our "nearest" baseline is, if anything, kinder
// than the paper's standard algorithm; an update below 2^-24 |w| already vanishes in the fp32
// sum w + u before stochastic rounding sees it (stochastic rounding would move such a weight
// with probability < 2^-16); and s - w is exact (Sterbenz), so Kahan's c holds the rounding
// error of s up to the one rounding of c itself. That rounding is Kahan's limit in 16 bits: c
// keeps 8 significant bits in bf16 (11 in f16) and |c| reaches ulp(w)/2, so an update smaller
// than ulp(c)/2, about ulp(w) * 2^-9 in bf16, stalls in c as it stalls in w under nearest
// rounding, and each rounding of c costs up to ulp(c)/2 of the running sum (test_pure16.cpp
// prints both regimes).
#include "tensor/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/core/rounding_census.h"
#include "tensor/core/update_formulas.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/target_region.h"

namespace mixtape::cpu {

namespace {

// The updates below are elementwise (each call reads and writes only its own element, and a
// random word is indexed by the element's row-major index), so they split over the threads
// without changing a bit (Note [Deterministic threads]). An element costs about as much as eight
// simple ones (a square root, a division, a Philox draw in stochastic rounding).
constexpr int64_t kUpdateGrain = kGrainElements / 8;

template <class F>
void dispatch_update(const char* op, DType param, DType state, F&& f) {
  if (param == DType::f32 && state == DType::f32) return f.template operator()<float, float>();
  if (param == DType::f64 && state == DType::f64) return f.template operator()<double, double>();
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(param), " parameters with ", dtype_name(state), " state"));
}

// The rounded 16-bit copy of an f32 master (Note [Fused master copy] in tensor/ops/optim.h):
// f.template operator()<Q>() with Q = half or bfloat16, or NoCopy when there is none.
struct NoCopy {};

template <class F>
void dispatch_copy(const Strided& copy, F&& f) {
  if (!copy.defined()) return f.template operator()<NoCopy>();
  if (copy.dtype() == DType::f16) return f.template operator()<half>();
  if (copy.dtype() == DType::bf16) return f.template operator()<bfloat16>();
  throw Error(detail::cat("rounded copy: ", copy.meta(), " is not bf16 or f16"));
}

// The copy's element pointer and strides; without a copy, the param's strides (never written).
template <class Q>
Q* copy_data(const Strided& copy) {
  if constexpr (std::is_same_v<Q, NoCopy>) return nullptr;
  else return static_cast<Q*>(copy.raw_data());
}

inline const Shape& copy_strides(const Strided& copy, const Strided& param) {
  return copy.defined() ? copy.strides() : param.strides();
}

// Stores the new master value v into the copy, rounded to nearest even.
template <class Q, class C>
inline void write_copy(Q* q, int64_t offset, C v) {
  if constexpr (!std::is_same_v<Q, NoCopy>) q[offset] = store<Q>(v);
}

// The CPU's side of the shared update formulas (tensor/core/update_formulas.h): its square root,
// and for the 16-bit rules (P = half or bfloat16) its loads and its roundings, the host
// conversions round_to_* (which the rounding census does not count: the updates write weights
// and optimizer state, not op outputs).
template <class P>
struct HostUpdate {
  static float sqrt(float x) { return std::sqrt(x); }
  static double sqrt(double x) { return std::sqrt(x); }
  static float load(P v) { return mixtape::load(v); }
  static P nearest(float v) {
    if constexpr (std::is_same_v<P, half>) return round_to_half(v);
    else return round_to_bf16(v);
  }
  static P stochastic(float v, uint32_t r) {
    if constexpr (std::is_same_v<P, half>) return round_to_half_stochastic(v, r);
    else return round_to_bf16_stochastic(v, r);
  }
};

// Note [Vector Adam]
// On the AVX-512 conversion path (avx512_path_active()) the f32 Adam / AdamW update (not
// AMSGrad) runs sixteen elements at a time over rows whose operands are all contiguous: the
// operations of formulas::adam in their order, each an IEEE single-precision operation (vsqrtps
// and vdivps round as std::sqrt and / do, and nothing is fused), so every bit is the scalar
// code's (test_optim_kernels.cpp compares the paths). The 16-bit master copy is written from a
// row buffer with store_n.
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f")
namespace avx512 {

// f(i, mask) for the vectors of sixteen elements of [0, n), the last one partial.
template <class F>
inline void by16(int64_t n, F&& f) {
  for (int64_t i = 0; i < n; i += 16) f(i, __mmask16(first_lanes(n - i, 16)));
}

// formulas::adam on n contiguous elements; next (may be null) receives the new parameters.
void adam_row(float* p, const float* g, float* m, float* v, int64_t n, const formulas::AdamConsts<float>& k,
              float* next) {
  const __m512 wd = _mm512_set1_ps(k.wd), shrink = _mm512_set1_ps(k.shrink), w1 = _mm512_set1_ps(k.w1);
  const __m512 one_minus_w1 = _mm512_set1_ps(1.0f - k.w1), b2 = _mm512_set1_ps(k.b2), w2 = _mm512_set1_ps(k.w2);
  const __m512 b2s = _mm512_set1_ps(k.bias2_sqrt), eps = _mm512_set1_ps(k.eps), nss = _mm512_set1_ps(k.neg_step_size);
  const bool near_start = k.w1 < 0.5f;  // formulas::lerp's choice of end
  by16(n, [&](int64_t i, __mmask16 u) {
    __m512 pv = _mm512_maskz_loadu_ps(u, p + i), d = _mm512_maskz_loadu_ps(u, g + i);
    __m512 mv = _mm512_maskz_loadu_ps(u, m + i), vv = _mm512_maskz_loadu_ps(u, v + i);
    if (k.l2) d = _mm512_add_ps(d, _mm512_mul_ps(wd, pv));
    if (k.shrink_w) pv = _mm512_mul_ps(pv, shrink);
    const __m512 diff = _mm512_sub_ps(d, mv);
    mv = near_start ? _mm512_add_ps(mv, _mm512_mul_ps(w1, diff)) : _mm512_sub_ps(d, _mm512_mul_ps(diff, one_minus_w1));
    vv = _mm512_add_ps(_mm512_mul_ps(b2, vv), _mm512_mul_ps(w2, _mm512_mul_ps(d, d)));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), b2s), eps);
    pv = _mm512_add_ps(pv, _mm512_mul_ps(nss, _mm512_div_ps(mv, denom)));
    _mm512_mask_storeu_ps(m + i, u, mv);
    _mm512_mask_storeu_ps(v + i, u, vv);
    _mm512_mask_storeu_ps(p + i, u, pv);
    if (next) _mm512_mask_storeu_ps(next + i, u, pv);
  });
}

}  // namespace avx512
MT_TARGET_END
#endif

}  // namespace

void sgd_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, const Strided& rounded_copy) {
  const DType state_dtype = momentum != 0.0 ? momentum_buf.dtype() : param.dtype();
  dispatch_update("sgd_update", param.dtype(), state_dtype, [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
      using C = compute_t<P>;
      const formulas::SgdConsts<C> k = formulas::sgd_consts<C>(lr, momentum, dampening, weight_decay, nesterov, step);
      P* p = param.data<P>();
      const C* g = grad.data<C>();
      Q* q = copy_data<Q>(rounded_copy);
      const Shape& q_strides = copy_strides(rounded_copy, param);
      if (momentum == 0.0) {
        parallel_for_each_offset<3>(
            param.shape(), {param.strides(), grad.strides(), q_strides},
            [&](const std::array<int64_t, 3>& o) {
          const C next = formulas::sgd(C(load(p[o[0]])), g[o[1]], k);
          p[o[0]] = store<P>(next);
          write_copy(q, o[2], next);
            },
            kUpdateGrain);
        return;
      }
      S* b = momentum_buf.data<S>();
      parallel_for_each_offset<4>(
          param.shape(), {param.strides(), grad.strides(), momentum_buf.strides(), q_strides},
          [&](const std::array<int64_t, 4>& o) {
        const C prev = k.first ? C(0) : C(load(b[o[2]]));  // not read at step 1
        C buf;
        const C next = formulas::sgd_momentum(C(load(p[o[0]])), g[o[1]], prev, k, buf);
        b[o[2]] = store<S>(buf);
        p[o[0]] = store<P>(next);
        write_copy(q, o[3], next);
          },
          kUpdateGrain);
    });
  });
}

void adam_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                 const Strided& max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
                 bool decoupled, int64_t step, const Strided& rounded_copy) {
  const char* op = decoupled ? "adamw_update" : "adam_update";
  dispatch_update(op, param.dtype(), exp_avg.dtype(), [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
      using C = compute_t<P>;
      const formulas::AdamConsts<C> k = formulas::adam_consts<C>(lr, beta1, beta2, eps, weight_decay, decoupled, step);
      P* p = param.data<P>();
      const C* g = grad.data<C>();
      S* m = exp_avg.data<S>();
      S* v = exp_avg_sq.data<S>();
      Q* q = copy_data<Q>(rounded_copy);
      if (max_exp_avg_sq.defined()) {  // amsgrad
        S* vm = max_exp_avg_sq.data<S>();
        parallel_for_each_offset<6>(
            param.shape(),
            {param.strides(), grad.strides(), exp_avg.strides(), exp_avg_sq.strides(), max_exp_avg_sq.strides(),
             copy_strides(rounded_copy, param)},
            [&](const std::array<int64_t, 6>& o) {
          C mv = load(m[o[2]]), vv = load(v[o[3]]), vmax = load(vm[o[4]]);
          const C next = formulas::adam_amsgrad<HostUpdate<P>>(C(load(p[o[0]])), g[o[1]], mv, vv, vmax, k);
          m[o[2]] = store<S>(mv);
          v[o[3]] = store<S>(vv);
          vm[o[4]] = store<S>(vmax);
          p[o[0]] = store<P>(next);
          write_copy(q, o[5], next);
            },
            kUpdateGrain);
        return;
      }
      const auto element = [&](const std::array<int64_t, 5>& o) {
        C mv = load(m[o[2]]), vv = load(v[o[3]]);
        const C next = formulas::adam<HostUpdate<P>>(C(load(p[o[0]])), g[o[1]], mv, vv, k);
        m[o[2]] = store<S>(mv);
        v[o[3]] = store<S>(vv);
        p[o[0]] = store<P>(next);
        write_copy(q, o[4], next);
      };
      const std::array<Shape, 5> strides = {param.strides(), grad.strides(), exp_avg.strides(), exp_avg_sq.strides(),
                                            copy_strides(rounded_copy, param)};
#if defined(__x86_64__)
      if constexpr (std::is_same_v<P, float> && std::is_same_v<S, float>) {
        if (avx512_path_active()) {  // Note [Vector Adam]
          const auto row = [&](const RowPiece<5>& r) {
            if (r.step != std::array<int64_t, 5>{1, 1, 1, 1, 1}) {
              std::array<int64_t, 5> o = r.at;
              for (int64_t i = 0; i < r.len; ++i) {
                element(o);
                for (size_t t = 0; t < o.size(); ++t) o[t] += r.step[t];
              }
              return;
            }
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              float next[kRowChunk];
              constexpr bool kCopy = !std::is_same_v<Q, NoCopy>;
              avx512::adam_row(p + r.at[0] + j, g + r.at[1] + j, m + r.at[2] + j, v + r.at[3] + j, len, k,
                               kCopy ? next : nullptr);
              if constexpr (kCopy) store_n(next, q + r.at[4] + j, len);
            });
          };
          parallel_for_each_row<5>(param.shape(), strides, row, kUpdateGrain);
          return;
        }
      }
#endif
      parallel_for_each_offset<5>(param.shape(), strides, element, kUpdateGrain);
    });
  });
}

void rmsprop_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                    const Strided& momentum_buf, double lr, double alpha, double eps, double weight_decay,
                    double momentum, bool centered, const Strided& rounded_copy) {
  dispatch_update("rmsprop_update", param.dtype(), square_avg.dtype(), [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
      using C = compute_t<P>;
      const formulas::RmspropConsts<C> k =
          formulas::rmsprop_consts<C>(lr, alpha, eps, weight_decay, momentum, centered);
      // Absent buffers alias the square average's layout and are neither read nor written.
      const Strided& at = k.centered ? grad_avg : square_avg;
      const Strided& bt = k.use_mom ? momentum_buf : square_avg;
      P* p = param.data<P>();
      const C* g = grad.data<C>();
      S* sq = square_avg.data<S>();
      S* ga = at.data<S>();
      S* b = bt.data<S>();
      Q* q = copy_data<Q>(rounded_copy);
      parallel_for_each_offset<6>(
          param.shape(),
          {param.strides(), grad.strides(), square_avg.strides(), at.strides(), bt.strides(),
           copy_strides(rounded_copy, param)},
          [&](const std::array<int64_t, 6>& o) {
        C sv = load(sq[o[2]]);
        C gv = k.centered ? C(load(ga[o[3]])) : C(0);
        C bv = k.use_mom ? C(load(b[o[4]])) : C(0);
        const C next = formulas::rmsprop<HostUpdate<P>>(C(load(p[o[0]])), g[o[1]], sv, gv, bv, k);
        sq[o[2]] = store<S>(sv);
        if (k.centered) ga[o[3]] = store<S>(gv);
        if (k.use_mom) b[o[4]] = store<S>(bv);
        p[o[0]] = store<P>(next);
        write_copy(q, o[5], next);
          },
          kUpdateGrain);
    });
  });
}

void adagrad_update(const Strided& param, const Strided& grad, const Strided& sum, double lr, double lr_decay,
                    double eps, double weight_decay, int64_t step, const Strided& rounded_copy) {
  dispatch_update("adagrad_update", param.dtype(), sum.dtype(), [&]<class P, class S>() {
    dispatch_copy(rounded_copy, [&]<class Q>() {
      using C = compute_t<P>;
      const formulas::AdagradConsts<C> k = formulas::adagrad_consts<C>(lr, lr_decay, eps, weight_decay, step);
      P* p = param.data<P>();
      const C* g = grad.data<C>();
      S* s = sum.data<S>();
      Q* q = copy_data<Q>(rounded_copy);
      parallel_for_each_offset<4>(
          param.shape(), {param.strides(), grad.strides(), sum.strides(), copy_strides(rounded_copy, param)},
          [&](const std::array<int64_t, 4>& o) {
        C sv = load(s[o[2]]);
        const C next = formulas::adagrad<HostUpdate<P>>(C(load(p[o[0]])), g[o[1]], sv, k);
        s[o[2]] = store<S>(sv);
        p[o[0]] = store<P>(next);
        write_copy(q, o[3], next);
          },
          kUpdateGrain);
    });
  });
}

// ---- gradient statistics -------------------------------------------------------------------

void grad_stats(const Strided& g, const Strided& out) {
  dispatch_floating(g.dtype(), "grad_stats", [&]<class T>() {
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(g.raw_data());
    bool bad = false;
    C m = C(0);
    const auto see = [](bool& b, C& mm, C v) {
      if (!std::isfinite(v)) b = true;
      else if (v > mm) mm = v;
    };
    const int64_t n = g.numel();
    if (g.is_contiguous() && n >= 2 * kGrainElements) {
      // Whether any value is inf or NaN, and the largest finite |g|: the same for any split of the
      // elements, so contiguous gradients are split over the threads in fixed pieces.
      const auto part = piece_results<std::pair<bool, C>>(n, [&](int64_t begin, int64_t end) {
        std::pair<bool, C> r{false, C(0)};
        for (int64_t i = begin; i < end; ++i) see(r.first, r.second, std::abs(C(load(pg[i]))));
        return r;
      });
      for (const auto& [b, mm] : part) {
        bad = bad || b;
        m = std::max(m, mm);
      }
    } else {
      for_each_offset<1>(g.shape(), {g.strides()},
                         [&](const std::array<int64_t, 1>& o) { see(bad, m, std::abs(C(load(pg[o[0]])))); });
    }
    C* po = out.data<C>();
    po[0] = bad ? C(1) : C(0);
    po[1] = m;
  });
}

// ---- 16-bit update rules (Note [16-bit update rules]) ---------------------------------------

namespace {

template <class F>
void dispatch_16bit(const char* op, DType t, F&& f) {
  if (t == DType::bf16) return f.template operator()<bfloat16>();
  if (t == DType::f16) return f.template operator()<half>();
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(t), " parameters (need bf16 or f16)"));
}

// Visits the elements of a 16-bit update as parallel_for_each_offset does, calling f(offsets, r)
// with the element's random word r (formulas::weight_word). Under stochastic rounding each row
// piece is taken in chunks of up to kRowChunk elements: the chunk's words are drawn first, on the
// conversion path's vector Philox (rounding_words_n: the words offset + i for the chunk's
// row-major indices i), then its elements are updated one by one. Under the other rules
// r is 0 and never read.
template <size_t N, class K, class F>
void for_each_update16(const Shape& shape, const std::array<Shape, N>& strides, const K& k, F&& f) {
  if (k.rule != formulas::WeightRule::stochastic) {
    parallel_for_each_offset<N>(
        shape, strides, [&](const std::array<int64_t, N>& o) { f(o, 0u); }, kUpdateGrain);
    return;
  }
  parallel_for_each_row<N>(
      shape, strides,
      [&](const RowPiece<N>& row) {
    uint32_t words[kRowChunk];
    std::array<int64_t, N> o = row.at;
    for_chunks(row.len, [&](int64_t j, int64_t n) {
      rounding_words_n(k.seed, k.offset + uint64_t(row.first + j), words, n);
      for (int64_t e = 0; e < n; ++e) {
        f(o, words[e]);
        for (size_t d = 0; d < N; ++d) o[d] += row.step[d];
      }
    });
      },
      kUpdateGrain);
}

// Note [Vector AdamW16]
// On the AVX-512 conversion path, adamw16_update (not AMSGrad) takes contiguous rows a chunk at
// a time: the chunk's weights and moments are widened into buffers (load_n), formulas::adamw16's
// fp32 arithmetic runs sixteen lanes at a time in its order of operations (each an IEEE single
// operation, nothing fused), and each value the algorithm keeps is rounded as it is stored by the
// conversion path's store_n (nearest) or store_stochastic_n (the element's word rounding_word(
// seed, offset + i)), then read back as stored where the algorithm reads it (the moments, and
// Kahan's s). Those conversions give the bits of round_to_* element by element (Note [Vector
// conversions] in convert.cpp), so the update is the scalar one's bit for bit
// (test_pure16.cpp compares the paths). While a rounding census is open the scalar code runs, so
// that nothing new is counted (Note [Rounding census]).
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f")
namespace avx512 {

inline __m512 neg(__m512 x) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u))));
}

// Algorithm 4 lines 5-6 before their rounding: m = b1 m + w1 g, v = b2 v + w2 (g g), in place.
void adamw16_moments(float* m, float* v, const float* g, int64_t n, const formulas::AdamW16Consts& k) {
  const __m512 b1 = _mm512_set1_ps(k.b1), w1 = _mm512_set1_ps(k.w1), b2 = _mm512_set1_ps(k.b2),
               w2 = _mm512_set1_ps(k.w2);
  by16(n, [&](int64_t i, __mmask16 u) {
    const __m512 gv = _mm512_maskz_loadu_ps(u, g + i);
    const __m512 mv = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(u, m + i)), _mm512_mul_ps(w1, gv));
    const __m512 vv =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(u, v + i)), _mm512_mul_ps(w2, _mm512_mul_ps(gv, gv)));
    _mm512_mask_storeu_ps(m + i, u, mv);
    _mm512_mask_storeu_ps(v + i, u, vv);
  });
}

// Lines 9-11 from the stored moments: u = -(lr (m / bias1) / (sqrt(v / bias2) + eps) + lr_wd w),
// into u.
void adamw16_step(const float* m, const float* v, const float* w, float* u, int64_t n,
                  const formulas::AdamW16Consts& k) {
  const __m512 bias1 = _mm512_set1_ps(k.bias1), bias2 = _mm512_set1_ps(k.bias2), lr = _mm512_set1_ps(k.lr),
               eps = _mm512_set1_ps(k.eps), lr_wd = _mm512_set1_ps(k.lr_wd);
  by16(n, [&](int64_t i, __mmask16 e) {
    const __m512 m_hat = _mm512_div_ps(_mm512_maskz_loadu_ps(e, m + i), bias1);
    const __m512 v_hat = _mm512_sqrt_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(e, v + i), bias2));
    const __m512 ratio = _mm512_div_ps(_mm512_mul_ps(lr, m_hat), _mm512_add_ps(v_hat, eps));
    _mm512_mask_storeu_ps(u + i, e, neg(_mm512_add_ps(ratio, _mm512_mul_ps(lr_wd, _mm512_maskz_loadu_ps(e, w + i)))));
  });
}

// out = a + b, or a - b.
void add(const float* a, const float* b, float* out, int64_t n) {
  by16(n, [&](int64_t i, __mmask16 e) {
    _mm512_mask_storeu_ps(out + i, e, _mm512_add_ps(_mm512_maskz_loadu_ps(e, a + i), _mm512_maskz_loadu_ps(e, b + i)));
  });
}
void sub(const float* a, const float* b, float* out, int64_t n) {
  by16(n, [&](int64_t i, __mmask16 e) {
    _mm512_mask_storeu_ps(out + i, e, _mm512_sub_ps(_mm512_maskz_loadu_ps(e, a + i), _mm512_maskz_loadu_ps(e, b + i)));
  });
}

}  // namespace avx512
MT_TARGET_END

// formulas::adamw16 (not AMSGrad) on n contiguous elements whose first has row-major index
// `first`: Note [Vector AdamW16].
template <class P>
void adamw16_chunk(P* p, const float* g, P* m, P* v, P* c, int64_t n, int64_t first, const formulas::AdamW16Consts& k) {
  float w[kRowChunk], mb[kRowChunk], vb[kRowChunk], u[kRowChunk], t[kRowChunk];
  load_n(p, w, n);
  load_n(m, mb, n);
  load_n(v, vb, n);
  avx512::adamw16_moments(mb, vb, g, n, k);
  store_n(mb, m, n);  // lines 5-6: rounded to nearest, read back as stored
  store_n(vb, v, n);
  load_n(m, mb, n);
  load_n(v, vb, n);
  avx512::adamw16_step(mb, vb, w, u, n, k);
  switch (k.rule) {  // formulas::write_weight
    case formulas::WeightRule::nearest:
      avx512::add(w, u, t, n);
      store_n(t, p, n);
      return;
    case formulas::WeightRule::stochastic:
      avx512::add(w, u, t, n);
      store_stochastic_n(t, p, n, k.seed, k.offset + uint64_t(first));
      return;
    case formulas::WeightRule::kahan: {
      float y[kRowChunk];
      load_n(c, t, n);
      avx512::sub(u, t, y, n);  // y = u - c
      avx512::add(w, y, t, n);  // s = nearest(w + y)
      store_n(t, p, n);
      load_n(p, t, n);
      avx512::sub(t, w, t, n);  // c = nearest((s - w) - y)
      avx512::sub(t, y, t, n);
      store_n(t, c, n);
      return;
    }
  }
}
#endif

}  // namespace

void sgd16_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, const Strided& kahan_comp,
                  double lr, double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset) {
  dispatch_16bit("sgd16_update", param.dtype(), [&]<class P>() {
    const formulas::Sgd16Consts k = formulas::sgd16_consts(
        lr, momentum, weight_decay, formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Strided& mt = k.use_mom ? momentum_buf : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    P* m = mt.data<P>();
    P* c = ct.data<P>();
    for_each_update16<4>(param.shape(), {param.strides(), grad.strides(), mt.strides(), ct.strides()}, k,
                         [&](const std::array<int64_t, 4>& o, uint32_t r) {
      formulas::sgd16<HostUpdate<P>>(p + o[0], g[o[1]], m + o[2], c + o[3], r, k);
    });
  });
}

void adamw16_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                    const Strided& max_exp_avg_sq, const Strided& kahan_comp, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step, Rounding rounding, uint64_t seed, uint64_t offset) {
  dispatch_16bit("adamw16_update", param.dtype(), [&]<class P>() {
    const formulas::AdamW16Consts k = formulas::adamw16_consts(lr, beta1, beta2, eps, weight_decay, step,
                                                               formulas::weight_rule(rounding, kahan_comp.defined()),
                                                               seed, offset, max_exp_avg_sq.defined());
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    P* m = exp_avg.data<P>();
    P* v = exp_avg_sq.data<P>();
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Strided& xt = k.amsgrad ? max_exp_avg_sq : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    P* vm = xt.data<P>();
    P* c = ct.data<P>();
    const std::array<Shape, 6> strides = {param.strides(),      grad.strides(), exp_avg.strides(),
                                          exp_avg_sq.strides(), xt.strides(),   ct.strides()};
#if defined(__x86_64__)
    if (!k.amsgrad && avx512_path_active() && !RoundingCensus::is_open()) {  // Note [Vector AdamW16]
      const auto row = [&](const RowPiece<6>& r) {
        const bool contiguous = r.step[0] == 1 && r.step[1] == 1 && r.step[2] == 1 && r.step[3] == 1 &&
                                (k.rule != formulas::WeightRule::kahan || r.step[5] == 1);
        for_chunks(r.len, [&](int64_t j, int64_t n) {
          if (contiguous) {
            adamw16_chunk(p + r.at[0] + j, g + r.at[1] + j, m + r.at[2] + j, v + r.at[3] + j, c + r.at[5] + j, n,
                          r.first + j, k);
            return;
          }
          for (int64_t e = j; e < j + n; ++e) {
            const uint32_t word = formulas::weight_word(k, uint64_t(r.first + e));
            formulas::adamw16<HostUpdate<P>>(p + r.at[0] + e * r.step[0], g[r.at[1] + e * r.step[1]],
                                             m + r.at[2] + e * r.step[2], v + r.at[3] + e * r.step[3],
                                             vm + r.at[4] + e * r.step[4], c + r.at[5] + e * r.step[5], word, k);
          }
        });
      };
      parallel_for_each_row<6>(param.shape(), strides, row, kUpdateGrain);
      return;
    }
#endif
    for_each_update16<6>(param.shape(), strides, k, [&](const std::array<int64_t, 6>& o, uint32_t r) {
      formulas::adamw16<HostUpdate<P>>(p + o[0], g[o[1]], m + o[2], v + o[3], vm + o[4], c + o[5], r, k);
    });
  });
}

void rmsprop16_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                      const Strided& momentum_buf, const Strided& kahan_comp, double lr, double alpha, double eps,
                      double weight_decay, double momentum, bool centered, Rounding rounding, uint64_t seed,
                      uint64_t offset) {
  dispatch_16bit("rmsprop16_update", param.dtype(), [&]<class P>() {
    const formulas::Rmsprop16Consts k =
        formulas::rmsprop16_consts(lr, alpha, eps, weight_decay, momentum, centered,
                                   formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    P* sq = square_avg.data<P>();
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Strided& at = k.centered ? grad_avg : param;
    const Strided& bt = k.use_mom ? momentum_buf : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    P* ga = at.data<P>();
    P* b = bt.data<P>();
    P* c = ct.data<P>();
    for_each_update16<6>(
        param.shape(),
        {param.strides(), grad.strides(), square_avg.strides(), at.strides(), bt.strides(), ct.strides()}, k,
        [&](const std::array<int64_t, 6>& o, uint32_t r) {
      formulas::rmsprop16<HostUpdate<P>>(p + o[0], g[o[1]], sq + o[2], ga + o[3], b + o[4], c + o[5], r, k);
        });
  });
}

void adagrad16_update(const Strided& param, const Strided& grad, const Strided& sum, const Strided& kahan_comp,
                      double lr, double lr_decay, double eps, double weight_decay, int64_t step, Rounding rounding,
                      uint64_t seed, uint64_t offset) {
  dispatch_16bit("adagrad16_update", param.dtype(), [&]<class P>() {
    const formulas::Adagrad16Consts k = formulas::adagrad16_consts(
        lr, lr_decay, eps, weight_decay, step, formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    P* p = param.data<P>();
    const float* g = grad.data<float>();
    P* s = sum.data<P>();
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    P* c = ct.data<P>();
    for_each_update16<4>(param.shape(), {param.strides(), grad.strides(), sum.strides(), ct.strides()}, k,
                         [&](const std::array<int64_t, 4>& o, uint32_t r) {
      formulas::adagrad16<HostUpdate<P>>(p + o[0], g[o[1]], s + o[2], c + o[3], r, k);
    });
  });
}

}  // namespace mixtape::cpu
