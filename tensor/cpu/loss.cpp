#include "tensor/cpu/loss.h"
#include "tensor/core/rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tensor/core/loss_formulas.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/math.h"

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

// ---- cross entropy and nll_loss -----------------------------------------------------------

namespace {

void check_target(int64_t t, int64_t C, int64_t position, const Strided& logits, const Strided& targets,
                  const char* op) {
  MT_CHECK(t >= 0 && t < C, op, ": target ", t, " (at position ", position, ") is out of range for ", C, " classes (",
           std::string(op) == "nll_loss" ? "input " : "logits ", logits.meta(), ", targets ", targets.meta(),
           "); targets must lie in [0, ", C, ") or equal ignore_index");
}

// Class weights as doubles; empty when not given (every weight 1).
std::vector<double> class_weights(const Strided& w) {
  std::vector<double> v;
  if (!w.defined()) return v;
  v.resize(size_t(w.numel()));
  dispatch_floating(w.dtype(), "cross_entropy weight", [&]<class T>() {
    const T* p = static_cast<const T*>(w.raw_data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(load(p[int64_t(i) * w.strides()[0]]));
  });
  return v;
}

// One row of a class loss: -log p_c of every class c from logits (max-subtracted log-softmax)
// or from log-probabilities (nll_loss: -x_c).
template <class T>
struct ClassRow {
  using A = compute_t<T>;
  const T* row;
  int64_t C, stride;
  bool log_probs;
  A mx = A(0), log_sum = A(0), sum_a = A(1);

  ClassRow(const T* r, int64_t c, int64_t s, bool lp) : row(r), C(c), stride(s), log_probs(lp) {
    if (log_probs) return;
    double sum;
    row_max_sum(row, C, stride, mx, sum);
    log_sum = A(std::log(sum));
    sum_a = A(sum);
  }
  A x(int64_t c) const { return A(load(row[c * stride])); }
  // -log_softmax(x)[c] = log(sum) - (x_c - max), or -x_c.
  A nll(int64_t c) const { return log_probs ? A(-x(c)) : A(log_sum - (x(c) - mx)); }
  A prob(int64_t c) const { return A(std::exp(x(c) - mx) / sum_a); }

  // Note [Cross-entropy options]
  // loss = w_t (1 - eps) nll_t + (eps / C) sum_c w_c nll_c (PyTorch's label smoothing: the target
  // distribution (1 - eps) onehot(t) + eps / C), with w = 1 without class weights and eps = 0
  // without smoothing; the unweighted, unsmoothed loss is nll_t with nothing multiplied in. The
  // smoothing sum is accumulated in double.
  A loss(int64_t t, const std::vector<double>& w, double eps) const {
    A l = nll(t);
    if (!w.empty()) l = A(A(w[size_t(t)]) * l);
    if (eps > 0.0) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += w.empty() ? double(nll(c)) : double(A(A(w[size_t(c)]) * nll(c)));
      l = A(A(1.0 - eps) * l + A(eps / double(C)) * A(s));
    }
    return l;
  }
  // d loss / d x_k times g (the gradient of `loss` above):
  //   logits:    (w_t (1 - eps) (p_k - [k == t]) + (eps / C) (W p_k - w_k)) g,  W = sum_c w_c
  //   log-probs: -w_t [k == t] g
  // g is multiplied last, so a power-of-two scale passes through exactly.
  A grad(int64_t k, int64_t t, const std::vector<double>& w, double eps, A wsum, A g) const {
    const A wt = w.empty() ? A(1) : A(w[size_t(t)]);
    if (log_probs) return k == t ? A(A(-wt) * g) : A(0);
    const A p = prob(k);
    if (w.empty() && eps == 0.0) return A((k == t ? A(p - A(1)) : p) * g);
    const A wk = w.empty() ? A(1) : A(w[size_t(k)]);
    const A hit = k == t ? A(p - A(1)) : p;
    A d = A(A(wt * A(1.0 - eps)) * hit);
    if (eps > 0.0) d = A(d + A(eps / double(C)) * A(wsum * p - wk));
    return A(d * g);
  }
};

const char* class_loss_name(bool log_probs) { return log_probs ? "nll_loss" : "cross_entropy"; }

// The mean's divisor: the sum of the weights of the targets that are not ignored.
template <class T>
double target_weight_sum(const Strided& targets, const std::vector<double>& w, int64_t ignore_index) {
  const int64_t* pt = static_cast<const int64_t*>(targets.raw_data());
  double s = 0.0;
  for_each_offset<1>(targets.shape(), {targets.strides()}, [&](const std::array<int64_t, 1>& o) {
    const int64_t t = pt[o[0]];
    if (t == ignore_index) return;
    // An out-of-range target is reported by the caller's loop; it adds nothing here.
    if (w.empty()) s += 1.0;
    else if (t >= 0 && t < int64_t(w.size())) s += double(compute_t<T>(w[size_t(t)]));
  });
  return s;
}

}  // namespace

void cross_entropy(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                   double label_smoothing, bool log_probs, bool reduce, bool mean, const Strided& out) {
  const RowView lv = row_view(logits, 1);
  const int64_t* pt = static_cast<const int64_t*>(targets.raw_data());
  const std::vector<double> w = class_weights(weight);
  const char* op = class_loss_name(log_probs);
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(logits.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    double total = 0.0, wsum = 0.0;
    int64_t position = 0;
    for_each_offset<3>(lv.outer_shape,
                       {lv.outer_strides, targets.strides(), elem_strides(out, reduce, lv.outer_shape.size())},
                       [&](const std::array<int64_t, 3>& o) {
      const int64_t t = pt[o[1]];
      ++position;
      if (t == ignore_index) {  // contributes nothing, counts nothing
        if (!reduce) po[o[2]] = store<T>(A(0));
        return;
      }
      check_target(t, lv.len, position - 1, logits, targets, op);
      const A loss = ClassRow<T>(px + o[0], lv.len, lv.stride, log_probs).loss(t, w, label_smoothing);
      wsum += w.empty() ? 1.0 : double(A(w[size_t(t)]));
      if (reduce) total += double(loss);
      else po[o[2]] = store<T>(loss);
    });
    if (reduce) po[0] = store<T>(A(total / (mean ? wsum : 1.0)));
  });
}

