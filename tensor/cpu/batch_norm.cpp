#include "tensor/cpu/batch_norm.h"

#include <cmath>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// A tensor seen as channels (dim 1) x positions (every other dim): the positions' shape and
// strides, and the stride between channels.
struct ChannelView {
  Shape pos_shape, pos_strides;
  int64_t channel_stride = 0;
};

ChannelView channel_view(const Strided& t) {
  ChannelView v;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == 1) continue;
    v.pos_shape.push_back(t.shape()[size_t(d)]);
    v.pos_strides.push_back(t.strides()[size_t(d)]);
  }
  v.channel_stride = t.strides()[1];
  return v;
}

// A small 1-D tensor (per-channel parameters and statistics) as doubles; empty when undefined.
std::vector<double> read_vec(const Strided& t) {
  std::vector<double> v;
  if (!t.defined()) return v;
  v.resize(size_t(t.numel()));
  dispatch_floating(t.dtype(), "batch_norm", [&]<class T>() {
    const T* p = static_cast<const T*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(load(p[int64_t(i) * t.strides()[0]]));
  });
  return v;
}

// Element i of a 1-D tensor, rounded once from double.
void write_at(const Strided& t, int64_t i, double value) {
  dispatch_floating(t.dtype(), "batch_norm",
                    [&]<class T>() { static_cast<T*>(t.raw_data())[i * t.strides()[0]] = store<T>(value); });
}

}  // namespace

void batch_norm_forward(const Strided& x, const Strided& weight, const Strided& bias, const Strided& running_mean,
                        const Strided& running_var, bool training, double momentum, double eps, const Strided& y,
                        const Strided& mean, const Strided& invstd) {
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), yv = channel_view(y);
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight), b = read_vec(bias);
  const std::vector<double> rm = read_vec(running_mean), rv = read_vec(running_var);
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>() {
    using A = compute_t<T>;  // type of the saved statistics and of the per-element arithmetic
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    A* pm = mean.data<A>();
    A* pi = invstd.data<A>();
    // Each channel's statistics and outputs are one thread's (Note [Deterministic threads]).
    parallel_for(C, grain_for(3 * n), [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; ++c) {
        const T* xc = px + c * xv.channel_stride;
        double m, var;
        if (training) {
          // Two passes (mean, then squared deviations) in double: no cancellation in E[x^2]-E[x]^2.
          double s = 0.0;
          for_each_offset<1>(xv.pos_shape, {xv.pos_strides},
                             [&](const std::array<int64_t, 1>& o) { s += double(load(xc[o[0]])); });
          m = s / double(n);
          double q = 0.0;
          for_each_offset<1>(xv.pos_shape, {xv.pos_strides}, [&](const std::array<int64_t, 1>& o) {
            const double d = double(load(xc[o[0]])) - m;
            q += d * d;
          });
          var = q / double(n);
          if (!rm.empty()) {
            // Running variance tracks the unbiased estimate (PyTorch semantics); n > 1 is checked.
            write_at(running_mean, c, (1.0 - momentum) * rm[size_t(c)] + momentum * m);
            write_at(running_var, c, (1.0 - momentum) * rv[size_t(c)] + momentum * var * double(n) / double(n - 1));
          }
        } else {
          m = rm[size_t(c)];
          var = rv[size_t(c)];
        }
        pm[c] = A(m);
        pi[c] = A(1.0 / std::sqrt(var + eps));
        const A wc = w.empty() ? A(1) : A(w[size_t(c)]);
        const A bc = b.empty() ? A(0) : A(b[size_t(c)]);
        const A mc = pm[c], ic = pi[c];
        T* yc = py + c * yv.channel_stride;
        for_each_offset<2>(xv.pos_shape, {xv.pos_strides, yv.pos_strides}, [&](const std::array<int64_t, 2>& o) {
          yc[o[1]] = store<T>((A(load(xc[o[0]])) - mc) * ic * wc + bc);
        });
      }
    });
  });
}

void batch_norm_backward(const Strided& dy, const Strided& x, const Strided& weight, const Strided& mean,
                         const Strided& invstd, bool training, const Strided& dx, const Strided& dweight,
                         const Strided& dbias) {
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), dyv = channel_view(dy);
  const ChannelView dxv = dx.defined() ? channel_view(dx) : dyv;
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight);
  dispatch_floating(x.dtype(), "batch_norm backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr;
    const A* pm = mean.data<A>();
    const A* pi = invstd.data<A>();
    // Each channel's sums and gradients are one thread's (Note [Deterministic threads]).
    parallel_for(C, grain_for(3 * n), [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; ++c) {
        const T* xc = px + c * xv.channel_stride;
        const T* dyc = pdy + c * dyv.channel_stride;
        const A mc = pm[c], ic = pi[c];
        const A wc = w.empty() ? A(1) : A(w[size_t(c)]);
        // sum(dy) and sum(dy * xhat) over the positions of channel c, in double.
        double sdy = 0.0, sdyxh = 0.0;
        if (training || dweight.defined() || dbias.defined()) {
          for_each_offset<2>(xv.pos_shape, {xv.pos_strides, dyv.pos_strides}, [&](const std::array<int64_t, 2>& o) {
            const double g = double(load(dyc[o[1]]));
            sdy += g;
            sdyxh += g * double((A(load(xc[o[0]])) - mc) * ic);
          });
        }
        if (dweight.defined()) write_at(dweight, c, sdyxh);
        if (dbias.defined()) write_at(dbias, c, sdy);
        if (!pdx) continue;
        T* dxc = pdx + c * dxv.channel_stride;
        const A k = wc * ic;
        if (training) {
          // dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)): the mean and var paths.
          const A mdy = A(sdy / double(n)), mdyxh = A(sdyxh / double(n));
          for_each_offset<3>(xv.pos_shape, {xv.pos_strides, dyv.pos_strides, dxv.pos_strides},
                             [&](const std::array<int64_t, 3>& o) {
            const A xh = (A(load(xc[o[0]])) - mc) * ic;
            dxc[o[2]] = store<T>(k * (A(load(dyc[o[1]])) - mdy - xh * mdyxh));
          });
        } else {
          for_each_offset<2>(dyv.pos_shape, {dyv.pos_strides, dxv.pos_strides},
                             [&](const std::array<int64_t, 2>& o) { dxc[o[1]] = store<T>(A(load(dyc[o[0]])) * k); });
        }
      }
    });
  });
}

}  // namespace mixtape::cpu
