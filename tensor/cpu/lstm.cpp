// Note [LSTM cell backward]
// The backward pass saves no activations: it keeps the forward inputs (gates, c_prev) and
// recomputes i, f, g, o and c in the compute type, exactly as the forward did. This costs four
// transcendentals per element more than saving the activations, but the inputs are kept alive
// anyway (no extra memory), and in 16-bit the backward sees the unrounded fp32 c and
// activations, so it is the exact derivative of what the forward computed before rounding.
//
//   tc      = tanh(c)
//   dc_tot  = dc + dh * o * (1 - tc^2)        gradient reaching c (from c itself and via h)
//   d_i     = dc_tot * g      * i (1 - i)
//   d_f     = dc_tot * c_prev * f (1 - f)
//   d_g     = dc_tot * i      * (1 - g^2)
//   d_o     = dh     * tc     * o (1 - o)
//   d_c_prev = dc_tot * f
// Every product has exactly one factor that comes from (dc, dh), so a power-of-two scale on
// both passes through bit-exactly (absent under/overflow).
// A caller that keeps a whole sequence anyway (the LSTM layer node, Note [LSTM layer node]) may
// instead save the activations i | f | g | o | tc in the compute type (lstm_cell with `acts`,
// then lstm_cell_backward_saved): five transcendentals less per element for 5H compute-type
// values per row. The values are the recomputed ones (no contraction: Note [No contracted
// multiply-adds]), so both backward kernels give the same bits.
// Note [GRU cell backward]
// Like the LSTM cell's, the backward saves no activations: it keeps the inputs (gx, gh, h_prev)
// and recomputes r, z and n in the compute type exactly as the forward did. With gd = dh,
// gh_n = the hidden-side n pre-activation and h' = n + z * (h_prev - n):
//   dn       = gd * (1 - z)
//   dn_pre   = dn * (1 - n^2)                     d(gx_n); d(gh_n) = dn_pre * r
//   dz_pre   = gd * (h_prev - n) * z (1 - z)      d(gx_z) = d(gh_z)
//   dr_pre   = dn_pre * gh_n * r (1 - r)          d(gx_r) = d(gh_r)
//   d_h_prev = gd * z                             (h_prev's path through gh is the GEMM's)
// Every product has exactly one factor that comes from gd, so a power-of-two scale on dh passes
// through bit-exactly (absent under/overflow).
#include "tensor/cpu/lstm.h"

#include <cmath>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/math.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/quantize.h"
#include "tensor/cpu/vector_math.h"

