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
#include "tensor/cpu/lstm.h"

#include <cmath>

#include "tensor/cpu/math.h"

namespace mixtape::cpu {

namespace {

template <class C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

// Element (b, j) of a 2-D tensor through its strides.
template <class T>
struct Strided2d {
  T* p;
  int64_t s0, s1;
  explicit Strided2d(const Strided& t) : p(static_cast<T*>(t.raw_data())), s0(t.strides()[0]), s1(t.strides()[1]) {}
  T& operator()(int64_t b, int64_t j) const { return p[b * s0 + j * s1]; }
};

// The gate activations of one (b, j), computed in C.
template <class T, class C = compute_t<T>>
struct Gates {
  C i, f, g, o;
  Gates(const Strided2d<const T>& gates, int64_t b, int64_t j, int64_t H)
      : i(sigmoid(C(load(gates(b, j))))),
        f(sigmoid(C(load(gates(b, H + j))))),
        g(tanh_c(C(load(gates(b, 2 * H + j))))),
        o(sigmoid(C(load(gates(b, 3 * H + j))))) {}
};

}  // namespace

void lstm_cell(const Strided& gates, const Strided& c_prev, const Strided& c, const Strided& h) {
  dispatch_floating(c.dtype(), "lstm_cell", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = c_prev.size(0), H = c_prev.size(1);
    const Strided2d<const T> pg(gates), pcp(c_prev);
    const Strided2d<T> pc(c), ph(h);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const Gates<T> a(pg, b, j, H);
        const C cv = a.f * C(load(pcp(b, j))) + a.i * a.g;
        pc(b, j) = store<T>(cv);
        ph(b, j) = store<T>(a.o * tanh_c(cv));  // from the unrounded c
      }
    }
  });
}

void lstm_cell_backward(const Strided& gates, const Strided& c_prev, const Strided& dc, const Strided& dh,
                        const Strided& d_gates, const Strided& d_c_prev) {
  dispatch_floating(d_gates.dtype(), "lstm_cell_backward", [&]<class T>() {
    using C = compute_t<T>;
    const int64_t B = c_prev.size(0), H = c_prev.size(1);
    const Strided2d<const T> pg(gates), pcp(c_prev), pdc(dc), pdh(dh);
    const Strided2d<T> pdg(d_gates), pdcp(d_c_prev);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const Gates<T> a(pg, b, j, H);
        const C cp = load(pcp(b, j));
        const C tc = tanh_c(a.f * cp + a.i * a.g);
        const C gh = load(pdh(b, j));
        const C dc_tot = C(load(pdc(b, j))) + gh * (a.o * (C(1) - tc * tc));
        pdg(b, j) = store<T>(dc_tot * (a.g * (a.i * (C(1) - a.i))));
        pdg(b, H + j) = store<T>(dc_tot * (cp * (a.f * (C(1) - a.f))));
        pdg(b, 2 * H + j) = store<T>(dc_tot * (a.i * (C(1) - a.g * a.g)));
        pdg(b, 3 * H + j) = store<T>(gh * (tc * (a.o * (C(1) - a.o))));
        pdcp(b, j) = store<T>(dc_tot * a.f);
      }
    }
  });
}

}  // namespace mixtape::cpu
