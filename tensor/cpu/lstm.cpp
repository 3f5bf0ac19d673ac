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
#include "tensor/cpu/math.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

template <class C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

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
      std::vector<C> buf(static_cast<size_t>(7 * H));  // gates [4H], c_prev, c, h
      C *g = buf.data(), *cp = g + 4 * H, *cv = cp + H, *hv = cv + H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(pg.row(b), pg.s1, 4 * H, g);
        load_row_to(pcp.row(b), pcp.s1, H, cp);
        C* const a = pa ? pa + b * 5 * H : nullptr;
        for (int64_t j = 0; j < H; ++j) {
          const C i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = tanh_c(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
          cv[j] = f * cp[j] + i * gg;
          const C tc = tanh_c(cv[j]);  // from the unrounded c
          hv[j] = o * tc;
          if (a) {
            a[j] = i;
            a[H + j] = f;
            a[2 * H + j] = gg;
            a[3 * H + j] = o;
            a[4 * H + j] = tc;
          }
        }
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
        const C* const a = pa + b * 5 * H;
        for (int64_t j = 0; j < H; ++j) {
          cell_grads(a[j], a[H + j], a[2 * H + j], a[3 * H + j], a[4 * H + j], cp[j], gc[j], gh[j], dg, dcp, H, j);
        }
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
      std::vector<C> buf(static_cast<size_t>(12 * H));  // gates [4H], c_prev, dc, dh, d_gates [4H], d_c_prev
      C *g = buf.data(), *cp = g + 4 * H, *gc = cp + H, *gh = gc + H, *dg = gh + H, *dcp = dg + 4 * H;
      for (int64_t b = b0; b < b1; ++b) {
        load_row_to(pg.row(b), pg.s1, 4 * H, g);
        load_row_to(pcp.row(b), pcp.s1, H, cp);
        load_row_to(pdc.row(b), pdc.s1, H, gc);
        load_row_to(pdh.row(b), pdh.s1, H, gh);
        for (int64_t j = 0; j < H; ++j) {
          const C i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = tanh_c(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
          cell_grads(i, f, gg, o, tanh_c(f * cp[j] + i * gg), cp[j], gc[j], gh[j], dg, dcp, H, j);
        }
        store_row(dg, pdg.row(b), pdg.s1, 4 * H);
        store_row(dcp, pdcp.row(b), pdcp.s1, H);
      }
    });
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