namespace mixtape::cpu {

namespace {

// Element j of a row's gradients (the Note's formulas) from its activations i, f, g, o, tc = tanh(c),
// c_prev cp and the incoming gc = dc, gh = dh: d_gates into dg [4H], d_c_prev into dcp [H].
template <class C>
inline void cell_grads(C i, C f, C gg, C o, C tc, C cp, C gc, C gh, C* dg, C* dcp, int64_t H, int64_t j) {
  const C dc_tot = gc + gh * (o * (C(1) - tc * tc));
  dg[j] = dc_tot * (gg * (i * (C(1) - i)));
  dg[H + j] = dc_tot * (cp * (f * (C(1) - f)));
  dg[2 * H + j] = dc_tot * (i * (C(1) - gg * gg));
  dg[3 * H + j] = gh * (tc * (o * (C(1) - o)));
  dcp[j] = dc_tot * f;
}

// One row of the cell (gates g [4H], c_prev cp [H]) into c cv and h hv [H], unrounded, and the
// activations i | f | g | o | tanh(c) into a [5H]. In float the activations are computed row by
// row (vector_math.h: the same bits, sixteen at a time on the AVX-512 path).
template <class C>
inline void cell_row(const C* g, const C* cp, C* cv, C* hv, C* a, int64_t H) {
  if constexpr (std::is_same_v<C, float>) {
    sigmoid_row(g, a, 2 * H);  // i | f
    tanh_row(g + 2 * H, a + 2 * H, H);
    sigmoid_row(g + 3 * H, a + 3 * H, H);
    for (int64_t j = 0; j < H; ++j) cv[j] = a[H + j] * cp[j] + a[j] * a[2 * H + j];
    tanh_row(cv, a + 4 * H, H);  // from the unrounded c
    for (int64_t j = 0; j < H; ++j) hv[j] = a[3 * H + j] * a[4 * H + j];
    return;
  }
  for (int64_t j = 0; j < H; ++j) {
    const C i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = tanh_c(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
    cv[j] = f * cp[j] + i * gg;
    const C tc = tanh_c(cv[j]);  // from the unrounded c
    hv[j] = o * tc;
    a[j] = i;
    a[H + j] = f;
    a[2 * H + j] = gg;
    a[3 * H + j] = o;
    a[4 * H + j] = tc;
  }
}

// One row's gradients from its saved activations a [5H] (cell_row's), c_prev cp, dc gc and dh gh.
template <class C>
inline void saved_cell_grads_row(const C* a, const C* cp, const C* gc, const C* gh, C* dg, C* dcp, int64_t H) {
  for (int64_t j = 0; j < H; ++j)
    cell_grads(a[j], a[H + j], a[2 * H + j], a[3 * H + j], a[4 * H + j], cp[j], gc[j], gh[j], dg, dcp, H, j);
}

// Element j of a GRU row's forward (formulas in tensor/ops/lstm.h): r, z and n from gx [3H],
// gh [3H]; returns h'.
template <class C>
struct GruGates {
  C r, z, n;
  GruGates(const C* x, const C* hh, int64_t H, int64_t j)
      : r(sigmoid(x[j] + hh[j])), z(sigmoid(x[H + j] + hh[H + j])), n(tanh_c(x[2 * H + j] + r * hh[2 * H + j])) {}
  C h(C hp) const { return n + z * (hp - n); }
};

// A 2-D operand: row b starts at p + b s0, its elements are s1 apart.
template <class T>
struct Rows {
  T* p;
  int64_t s0, s1;
  explicit Rows(const Strided& t) : p(static_cast<T*>(t.raw_data())), s0(t.strides()[0]), s1(t.strides()[1]) {}
  T* row(int64_t b, int64_t j = 0) const { return p + b * s0 + j * s1; }
};

}  // namespace

// Each batch row b is computed by one thread (Note [Deterministic threads] in parallel.h): its
// operands are read into fp32 rows (convert.h), every element is computed exactly as the formulas
// above say, and each output row is rounded once.
void lstm_cell(const Strided& gates, const Strided& c_prev, const Strided& c, const Strided& h, const Strided& acts) {
  dispatch_floating(c.dtype(), "lstm_cell", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = c_prev.size(0), H = c_prev.size(1);
    const Rows<const T> pg(gates), pcp(c_prev);
    const Rows<T> pc(c), ph(h);
    C* const pa = acts.defined() ? acts.data<C>() : nullptr;  // [B, 5H], contiguous
    parallel_for(B, grain_for(8 * H), [&](int64_t b0, int64_t b1) {
      std::vector<C> buf(static_cast<size_t>(12 * H));  // gates [4H], c_prev, c, h, activations [5H]
      C *g = buf.data(), *cp = g + 4 * H, *cv = cp + H, *hv = cv + H, *act = hv + H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(pg.row(b), pg.s1, 4 * H, g);
        load_row_to(pcp.row(b), pcp.s1, H, cp);
        cell_row(g, cp, cv, hv, pa ? pa + b * 5 * H : act, H);
        store_row(cv, pc.row(b), pc.s1, H);
        store_row(hv, ph.row(b), ph.s1, H);
      }
    });
  });
}

void lstm_cell_backward_saved(const Strided& acts, const Strided& c_prev, const Strided& dc, const Strided& dh,
                              const Strided& d_gates, const Strided& d_c_prev) {
  dispatch_floating(d_gates.dtype(), "lstm_cell_backward", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = c_prev.size(0), H = c_prev.size(1);
    const C* const pa = acts.data<C>();  // [B, 5H], contiguous
    const Rows<const T> pcp(c_prev), pdc(dc), pdh(dh);
    const Rows<T> pdg(d_gates), pdcp(d_c_prev);
    parallel_for(B, grain_for(12 * H), [&](int64_t b0, int64_t b1) {
      std::vector<C> buf(static_cast<size_t>(8 * H));  // c_prev, dc, dh, d_gates [4H], d_c_prev
      C *cp = buf.data(), *gc = cp + H, *gh = gc + H, *dg = gh + H, *dcp = dg + 4 * H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(pcp.row(b), pcp.s1, H, cp);
        load_row_to(pdc.row(b), pdc.s1, H, gc);
        load_row_to(pdh.row(b), pdh.s1, H, gh);
        saved_cell_grads_row(pa + b * 5 * H, cp, gc, gh, dg, dcp, H);
        store_row(dg, pdg.row(b), pdg.s1, 4 * H);
        store_row(dcp, pdcp.row(b), pdcp.s1, H);
      }
    });
  });
}

