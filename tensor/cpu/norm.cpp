#include "tensor/cpu/norm.h"

#include <cmath>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// A [C] parameter tensor as doubles; empty when undefined.
std::vector<double> read_params(const Strided& t) {
  std::vector<double> v;
  if (!t.defined()) return v;
  v.resize(size_t(t.numel()));
  dispatch_floating(t.dtype(), "group_norm", [&]<class T>() {
    const T* p = static_cast<const T*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(load(p[int64_t(i) * t.strides()[0]]));
  });
  return v;
}

// Element c of a [C] output, rounded once from double.
void write_param(const Strided& t, int64_t c, double value) {
  dispatch_floating(t.dtype(), "group_norm",
                    [&]<class T>() { static_cast<T*>(t.raw_data())[c * t.strides()[0]] = store<T>(value); });
}

}  // namespace

// Note [Norm statistics]
// Each group's mean and variance are two passes in double over its M elements in memory order
// (the mean, then the squared deviations about it: no cancellation in E[x^2] - E[x]^2), the
// biased variance as PyTorch's layer_norm and group_norm use. They are rounded once to the
// compute type (f32; f64 for f64 inputs) and saved for the backward; everything per element is
// then the compute type's arithmetic, rounded once to x's dtype. One thread owns a group, and
// one thread a channel's parameter-gradient sums (Note [Deterministic threads]).
void group_norm_forward(const Strided& x, int64_t channels, int64_t inner, int64_t groups, const Strided& weight,
                        const Strided& bias, double eps, const Strided& y, const Strided& mean, const Strided& invstd) {
  const int64_t C = channels, L = inner, G = groups, K = C / G, M = K * L;
  const int64_t rows = x.numel() / (C * L);
  const std::vector<double> w = read_params(weight), b = read_params(bias);
  dispatch_floating(x.dtype(), "group_norm", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    A* pm = mean.data<A>();
    A* pi = invstd.data<A>();
    parallel_for(rows * G, grain_for(3 * M), [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const int64_t g = ng % G, base = ng * M;  // the group's M elements are contiguous
        const T* xg = px + base;
        double s = 0.0;
        for (int64_t j = 0; j < M; ++j) s += double(load(xg[j]));
        const double m = s / double(M);
        double q = 0.0;
        for (int64_t j = 0; j < M; ++j) {
          const double d = double(load(xg[j])) - m;
          q += d * d;
        }
        const double var = q / double(M);
        pm[ng] = A(m);
        pi[ng] = A(1.0 / std::sqrt(var + eps));
        const A mc = pm[ng], ic = pi[ng];
        T* yg = py + base;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t c = g * K + k;
          const A wc = w.empty() ? A(1) : A(w[size_t(c)]);
          const A bc = b.empty() ? A(0) : A(b[size_t(c)]);
          for (int64_t l = k * L; l < (k + 1) * L; ++l) yg[l] = store<T>(A((A(load(xg[l])) - mc) * ic * wc + bc));
        }
      }
    });
  });
}

void group_norm_backward(const Strided& dy, const Strided& x, int64_t channels, int64_t inner, int64_t groups,
                         const Strided& weight, const Strided& mean, const Strided& invstd, const Strided& dx,
                         const Strided& dweight, const Strided& dbias) {
  const int64_t C = channels, L = inner, G = groups, K = C / G, M = K * L;
  const int64_t rows = x.numel() / (C * L);
  const std::vector<double> w = read_params(weight);
  dispatch_floating(x.dtype(), "group_norm backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    const A* pm = mean.data<A>();
    const A* pi = invstd.data<A>();
    auto weight_of = [&](int64_t c) { return w.empty() ? A(1) : A(w[size_t(c)]); };
    if (dx.defined()) {
      T* pdx = static_cast<T*>(dx.raw_data());
      // Per group, with g = dy * w and xhat = (x - mean) * invstd:
      //   dx = invstd * (g - mean(g) - xhat * mean(g * xhat))   (means over the group's M elements)
      parallel_for(rows * G, grain_for(4 * M), [&](int64_t begin, int64_t end) {
        for (int64_t ng = begin; ng < end; ++ng) {
          const int64_t g = ng % G, base = ng * M;
          const A mc = pm[ng], ic = pi[ng];
          double sg = 0.0, sgx = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double wc = double(weight_of(g * K + k));
            for (int64_t l = k * L; l < (k + 1) * L; ++l) {
              const double gl = double(load(pdy[base + l])) * wc;
              sg += gl;
              sgx += gl * double(A((A(load(px[base + l])) - mc) * ic));
            }
          }
          const A mg = A(sg / double(M)), mgx = A(sgx / double(M));
          for (int64_t k = 0; k < K; ++k) {
            const A wc = weight_of(g * K + k);
            for (int64_t l = k * L; l < (k + 1) * L; ++l) {
              const A xh = A((A(load(px[base + l])) - mc) * ic);
              const A gl = A(A(load(pdy[base + l])) * wc);
              pdx[base + l] = store<T>(A(ic * (gl - mg - xh * mgx)));
            }
          }
        }
      });
    }
    if (!dweight.defined() && !dbias.defined()) return;
    // dweight[c] = sum(dy * xhat), dbias[c] = sum(dy), over the rows and inner positions of c.
    parallel_for(C, grain_for(2 * rows * L), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double sdy = 0.0, sdyx = 0.0;
        for (int64_t n = 0; n < rows; ++n) {
          const int64_t ng = n * G + c / K, base = (n * C + c) * L;
          const A mc = pm[ng], ic = pi[ng];
          for (int64_t l = 0; l < L; ++l) {
            const double gl = double(load(pdy[base + l]));
            sdy += gl;
            sdyx += gl * double(A((A(load(px[base + l])) - mc) * ic));
          }
        }
        if (dweight.defined()) write_param(dweight, c, sdyx);
        if (dbias.defined()) write_param(dbias, c, sdy);
      }
    });
  });
}

}  // namespace mixtape::cpu
