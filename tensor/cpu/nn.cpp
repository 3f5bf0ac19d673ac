#include "tensor/cpu/nn.h"

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

ChannelView channel_view(const Tensor& t) {
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
std::vector<double> read_vec(const Tensor& t) {
  std::vector<double> v;
  if (!t.defined()) return v;
  v.resize(size_t(t.numel()));
  dispatch_float(t.dtype(), "batch_norm", [&]<class T>() {
    const T* p = static_cast<const T*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(load(p[int64_t(i) * t.strides()[0]]));
  });
  return v;
}

// Element i of a 1-D tensor, rounded once from double.
void write_at(Tensor& t, int64_t i, double value) {
  dispatch_float(t.dtype(), "batch_norm", [&]<class T>() {
    static_cast<T*>(t.raw_data())[i * t.strides()[0]] = store<T>(value);
  });
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                        Tensor& mean, Tensor& invstd) {
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), yv = channel_view(y);
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight), b = read_vec(bias);
  const std::vector<double> rm = read_vec(running_mean), rv = read_vec(running_var);
  dispatch_float(x.dtype(), "batch_norm", [&]<class T>() {
    using A = compute_t<T>;  // type of the saved statistics and of the per-element arithmetic
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    A* pm = mean.data<A>();
    A* pi = invstd.data<A>();
    for (int64_t c = 0; c < C; ++c) {
      const T* xc = px + c * xv.channel_stride;
      double m, var;
      if (training) {
        // Two passes (mean, then squared deviations) in double: no cancellation in E[x^2]-E[x]^2.
        double s = 0.0;
        for_each_offset<1>(xv.pos_shape, {xv.pos_strides}, [&](const std::array<int64_t, 1>& o) {
          s += double(load(xc[o[0]]));
        });
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
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), dyv = channel_view(dy);
  const ChannelView dxv = dx.defined() ? channel_view(dx) : dyv;
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight);
  dispatch_float(x.dtype(), "batch_norm backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr;
    const A* pm = mean.data<A>();
    const A* pi = invstd.data<A>();
    for (int64_t c = 0; c < C; ++c) {
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
        for_each_offset<2>(dyv.pos_shape, {dyv.pos_strides, dxv.pos_strides}, [&](const std::array<int64_t, 2>& o) {
          dxc[o[1]] = store<T>(A(load(dyc[o[0]])) * k);
        });
      }
    }
  });
}

void dropout(const Tensor& x, Tensor& out, double p, uint64_t seed, uint64_t offset) {
  const double keep = 1.0 - p;
  dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    using A = compute_t<T>;
    const A scale = A(1.0 / keep);
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    // i: the row-major index that selects the element's Philox counter (Note [Dropout mask]).
    uint64_t i = 0;
    for_each_offset<2>(x.shape(), {x.strides(), out.strides()}, [&](const std::array<int64_t, 2>& o) {
      const PhiloxBlock r = philox_words(seed, offset + i++);
      const bool kept = uniform01_f64(r[0], r[1]) < keep;
      po[o[1]] = kept ? store<T>(A(load(px[o[0]])) * scale) : store<T>(A(0));
    });
  });
}

void embedding(const Tensor& indices, const Tensor& weight, Tensor& out) {
  const int64_t V = weight.size(0), D = weight.size(1);
  const int64_t* pidx = static_cast<const int64_t*>(indices.raw_data());
  // out viewed as [numel(indices), D] (it is contiguous, allocated by the front-end).
  dispatch_float(weight.dtype(), "embedding", [&]<class T>() {
    const T* pw = static_cast<const T*>(weight.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const int64_t ws0 = weight.strides()[0], ws1 = weight.strides()[1];
    int64_t row = 0;
    for_each_offset<1>(indices.shape(), {indices.strides()}, [&](const std::array<int64_t, 1>& o) {
      const int64_t k = pidx[o[0]];
      MT_CHECK(k >= 0 && k < V, "embedding: index ", k, " (at position ", row, ") is out of range for ", V,
               " rows (weight ", weight.meta(), ")");
      for (int64_t j = 0; j < D; ++j) po[row * D + j] = pw[k * ws0 + j * ws1];
      ++row;
    });
  });
}

void embedding_backward(const Tensor& indices, const Tensor& dy, Tensor& dweight) {
  const int64_t V = dweight.size(0), D = dweight.size(1);
  const int64_t* pidx = static_cast<const int64_t*>(indices.raw_data());
  // dy viewed as [numel(indices), D]: its last dim is D, the others follow indices' shape.
  const Shape& dys = dy.strides();
  const int64_t dstride = dys.back();
  std::vector<double> acc(size_t(V * D), 0.0);
  dispatch_float(dy.dtype(), "embedding backward", [&]<class T>() {
    const T* pdy = static_cast<const T*>(dy.raw_data());
    const Shape lead_strides(dys.begin(), dys.end() - 1);
    for_each_offset<2>(indices.shape(), {indices.strides(), lead_strides}, [&](const std::array<int64_t, 2>& o) {
      const int64_t k = pidx[o[0]];
      MT_CHECK(k >= 0 && k < V, "embedding backward: index ", k, " is out of range for ", V, " rows");
      double* a = acc.data() + k * D;
      for (int64_t j = 0; j < D; ++j) a[j] += double(load(pdy[o[1] + j * dstride]));
    });
    T* pw = static_cast<T*>(dweight.raw_data());  // contiguous, allocated by the front-end
    for (size_t i = 0; i < acc.size(); ++i) pw[i] = store<T>(acc[i]);
  });
}

}  // namespace mixtape::cpu