void lstm_cell_backward(const Strided& gates, const Strided& c_prev, const Strided& dc, const Strided& dh,
                        const Strided& d_gates, const Strided& d_c_prev) {
  dispatch_floating(d_gates.dtype(), "lstm_cell_backward", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = c_prev.size(0), H = c_prev.size(1);
    const Rows<const T> pg(gates), pcp(c_prev), pdc(dc), pdh(dh);
    const Rows<T> pdg(d_gates), pdcp(d_c_prev);
    parallel_for(B, grain_for(12 * H), [&](int64_t b0, int64_t b1) {
      // gates [4H], c_prev, dc, dh, d_gates [4H], d_c_prev; in float also c, h, activations [5H]
      std::vector<C> buf(static_cast<size_t>(std::is_same_v<C, float> ? 19 * H : 12 * H));
      C *g = buf.data(), *cp = g + 4 * H, *gc = cp + H, *gh = gc + H, *dg = gh + H, *dcp = dg + 4 * H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(pg.row(b), pg.s1, 4 * H, g);
        load_row_to(pcp.row(b), pcp.s1, H, cp);
        load_row_to(pdc.row(b), pdc.s1, H, gc);
        load_row_to(pdh.row(b), pdh.s1, H, gh);
        if constexpr (std::is_same_v<C, float>) {
          // The forward's activations, recomputed row by row as lstm_cell computes them (the
          // vector functions give the scalar ones' bits), then the saved-activation gradients:
          // the formulas below on the same values, without a libm call per element.
          C *cv = dcp + H, *hv = cv + H, *a = hv + H;
          cell_row(g, cp, cv, hv, a, H);
          saved_cell_grads_row(a, cp, gc, gh, dg, dcp, H);
        } else {
          for (int64_t j = 0; j < H; ++j) {
            const C i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = tanh_c(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
            cell_grads(i, f, gg, o, tanh_c(f * cp[j] + i * gg), cp[j], gc[j], gh[j], dg, dcp, H, j);
          }
        }
        store_row(dg, pdg.row(b), pdg.s1, 4 * H);
        store_row(dcp, pdcp.row(b), pdcp.s1, H);
      }
    });
  });
}

// Note [LSTM layer recurrence]
// The LSTM layer node (Note [LSTM layer node] in autograd/functions/lstm.cpp) runs a layer's whole
// recurrence here on the CPU: every step's GEMM, sum and cell, forward and backward. Row b of
// h_{t+1} depends on row b of h_t alone, so each thread takes a block of batch rows through all T
// steps: one fork for the sequence, no barrier between steps. The step ops forked the threads
// three or four times per step each way, about 1,400 times per char_lstm training step, each
// fork a wake-up of the other thread (a futex call when it sleeps). The recurrent weight is
// packed for the GEMM once per layer (PackedB), not at every step. Every value is computed by
// the operations the step ops use, in their order, each rounded where they round (store_n, RNE):
//   forward   lin = round(b + h_t W^T)      linear: the GEMM's sums start from the bias
//             gates = round(proj_t + lin)   add
//             c_{t+1}, h_{t+1}, acts_t      lstm_cell, saving its activations
//   backward  dh_in = round(dout_t + dh)    add
//             dG_t, dc                      lstm_cell_backward_saved
//             dh = round(dG_t W)            linear_backward_input
// and a GEMM's element is the same bits whichever rows it is computed with (Note [Own GEMM]; the
// step GEMMs never meet the split-K blocks of gemm_blocks.h: with N = 4H or H, K = H or 4H stays
// below 4096 whenever N is below 128), so the results are the step ops' bits for any thread count
// (tests/tensor/test_lstm_sequence.cpp runs both).

