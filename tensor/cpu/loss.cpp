#include "tensor/cpu/loss.h"
#include "tensor/core/rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// Max-subtracted row statistics: the row max (in compute type A) and sum(exp(x - max)), each
// exp in A (<= 1, cannot overflow) and the sum accumulated in double.
template <class A, class T>
void row_max_sum(const T* row, int64_t len, int64_t stride, A& mx, double& sum) {
  mx = -std::numeric_limits<A>::infinity();
  for (int64_t k = 0; k < len; ++k) mx = std::max(mx, A(load(row[k * stride])));
  sum = 0.0;
  for (int64_t k = 0; k < len; ++k) sum += double(std::exp(A(load(row[k * stride])) - mx));
}

// Per-element strides of a loss output or gradient: its own strides, or zeros for the 0-dim
// tensor of a reduced loss (every element then reads or accumulates the one value).
Shape elem_strides(const Strided& t, bool reduce, size_t ndim) { return reduce ? Shape(ndim, 0) : t.strides(); }

// The gradient factor g of element at offset o of dy (see the header).
template <class A, class T>
A grad_factor(const T* pdy, int64_t o, bool reduce, double divisor) {
  return reduce ? A(load(pdy[0])) / A(divisor) : A(load(pdy[o]));
}

// loss_i = f(a_i, b_i) over two same-shaped tensors, written per element or reduced.
template <class T, class F>
void pointwise_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out, F&& f) {
  using A = compute_t<T>;
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  double total = 0.0;
  for_each_offset<3>(a.shape(), {a.strides(), b.strides(), elem_strides(out, reduce, a.shape().size())},
                     [&](const std::array<int64_t, 3>& o) {
    const A l = f(A(load(pa[o[0]])), A(load(pb[o[1]])));
    if (reduce) total += double(l);
    else po[o[2]] = store<T>(l);
  });
  if (reduce) po[0] = store<T>(A(total / divisor));
}

// (da_i, db_i) = f(a_i, b_i, g_i); outputs that are undefined are skipped.
template <class T, class F>
void pointwise_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                             const Strided& da, const Strided& db, F&& f) {
  using A = compute_t<T>;
  const size_t nd = a.shape().size();
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pda = da.defined() ? static_cast<T*>(da.raw_data()) : nullptr;
  T* pdb = db.defined() ? static_cast<T*>(db.raw_data()) : nullptr;
  const Shape zero(nd, 0);
  for_each_offset<5>(
      a.shape(),
      {a.strides(), b.strides(), elem_strides(dy, reduce, nd), pda ? da.strides() : zero, pdb ? db.strides() : zero},
      [&](const std::array<int64_t, 5>& o) {
    const A g = grad_factor<A>(pdy, o[2], reduce, divisor);
    const auto [ga, gb] = f(A(load(pa[o[0]])), A(load(pb[o[1]])), g);
    if (pda) pda[o[3]] = store<T>(ga);
    if (pdb) pdb[o[4]] = store<T>(gb);
      });
}

}  // namespace

// ---- softmax -----------------------------------------------------------------------------

void softmax(const Strided& x, int64_t dim, bool log_out, const Strided& out) {
  const RowView xv = row_view(x, dim), ov = row_view(out, dim);
  dispatch_floating(x.dtype(), log_out ? "log_softmax" : "softmax", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    for_each_offset<2>(xv.outer_shape, {xv.outer_strides, ov.outer_strides}, [&](const std::array<int64_t, 2>& o) {
      const T* row = px + o[0];
      T* orow = po + o[1];
      A mx;
      double sum;
      row_max_sum(row, xv.len, xv.stride, mx, sum);
      const A log_sum = A(std::log(sum)), sum_a = A(sum);
      for (int64_t k = 0; k < xv.len; ++k) {
        const A z = A(load(row[k * xv.stride])) - mx;  // <= 0: exp cannot overflow
        orow[k * ov.stride] = store<T>(log_out ? A(z - log_sum) : A(std::exp(z) / sum_a));
      }
    });
  });
}

void softmax_backward(const Strided& y, const Strided& dy, int64_t dim, bool log_out, const Strided& dx) {
  const RowView yv = row_view(y, dim), gv = row_view(dy, dim), dv = row_view(dx, dim);
  dispatch_floating(y.dtype(), log_out ? "log_softmax backward" : "softmax backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pg = static_cast<const T*>(dy.raw_data());
    T* pd = static_cast<T*>(dx.raw_data());
    for_each_offset<3>(yv.outer_shape, {yv.outer_strides, gv.outer_strides, dv.outer_strides},
                       [&](const std::array<int64_t, 3>& o) {
      const T* yr = py + o[0];
      const T* gr = pg + o[1];
      T* dr = pd + o[2];
      // softmax: s = sum(dy * y); log_softmax: s = sum(dy). Accumulated in double.
      double s = 0.0;
      for (int64_t k = 0; k < yv.len; ++k) {
        const double g = double(load(gr[k * gv.stride]));
        s += log_out ? g : g * double(load(yr[k * yv.stride]));
      }
      const A sa = A(s);
      for (int64_t k = 0; k < yv.len; ++k) {
        const A yk = A(load(yr[k * yv.stride])), gk = A(load(gr[k * gv.stride]));
        dr[k * dv.stride] = store<T>(log_out ? A(gk - std::exp(yk) * sa) : A(yk * (gk - sa)));
      }
    });
  });
}