void cross_entropy_backward(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                            double label_smoothing, bool log_probs, const Strided& dy, bool reduce, bool mean,
                            const Strided& dlogits) {
  const RowView lv = row_view(logits, 1), dv = row_view(dlogits, 1);
  const int64_t* pt = static_cast<const int64_t*>(targets.raw_data());
  const std::vector<double> w = class_weights(weight);
  const char* op = class_loss_name(log_probs);
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    using A = compute_t<T>;
    const T* px = static_cast<const T*>(logits.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pd = static_cast<T*>(dlogits.raw_data());
    const double divisor = reduce && mean ? target_weight_sum<T>(targets, w, ignore_index) : 1.0;
    double wall = 0.0;  // W = sum of every class weight (label smoothing)
    for (double v : w) wall += double(A(v));
    const A wsum = w.empty() ? A(lv.len) : A(wall);
    int64_t position = 0;
    for_each_offset<4>(
        lv.outer_shape,
        {lv.outer_strides, targets.strides(), elem_strides(dy, reduce, lv.outer_shape.size()), dv.outer_strides},
        [&](const std::array<int64_t, 4>& o) {
      const int64_t t = pt[o[1]];
      ++position;
      T* drow = pd + o[3];
      if (t == ignore_index) {
        for (int64_t k = 0; k < lv.len; ++k) drow[k * dv.stride] = store<T>(A(0));
        return;
      }
      check_target(t, lv.len, position - 1, logits, targets, op);
      const ClassRow<T> row(px + o[0], lv.len, lv.stride, log_probs);
      const A g = grad_factor<A>(pdy, o[2], reduce, divisor);
      for (int64_t k = 0; k < lv.len; ++k) drow[k * dv.stride] = store<T>(row.grad(k, t, w, label_smoothing, wsum, g));
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

// ---- binary cross entropy, L1, smooth L1 (tensor/core/loss_formulas.h) --------------------

void bce(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out) {
  dispatch_floating(x.dtype(), "binary_cross_entropy", [&]<class T>() {
    using A = compute_t<T>;
    // Probabilities outside [0, 1] are refused, naming the first (row-major); NaN passes on.
    const T* px = static_cast<const T*>(x.raw_data());
    int64_t position = 0;
    for_each_offset<1>(x.shape(), {x.strides()}, [&](const std::array<int64_t, 1>& o) {
      const double v = double(load(px[o[0]]));
      MT_CHECK(!(v < 0.0 || v > 1.0), "binary_cross_entropy: probability ", v, " (at position ", position,
               ") is outside [0, 1] (probs ", x.meta(), ", targets ", t.meta(),
               "); it takes probabilities, such as a Sigmoid's output (logits go to "
               "binary_cross_entropy_with_logits)");
      ++position;
    });
    pointwise_loss<T>(x, t, reduce, divisor, out, [](A xi, A ti) { return formulas::bce_forward<HostMath>(xi, ti); });
  });
}

void bce_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor, const Strided& dx,
                  const Strided& dt) {
  dispatch_floating(x.dtype(), "binary_cross_entropy backward", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss_backward<T>(x, t, dy, reduce, divisor, dx, dt, [](A xi, A ti, A g) {
      return std::pair<A, A>{formulas::bce_grad_input(xi, ti, g), formulas::bce_grad_target<HostMath>(xi, g)};
    });
  });
}

void l1_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out) {
  dispatch_floating(a.dtype(), "l1_loss", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss<T>(a, b, reduce, divisor, out, [](A ai, A bi) { return formulas::l1_forward(ai, bi); });
  });
}

void l1_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                      const Strided& da, const Strided& db) {
  dispatch_floating(a.dtype(), "l1_loss backward", [&]<class T>() {
    using A = compute_t<T>;
    pointwise_loss_backward<T>(a, b, dy, reduce, divisor, da, db, [](A ai, A bi, A g) {
      const A d = formulas::l1_grad(ai, bi, g);
      return std::pair<A, A>{d, A(-d)};
    });
  });
}

void smooth_l1_loss(const Strided& a, const Strided& b, double beta, bool reduce, double divisor, const Strided& out) {
  dispatch_floating(a.dtype(), "smooth_l1_loss", [&]<class T>() {
    using A = compute_t<T>;
    const A bt = A(beta);
    pointwise_loss<T>(a, b, reduce, divisor, out, [bt](A ai, A bi) { return formulas::smooth_l1_forward(ai, bi, bt); });
  });
}

void smooth_l1_loss_backward(const Strided& a, const Strided& b, double beta, const Strided& dy, bool reduce,
                             double divisor, const Strided& da, const Strided& db) {
  dispatch_floating(a.dtype(), "smooth_l1_loss backward", [&]<class T>() {
    using A = compute_t<T>;
    const A bt = A(beta);
    pointwise_loss_backward<T>(a, b, dy, reduce, divisor, da, db, [bt](A ai, A bi, A g) {
      const A d = formulas::smooth_l1_grad(ai, bi, bt, g);
      return std::pair<A, A>{d, A(-d)};
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