namespace {

// v[0 .. n) rounded to T and read back, as storing a T tensor and loading it gives (nothing to
// do when T is the compute type). tmp has room for n values.
template <class T, class C>
void round_through(C* v, int64_t n, T* tmp) {
  if constexpr (!std::is_same_v<T, C>) {
    store_n(v, tmp, n);
    load_n(tmp, v, n);
  }
}

// Batch rows per thread at least: a GEMM tile's rows.
constexpr int64_t kLayerRowGrain = 8;

// The GEMM operand whose element (r, c) is p[r rs + c cs].
template <class T>
GemmOperand matrix(const T* p, int64_t rs, int64_t cs) {
  return {dtype_of<T>::value, p, rs, cs};
}

// A layer's forward after each step's GEMM, for the rows of one thread: the GEMM's output rounded
// as linear's, proj_t added and rounded as add's, the cell, c and h stored (both recurrences).
template <class T>
struct ForwardRows {
  using C = compute_t<T>;
  const T* px;  // proj, and its strides along time, batch and features
  int64_t x_t, x_b, x_j;
  T *ph, *pc;  // hs, cs [T + 1, B, H]
  C* pa;       // acts [T, B, 5H], or nullptr
  int64_t B, H;
  std::vector<C> buf;  // x [4H], c_prev, c, h [H each], act [5H] (when acts are not saved)
  std::vector<T> tmp;  // [4H]

  ForwardRows(const Strided& proj, int64_t time_dim, const Strided& hs, const Strided& cs, const Strided& acts)
      : px(proj.data<T>()),
        x_t(proj.strides()[size_t(time_dim)]),
        x_b(proj.strides()[size_t(1 - time_dim)]),
        x_j(proj.strides()[2]),
        ph(hs.data<T>()),
        pc(cs.data<T>()),
        pa(acts.defined() ? acts.data<C>() : nullptr),
        B(hs.size(1)),
        H(hs.size(2)),
        buf(static_cast<size_t>(12 * H)),
        tmp(static_cast<size_t>(4 * H)) {}

  // Rows [b0, b0 + m) of step t from the GEMM's output lin [m, 4H].
  void finish(int64_t t, int64_t b0, int64_t m, C* lin) {
    const int64_t G = 4 * H;
    C *x = buf.data(), *cp = x + G, *cv = cp + H, *hv = cv + H, *act = hv + H;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t row = t * B + b0 + r;  // of hs, cs and acts at step t
      C* const g = lin + r * G;
      round_through(g, G, tmp.data());  // linear's (scaled_matmul_nt's) output
      load_row_to(px + t * x_t + (b0 + r) * x_b, x_j, G, x);
      for (int64_t j = 0; j < G; ++j) g[j] = x[j] + g[j];
      round_through(g, G, tmp.data());  // add's output
      load_row_to(pc + row * H, 1, H, cp);
      cell_row(g, cp, cv, hv, pa ? pa + row * 5 * H : act, H);
      store_row(cv, pc + (row + B) * H, 1, H);
      store_row(hv, ph + (row + B) * H, 1, H);
    }
  }
};

// A layer's backward before each step's GEMM, for the rows of one thread: dh_in = dout_t + dh
// rounded as add's, the saved cell's gradients, dG_t and dc stored (both recurrences).
template <class T>
struct BackwardRows {
  using C = compute_t<T>;
  const C* pa;  // acts
  const T* pc;  // cs
  const T* po;  // dout, and its strides along time, batch and features
  int64_t o_t, o_b, o_j;
  T *pdh, *pdc, *pdg;  // dh, dc [B, H]; dg laid out as proj
  int64_t g_t, g_b, B, H;
  std::vector<C> buf;  // dG [4H], dout, dh, c_prev, dc, dc_prev [H each]
  std::vector<T> tmp;  // [H]

  BackwardRows(const Strided& acts, const Strided& cs, const Strided& dout, int64_t time_dim, const Strided& dh,
               const Strided& dc, const Strided& dg)
      : pa(acts.data<C>()),
        pc(cs.data<T>()),
        po(dout.data<T>()),
        o_t(dout.strides()[size_t(time_dim)]),
        o_b(dout.strides()[size_t(1 - time_dim)]),
        o_j(dout.strides()[2]),
        pdh(dh.data<T>()),
        pdc(dc.data<T>()),
        pdg(dg.data<T>()),
        g_t(dg.strides()[size_t(time_dim)]),
        g_b(dg.strides()[size_t(1 - time_dim)]),
        B(acts.size(1)),
        H(dh.size(1)),
        buf(static_cast<size_t>(9 * H)),
        tmp(static_cast<size_t>(H)) {}