// ---- cross entropy -----------------------------------------------------------------------

namespace {
void check_target(int64_t t, int64_t C, int64_t position, const Strided& logits, const Strided& targets) {
  MT_CHECK(t >= 0 && t < C, "cross_entropy: target ", t, " (at position ", position, ") is out of range for ", C,
           " classes (logits ", logits.meta(), ", targets ", targets.meta(), "); targets must lie in [0, ", C, ")");
}
}  // namespace

void cross_entropy(const Strided& logits, const Strided& targets, bool reduce, double divisor, const Strided& out) {
  const RowView lv = row_view(logits, 1);
  const int64_t* pt = static_cast<const int64_t*>(targets.raw_data());
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(logits.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    double total = 0.0;
    int64_t position = 0;
    for_each_offset<3>(lv.outer_shape,
                       {lv.outer_strides, targets.strides(), elem_strides(out, reduce, lv.outer_shape.size())},
                       [&](const std::array<int64_t, 3>& o) {
      const int64_t t = pt[o[1]];
      check_target(t, lv.len, position++, logits, targets);
      const T* row = px + o[0];
      A mx;
      double sum;
      row_max_sum(row, lv.len, lv.stride, mx, sum);
      // -log_softmax(x)[t] = log(sum) - (x_t - max)
      const A log_sum = A(std::log(sum));
      const A loss = log_sum - (A(load(row[t * lv.stride])) - mx);
      if (reduce) total += double(loss);
      else po[o[2]] = store<T>(loss);
    });
    if (reduce) po[0] = store<T>(A(total / divisor));
  });
}

void cross_entropy_backward(const Strided& logits, const Strided& targets, const Strided& dy, bool reduce,
                            double divisor, const Strided& dlogits) {
  const RowView lv = row_view(logits, 1), dv = row_view(dlogits, 1);
  const int64_t* pt = static_cast<const int64_t*>(targets.raw_data());
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(logits.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pd = static_cast<T*>(dlogits.raw_data());
    int64_t position = 0;
    for_each_offset<4>(
        lv.outer_shape,
        {lv.outer_strides, targets.strides(), elem_strides(dy, reduce, lv.outer_shape.size()), dv.outer_strides},
        [&](const std::array<int64_t, 4>& o) {
      const int64_t t = pt[o[1]];
      check_target(t, lv.len, position++, logits, targets);
      const T* row = px + o[0];
      T* drow = pd + o[3];
      A mx;
      double sum;
      row_max_sum(row, lv.len, lv.stride, mx, sum);
      const A sum_a = A(sum);
      const A g = grad_factor<A>(pdy, o[2], reduce, divisor);
      for (int64_t k = 0; k < lv.len; ++k) {
        const A p = A(std::exp(A(load(row[k * lv.stride])) - mx) / sum_a);
        drow[k * dv.stride] = store<T>(A((k == t ? p - A(1) : p) * g));
      }
        });
  });
}

// ---- binary cross entropy with logits ----------------------------------------------------

void bce_with_logits(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss<T>(x, t, reduce, divisor, out,
                      [](A xi, A ti) { return A(std::max(xi, A(0)) - xi * ti + std::log1p(std::exp(-std::abs(xi)))); });
  });
}

void bce_with_logits_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor,
                              const Strided& dx, const Strided& dt) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits backward", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss_backward<T>(x, t, dy, reduce, divisor, dx, dt, [](A xi, A ti, A g) {
      // sigmoid without overflow: exp of a non-positive argument only.
      const A e = std::exp(-std::abs(xi));
      const A sig = xi >= A(0) ? A(1) / (A(1) + e) : e / (A(1) + e);
      return std::pair<A, A>{A((sig - ti) * g), A(-xi * g)};
    });
  });
}

// ---- mean squared error ------------------------------------------------------------------

void mse_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out) {
  dispatch_floating(a.dtype(), "mse_loss", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss<T>(a, b, reduce, divisor, out, [](A ai, A bi) { return A((ai - bi) * (ai - bi)); });
  });
}

void mse_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                       const Strided& da, const Strided& db) {
  dispatch_floating(a.dtype(), "mse_loss backward", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss_backward<T>(a, b, dy, reduce, divisor, da, db, [](A ai, A bi, A g) {
      const A d = A(2) * (ai - bi) * g;
      return std::pair<A, A>{d, A(-d)};
    });
  });
}

}  // namespace mixtape::cpu