  // Rows [b0, b0 + m) of step t.
  void cell_grads(int64_t t, int64_t b0, int64_t m) {
    C *dgv = buf.data(), *x = dgv + 4 * H, *gh = x + H, *cp = gh + H, *gc = cp + H, *dcp = gc + H;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t bb = b0 + r, row = t * B + bb;
      load_row_to(po + t * o_t + bb * o_b, o_j, H, x);
      load_row_to(pdh + bb * H, 1, H, gh);
      for (int64_t j = 0; j < H; ++j) gh[j] = x[j] + gh[j];
      round_through(gh, H, tmp.data());  // add's output
      load_row_to(pc + row * H, 1, H, cp);
      load_row_to(pdc + bb * H, 1, H, gc);
      saved_cell_grads_row(pa + row * 5 * H, cp, gc, gh, dgv, dcp, H);
      store_row(dgv, pdg + t * g_t + bb * g_b, 1, 4 * H);
      store_row(dcp, pdc + bb * H, 1, H);
    }
  }
  const T* dg_rows(int64_t t, int64_t b0) const { return pdg + t * g_t + b0 * g_b; }
};

}  // namespace

void lstm_layer_forward(const Strided& proj, int64_t time_dim, const Strided& w, const Strided& b, const Strided& hs,
                        const Strided& cs, const Strided& acts) {
  dispatch_floating(hs.dtype(), "lstm_layer", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      MT_ASSERT(false, "lstm_layer_forward: f64 runs the step ops (tensor/ops/lstm.cpp)");
    } else {
      using C = compute_t<T>;
      const int64_t steps = hs.size(0) - 1, B = hs.size(1), H = hs.size(2), G = 4 * H;
      // The GEMM's B is W^T: element (k, j) is w[j][k].
      const PackedB wt(gemm_arith_for(hs.dtype()), G, H, matrix(w.data<T>(), w.strides()[1], w.strides()[0]));
      const T* const ph = hs.data<T>();
      std::vector<C> bias(static_cast<size_t>(b.defined() ? G : 0));
      if (b.defined()) load_row_to(b.data<T>(), b.strides()[0], G, bias.data());
      parallel_for(B, kLayerRowGrain, [&](int64_t b0, int64_t b1) {
        const int64_t m = b1 - b0;
        std::vector<C> lin(static_cast<size_t>(m * G));
        ForwardRows<T> rows(proj, time_dim, hs, cs, acts);
        for (int64_t t = 0; t < steps; ++t) {
          if (b.defined())
            for (int64_t r = 0; r < m; ++r) std::copy(bias.begin(), bias.end(), lin.begin() + r * G);
          gemm_on_thread(m, matrix(ph + (t * B + b0) * H, H, 1), wt, b.defined(), lin.data(), G);
          rows.finish(t, b0, m, lin.data());
        }
      });
    }
  });
}

void lstm_layer_backward(const Strided& acts, const Strided& cs, const Strided& w, const Strided& dout,
                         int64_t time_dim, const Strided& dh, const Strided& dc, const Strided& dg, bool need_dh0) {
  dispatch_floating(dg.dtype(), "lstm_layer backward", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      MT_ASSERT(false, "lstm_layer_backward: f64 runs the step ops (tensor/ops/lstm.cpp)");
    } else {
      using C = compute_t<T>;
      const int64_t steps = acts.size(0), B = acts.size(1), H = dh.size(1), G = 4 * H;
      // The GEMM's B is W itself: (K, N) = (4H, H).
      const PackedB wk(gemm_arith_for(dg.dtype()), H, G, matrix(w.data<T>(), w.strides()[0], w.strides()[1]));
      T* const pdh = dh.data<T>();
      const int64_t g_b = dg.strides()[size_t(1 - time_dim)];
      parallel_for(B, kLayerRowGrain, [&](int64_t b0, int64_t b1) {
        const int64_t m = b1 - b0;
        std::vector<C> dh_rows(static_cast<size_t>(m * H));
        BackwardRows<T> rows(acts, cs, dout, time_dim, dh, dc, dg);
        for (int64_t t = steps - 1; t >= 0; --t) {
          rows.cell_grads(t, b0, m);
          if (t > 0 || need_dh0) {
            gemm_on_thread(m, matrix(rows.dg_rows(t, b0), g_b, 1), wk, false, dh_rows.data(), H);
            store_row(dh_rows.data(), pdh + b0 * H, 1, m * H);
          }
        }
      });
    }
  });
}

// Note [8-bit LSTM recurrence]
// Under 8-bit training with current scaling (Note [8-bit LSTM layer] in
// autograd/functions/lstm.cpp) each step's recurrent GEMM reads h_t (forward) or dG_t (backward)
// quantized with one scale for the whole [B, H] (or [B, 4H]) matrix, from its amax: the rows are
// no longer independent, since every row's codes need every row's maximum. So the threads keep
// their blocks of batch rows through all T steps, as in Note [LSTM layer recurrence], and meet
// once per step: each writes the amax of its rows into a slot (two sets, by the step's parity),
// waits at a barrier, and folds the slots into the same scale as every other thread. Then it
// quantizes its rows (quantize()'s row functions: the same codes and counts), multiplies them with
// the weight's codes packed once (PackedB: the sums of scaled_matmul_nt, Note [Reused 8-bit B
// operands] in quantize.cpp), and applies scaled_matmul_nt's epilogue (scaled_sum) and the step
// ops' roundings. One barrier a step instead of the step ops' four parallel regions, each of which
// woke the other thread. The values are the step ops' (tests/autograd/test_fp8.cpp compares them
// with the unrolled graph, bit for bit).

namespace {

// Runs body(tid, nt, barrier) on the threads that share B rows (at least kLayerRowGrain each);
// barrier() waits for all of them. On one thread, or inside a parallel region, the barrier is a
// no-op.
template <class Body>
void on_row_threads(int64_t B, Body&& body) {
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(1, B / kLayerRowGrain)));
  if (threads <= 1 || omp_in_parallel()) return body(0, 1, [] {});
#pragma omp parallel num_threads(threads)
  body(omp_get_thread_num(), omp_get_num_threads(), [] {
#pragma omp barrier
  });
}

// The per-tensor scale of a step from the threads' slots, the same on every thread.
float step_scale(const float* slots, int nt, const BlockQuant& q) {
  float amax = 0.0f;
  for (int i = 0; i < nt; ++i) amax = amax_join(amax, slots[i]);
  return scales::block_scale(q, format_of(q.format), amax);
}

}  // namespace

void lstm_layer_forward_fp8(const Strided& proj, int64_t time_dim, const Strided& w_codes, float w_inv,
                            const Strided& b, const BlockQuant& q, const Strided& hs, const Strided& cs,
                            const Strided& acts, std::vector<Fp8StepStats>& stats) {
  dispatch_floating(hs.dtype(), "lstm_layer (8-bit)", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      MT_ASSERT(false, "lstm_layer_forward_fp8: f64 runs the step ops");
    } else {
      using C = compute_t<T>;
      const int64_t steps = hs.size(0) - 1, B = hs.size(1), H = hs.size(2), G = 4 * H;
      // The GEMM's B is W^T: element (k, j) is the code w[j][k].
      const PackedB wt(GemmArith::dot_bf16, G, H,
                       GemmOperand{w_codes.dtype(), w_codes.raw_data(), w_codes.strides()[1], w_codes.strides()[0]});
      const T* const ph = hs.data<T>();
      std::vector<float> bias(static_cast<size_t>(G), 0.0f);  // scaled_matmul_nt adds 0 without one
      if (b.defined()) load_row_to(b.data<T>(), b.strides()[0], G, bias.data());
      const int max_threads = omp_get_max_threads();
      std::vector<float> slots(size_t(2 * max_threads));
      std::vector<RowCounts> counts(size_t(steps * max_threads));
      std::vector<float> inv(static_cast<size_t>(steps), 0.0f);
      int used = 1;
      on_row_threads(B, [&](int tid, int nt, auto&& barrier) {
        if (tid == 0) used = nt;
        const int64_t b0 = B * tid / nt, b1 = B * (tid + 1) / nt, m = b1 - b0;
        std::vector<C> lin(static_cast<size_t>(m * G));
        ForwardRows<T> rows(proj, time_dim, hs, cs, acts);
        std::vector<uint8_t> codes(static_cast<size_t>(m * H));
        for (int64_t t = 0; t < steps; ++t) {
          const T* h_rows = ph + (t * B + b0) * H;
          float a = 0.0f;
          for (int64_t r = 0; r < m; ++r) a = row_amax(h_rows + r * H, H, a);
          float* slot = slots.data() + (t % 2) * nt;
          slot[tid] = a;
          barrier();
          const float s = step_scale(slot, nt, q), fa = 1.0f / s;  // fa: the codes' scale_inv
          if (tid == 0) inv[size_t(t)] = fa;
          RowCounts& n = counts[size_t(t * nt + tid)];
          for (int64_t r = 0; r < m; ++r) quantize_row(q, h_rows + r * H, H, s, codes.data() + r * H, n);
          gemm_on_thread(m, GemmOperand{q.format, codes.data(), H, 1}, wt, false, lin.data(), G);
          for (int64_t r = 0; r < m; ++r) {  // (row by row: no division an element)
            C* row = lin.data() + r * G;
            for (int64_t j = 0; j < G; ++j) row[j] = scaled_sum(row[j], fa, w_inv, bias[size_t(j)]);
          }
          rows.finish(t, b0, m, lin.data());
        }
      });
      stats.assign(size_t(steps), {});
      for (int64_t t = 0; t < steps; ++t) {
        for (int i = 0; i < used; ++i) stats[size_t(t)].counts += counts[size_t(t * used + i)];
        stats[size_t(t)].scale_inv = inv[size_t(t)];
      }
    }
  });
}

void lstm_layer_backward_fp8(const Strided& acts, const Strided& cs, const Strided& w_codes, float w_inv,
                             const Strided& dout, int64_t time_dim, const Strided& dh, const Strided& dc,
                             const Strided& dg, bool need_dh0, const BlockQuant& q, std::vector<Fp8StepStats>& stats) {
  dispatch_floating(dg.dtype(), "lstm_layer backward (8-bit)", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      MT_ASSERT(false, "lstm_layer_backward_fp8: f64 runs the step ops");
    } else {
      using C = compute_t<T>;
      const int64_t steps = acts.size(0), B = acts.size(1), H = dh.size(1), G = 4 * H;
      // The GEMM's B is W itself: element (k, j) of the (4H, H) operand is the code w[k][j].
      const PackedB wk(GemmArith::dot_bf16, H, G,
                       GemmOperand{w_codes.dtype(), w_codes.raw_data(), w_codes.strides()[0], w_codes.strides()[1]});
      T* const pdh = dh.data<T>();
      const int64_t g_b = dg.strides()[size_t(1 - time_dim)];
      const int max_threads = omp_get_max_threads();
      std::vector<float> slots(size_t(2 * max_threads));
      std::vector<RowCounts> counts(size_t(steps * max_threads));
      std::vector<float> inv(size_t(steps), 0.0f);
      int used = 1;
      on_row_threads(B, [&](int tid, int nt, auto&& barrier) {
        if (tid == 0) used = nt;
        const int64_t b0 = B * tid / nt, b1 = B * (tid + 1) / nt, m = b1 - b0;
        std::vector<C> dh_rows(static_cast<size_t>(m * H));
        BackwardRows<T> rows(acts, cs, dout, time_dim, dh, dc, dg);
        std::vector<uint8_t> codes(static_cast<size_t>(m * G));
        for (int64_t t = steps - 1; t >= 0; --t) {
          rows.cell_grads(t, b0, m);
          if (t > 0 || need_dh0) {  // dh = q(dG_t) q(W): (B, H) = (B, 4H) (H, 4H)^T
            const T* g_rows = rows.dg_rows(t, b0);
            float a = 0.0f;
            for (int64_t r = 0; r < m; ++r) a = row_amax(g_rows + r * g_b, G, a);
            float* slot = slots.data() + (t % 2) * nt;
            slot[tid] = a;
            barrier();
            const float s = step_scale(slot, nt, q), fa = 1.0f / s;
            if (tid == 0) inv[size_t(t)] = fa;
            RowCounts& n = counts[size_t(t * nt + tid)];
            for (int64_t r = 0; r < m; ++r) quantize_row(q, g_rows + r * g_b, G, s, codes.data() + r * G, n);
            gemm_on_thread(m, GemmOperand{q.format, codes.data(), G, 1}, wk, false, dh_rows.data(), H);
            for (int64_t i = 0; i < m * H; ++i) dh_rows[size_t(i)] = scaled_sum(dh_rows[size_t(i)], fa, w_inv, 0.0f);
            store_row(dh_rows.data(), pdh + b0 * H, 1, m * H);
          }
        }
      });
      stats.assign(size_t(steps), {});
      for (int64_t t = 0; t < steps; ++t) {
        for (int i = 0; i < used; ++i) stats[size_t(t)].counts += counts[size_t(t * used + i)];
        stats[size_t(t)].scale_inv = inv[size_t(t)];
      }
    }
  });
}

void gru_cell(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& h) {
  dispatch_floating(h.dtype(), "gru_cell", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = h_prev.size(0), H = h_prev.size(1);
    const Rows<const T> px(gx), pgh(gh), php(h_prev);
    const Rows<T> ph(h);
    parallel_for(B, grain_for(8 * H), [&](int64_t b0, int64_t b1) {
      std::vector<C> buf(static_cast<size_t>(8 * H));  // gx [3H], gh [3H], h_prev, h
      C *x = buf.data(), *hh = x + 3 * H, *hp = hh + 3 * H, *hv = hp + H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(px.row(b), px.s1, 3 * H, x);
        load_row_to(pgh.row(b), pgh.s1, 3 * H, hh);
        load_row_to(php.row(b), php.s1, H, hp);
        for (int64_t j = 0; j < H; ++j) hv[j] = GruGates<C>(x, hh, H, j).h(hp[j]);
        store_row(hv, ph.row(b), ph.s1, H);
      }
    });
  });
}

void gru_cell_backward(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& dh,
                       const Strided& d_gx, const Strided& d_gh, const Strided& d_h_prev) {
  dispatch_floating(d_gx.dtype(), "gru_cell_backward", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = h_prev.size(0), H = h_prev.size(1);
    const Rows<const T> px(gx), pgh(gh), php(h_prev), pdh(dh);
    const Rows<T> pdx(d_gx), pdgh(d_gh), pdhp(d_h_prev);
    parallel_for(B, grain_for(16 * H), [&](int64_t b0, int64_t b1) {
      // gx [3H], gh [3H], h_prev, dh, d_gx [3H], d_gh [3H], d_h_prev
      std::vector<C> buf(static_cast<size_t>(15 * H));
      C *x = buf.data(), *hh = x + 3 * H, *hp = hh + 3 * H, *gd = hp + H, *dx = gd + H, *dgh = dx + 3 * H,
        *dhp = dgh + 3 * H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(px.row(b), px.s1, 3 * H, x);
        load_row_to(pgh.row(b), pgh.s1, 3 * H, hh);
        load_row_to(php.row(b), php.s1, H, hp);
        load_row_to(pdh.row(b), pdh.s1, H, gd);
        for (int64_t j = 0; j < H; ++j) {
          const GruGates<C> a(x, hh, H, j);
          const C dn_pre = gd[j] * (C(1) - a.z) * (C(1) - a.n * a.n);
          const C dz_pre = gd[j] * (hp[j] - a.n) * (a.z * (C(1) - a.z));
          const C dr_pre = dn_pre * hh[2 * H + j] * (a.r * (C(1) - a.r));
          dx[j] = dgh[j] = dr_pre;
          dx[H + j] = dgh[H + j] = dz_pre;
          dx[2 * H + j] = dn_pre;
          dgh[2 * H + j] = dn_pre * a.r;
          dhp[j] = gd[j] * a.z;
        }
        store_row(dx, pdx.row(b), pdx.s1, 3 * H);
        store_row(dgh, pdgh.row(b), pdgh.s1, 3 * H);
        store_row(dhp, pdhp.row(b), pdhp.s1, H);
      }
    });
  });
}

}  // namespace mixtape::cpu
