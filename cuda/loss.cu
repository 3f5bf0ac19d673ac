// softmax / log_softmax and the losses (cross entropy and nll_loss, BCE with logits, BCE on
// probabilities, L1, smooth L1, MSE), forward and backward side by side. Mirrors tensor/cpu/loss.cpp; the front-ends (tensor/ops/loss.cpp)
// validate shapes and allocate outputs contiguous.
//
// Note [CUDA loss numerics]
// Each row (softmax, cross entropy) is one block: the max, then sum(exp(x - max)) in the compute
// type (fp32; f64 for f64), then the outputs, each rounded once. The CPU sums the exponentials
// in f64 and its std::exp/std::log may differ from CUDA's expf/logf by an ulp, so these are
// compared with a tolerance. Reduced losses sum the per-element losses in f64 (as the CPU does)
// with a fixed two-pass order (per-block partials, then one block), divide by `divisor` in f64
// and round once: deterministic, no float atomics. Products that the CPU rounds before an add
// are written with mul_rn so nvcc does not contract them into an FMA.
//
// Note [Cross-entropy target check]
// The CPU kernel checks every target inside its loop. Here the launchers queue a one-block check
// of the targets (defer_index_check: the first bad position and its value, as the CPU reports
// the first) whose result the host reads at its next synchronization (Note [Deferred device
// checks] in cuda/runtime.h) and then throws the CPU's message; a block whose target is outside
// [0, C) skips its row, so nothing is read out of bounds meanwhile.
#include <bit>
#include <algorithm>
#include <climits>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "tensor/core/loss_formulas.h"
#include "tensor/core/rows.h"

namespace mixtape::cuda {

namespace {

__device__ __forceinline__ float dev_exp(float v) { return expf(v); }
__device__ __forceinline__ float dev_log(float v) { return logf(v); }
__device__ __forceinline__ float dev_log1p(float v) { return log1pf(v); }

template <class A>
__device__ __forceinline__ A neg_inf() {
  return A(-INFINITY);
}

inline int64_t round_up32(int64_t v) { return (v + 31) / 32 * 32; }
// Threads for one block per row of `len` elements: a multiple of 32, at most kBlock.
inline int row_threads(int64_t len) { return int(std::min<int64_t>(kBlock, round_up32(std::max<int64_t>(len, 1)))); }

// Per-element strides of a loss output or gradient: its own, or zeros for the 0-dim tensor of
// a reduced loss (every element then reads the one value).
Shape elem_strides(const Strided& t, bool reduce, size_t ndim) { return reduce ? Shape(ndim, 0) : t.strides(); }

// Row max (NaN ignored, as std::max(mx, v) on the CPU) and sum(exp(x - max)) of a row of `len`
// elements at stride `stride`, over the whole block. Every thread gets both.
template <class T, class A>
__device__ void row_max_sum(const T* row, int64_t len, int64_t stride, A* scratch, A& mx, A& sum) {
  A m = neg_inf<A>();
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    const A v = load(row[k * stride]);
    m = m < v ? v : m;
  }
  mx = block_max(m, scratch, neg_inf<A>());
  A s = A(0);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) s += dev_exp(A(load(row[k * stride])) - mx);
  sum = block_sum(s, scratch);
}

// ---- reduced-loss total ------------------------------------------------------------------

// One block: out[0] = round(sum(partial[0..count)) / divisor), summed in f64 in a fixed order.
template <class T>
__global__ void loss_total_kernel(const double* __restrict__ partial, int64_t count, double divisor,
                                  T* __restrict__ out) {
  using A = compute_t<T>;
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[0] = store<T>(A(s / divisor));
}

template <class T>
void launch_loss_total(const double* partial, int64_t count, double divisor, T* out, Stream st) {
  loss_total_kernel<T><<<1, kBlock, 0, st>>>(partial, count, divisor, out);
  MT_CUDA_CHECK_LAUNCH("loss_total_kernel");
}

// ---- softmax -----------------------------------------------------------------------------

// One block per row. rows: offsets of (x, out) for row r; sx, so: strides along the row.
template <class T>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ out, OffsetCalculator<2> rows, int64_t len,
                               int64_t sx, int64_t so, bool log_out) {
  using A = compute_t<T>;
  __shared__ A scratch[32];
  int64_t ro[2];
  rows.offsets(blockIdx.x, ro);
  const T* row = x + ro[0];
  T* orow = out + ro[1];
  A mx, sum;
  row_max_sum(row, len, sx, scratch, mx, sum);
  const A log_sum = dev_log(sum);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    const A z = A(load(row[k * sx])) - mx;  // <= 0: exp cannot overflow
    orow[k * so] = store<T>(log_out ? A(z - log_sum) : A(dev_exp(z) / sum));
  }
}

// softmax: s = sum(dy * y), dx = y (dy - s); log_softmax: s = sum(dy), dx = dy - exp(y) s.
// One block per row; rows: offsets of (y, dy, dx).
template <class T>
__global__ void softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                        OffsetCalculator<3> rows, int64_t len, int64_t sy, int64_t sg, int64_t sd,
                                        bool log_out) {
  using A = compute_t<T>;
  __shared__ A scratch[32];
  int64_t ro[3];
  rows.offsets(blockIdx.x, ro);
  const T* yr = y + ro[0];
  const T* gr = dy + ro[1];
  T* dr = dx + ro[2];
  A s = A(0);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    const A g = load(gr[k * sg]);
    s += log_out ? g : mul_rn(g, A(load(yr[k * sy])));
  }
  s = block_sum(s, scratch);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    const A yk = load(yr[k * sy]), gk = load(gr[k * sg]);
    dr[k * sd] = store<T>(log_out ? A(gk - mul_rn(dev_exp(yk), s)) : A(yk * (gk - s)));
  }
}

// ---- cross entropy and nll_loss -----------------------------------------------------------

// A class loss's options as the kernels see them (tensor/cpu/loss.h).
struct ClassArgs {
  ChanVec w;  // class weights, p == nullptr without
  int64_t ignore_index;
  double eps;  // label smoothing
  bool log_probs;
};

// One row's -log p_c (Note [Cross-entropy options] in tensor/cpu/loss.cpp).
template <class T, class A>
struct DevClassRow {
  const T* row;
  int64_t stride;
  bool log_probs;
  A mx, log_sum, sum;
  __device__ A x(int64_t c) const { return A(load(row[c * stride])); }
  __device__ A nll(int64_t c) const { return log_probs ? A(-x(c)) : A(log_sum - (x(c) - mx)); }
  __device__ A weight(const ChanVec& w, int64_t c) const { return w.p ? A(__double2float_rn(chan_read(w, c))) : A(1); }
};

template <class T, class A>
__device__ DevClassRow<T, A> class_row(const T* row, int64_t C, int64_t stride, bool log_probs, A* scratch) {
  DevClassRow<T, A> r{row, stride, log_probs, A(0), A(0), A(1)};
  if (!log_probs) {  // block-uniform
    row_max_sum(row, C, stride, scratch, r.mx, r.sum);
    r.log_sum = dev_log(r.sum);
  }
  return r;
}

// One block per row r (row-major over the input's dims other than 1 = the target's position).
// rows: offsets of (input, targets, out) -- out's strides are zero when reduced, and then the
// row's loss and target weight go to row_loss[r] and row_w[r] (f64) for class_total_kernel. A
// row whose target is ignored adds nothing; one outside [0, C) is skipped (Note [Cross-entropy
// target check]).
template <class T>
__global__ void cross_entropy_kernel(const T* __restrict__ x, const int64_t* __restrict__ targets, T* __restrict__ out,
                                     double* __restrict__ row_loss, double* __restrict__ row_w,
                                     OffsetCalculator<3> rows, int64_t C, int64_t sx, bool reduce, ClassArgs ca) {
  using A = compute_t<T>;
  __shared__ A scratch[32];
  __shared__ double dscratch[32];
  const int64_t r = blockIdx.x;
  int64_t ro[3];
  rows.offsets(r, ro);
  const int64_t t = targets[ro[1]];
  const bool ignored = t == ca.ignore_index;
  if (ignored || t < 0 || t >= C) {  // the same t in every thread: the whole block leaves
    if (threadIdx.x == 0) {
      if (reduce) row_loss[r] = 0.0, row_w[r] = 0.0;
      else if (ignored) out[ro[2]] = store<T>(A(0));
    }
    return;
  }
  const DevClassRow<T, A> row = class_row(x + ro[0], C, sx, ca.log_probs, scratch);
  double smooth = 0.0;
  if (ca.eps > 0.0) {  // block-uniform
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      smooth += ca.w.p ? double(mul_rn(row.weight(ca.w, c), row.nll(c))) : double(row.nll(c));
    smooth = block_sum(smooth, dscratch);
  }
  if (threadIdx.x != 0) return;
  A loss = row.nll(t);
  if (ca.w.p) loss = mul_rn(row.weight(ca.w, t), loss);
  if (ca.eps > 0.0)
    loss = add_rn(mul_rn(A(1.0 - ca.eps), loss), mul_rn(A(ca.eps / double(C)), __double2float_rn(smooth)));
  if (reduce) {
    row_loss[r] = double(loss);
    row_w[r] = double(row.weight(ca.w, t));
  } else {
    out[ro[2]] = store<T>(loss);
  }
}

// One block: out[0] = round(sum(row_loss) / (mean ? sum(row_w) : 1)), sums in f64.
template <class T>
__global__ void class_total_kernel(const double* __restrict__ row_loss, const double* __restrict__ row_w, int64_t count,
                                   bool mean, T* __restrict__ out) {
  using A = compute_t<T>;
  __shared__ double scratch[32];
  double s = 0.0, ws = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    s += row_loss[i];
    ws += row_w[i];
  }
  s = block_sum(s, scratch);
  ws = block_sum(ws, scratch);
  if (threadIdx.x == 0) out[0] = store<T>(A(s / (mean ? ws : 1.0)));
}

// One block: sums[0] = the weights of the targets that are neither ignored nor out of range (the
// mean's divisor), sums[1] = every class weight (label smoothing's W), each in f64.
__global__ void class_weight_sums_kernel(const int64_t* __restrict__ targets, OffsetCalculator<1> tc, int64_t n,
                                         int64_t C, ClassArgs ca, double* __restrict__ sums) {
  __shared__ double scratch[32];
  double s = 0.0, all = 0.0;
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
    int64_t o[1];
    tc.offsets(p, o);
    const int64_t t = targets[o[0]];
    if (t == ca.ignore_index || t < 0 || t >= C) continue;
    s += ca.w.p ? double(__double2float_rn(chan_read(ca.w, t))) : 1.0;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    all += ca.w.p ? double(__double2float_rn(chan_read(ca.w, c))) : 1.0;
  s = block_sum(s, scratch);
  all = block_sum(all, scratch);
  if (threadIdx.x == 0) sums[0] = s, sums[1] = all;
}

// dx_k = d loss / d x_k * g (ClassRow::grad in tensor/cpu/loss.cpp), g = dy[0] / sums[0] (mean),
// dy[0] (sum) or dy at the row. rows: offsets of (input, targets, dy, dx).
template <class T>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ x, const int64_t* __restrict__ targets,
                                              const T* __restrict__ dy, T* __restrict__ dx, OffsetCalculator<4> rows,
                                              int64_t C, int64_t sx, int64_t sd, bool reduce,
                                              const double* __restrict__ sums, bool mean, ClassArgs ca) {
  using A = compute_t<T>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  int64_t ro[4];
  rows.offsets(r, ro);
  const int64_t t = targets[ro[1]];
  T* drow = dx + ro[3];
  if (t == ca.ignore_index) {
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) drow[k * sd] = store<T>(A(0));
    return;
  }
  if (t < 0 || t >= C) return;  // reported by the check
  const DevClassRow<T, A> row = class_row(x + ro[0], C, sx, ca.log_probs, scratch);
  const A g = reduce ? A(A(load(dy[0])) / A(mean ? sums[0] : 1.0)) : A(load(dy[ro[2]]));
  const A wt = row.weight(ca.w, t);
  const A W = ca.w.p && ca.eps > 0.0 ? A(__double2float_rn(sums[1])) : A(C);  // sums: only with smoothing
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    A d;
    if (ca.log_probs) {
      d = k == t ? A(A(-wt) * g) : A(0);
    } else {
      const A p = A(dev_exp(row.x(k) - row.mx) / row.sum);
      const A hit = k == t ? A(p - A(1)) : p;
      if (!ca.w.p && ca.eps == 0.0) {
        d = A(hit * g);
      } else {
        d = mul_rn(mul_rn(wt, A(1.0 - ca.eps)), hit);
        if (ca.eps > 0.0) d = add_rn(d, mul_rn(A(ca.eps / double(C)), sub_rn(mul_rn(W, p), row.weight(ca.w, k))));
        d = A(d * g);
      }
    }
    drow[k * sd] = store<T>(d);
  }
}

// Queues the check of every target against [0, C) or ignore_index (Note [Cross-entropy target
// check]), with the CPU's message.
void check_targets(const char* op, const Strided& logits, const Strided& targets, int64_t ignore_index) {
  const int64_t C = logits.shape()[1];
  const char* what = std::string(op) == "nll_loss" ? "input " : "logits ";
  defer_index_check(
      targets, C,
      [op = std::string(op), what, lm = logits.meta(), tm = targets.meta(), C](int64_t p, int64_t t) {
    return detail::cat(op, ": target ", t, " (at position ", p, ") is out of range for ", C, " classes (", what, lm,
                       ", targets ", tm, "); targets must lie in [0, ", C, ") or equal ignore_index");
      },
      true, ignore_index);
}

ClassArgs class_args(const Strided& weight, int64_t ignore_index, double label_smoothing, bool log_probs,
                     const char* op) {
  return ClassArgs{chan_vec(weight, op), ignore_index, label_smoothing, log_probs};
}

const char* class_loss_name(bool log_probs) { return log_probs ? "nll_loss" : "cross_entropy"; }

// ---- pointwise losses (BCE with logits, MSE) ----------------------------------------------

// loss_i = max(x, 0) - x t + log1p(exp(-|x|))
struct BceLoss {
  template <class A>
  __device__ A operator()(A x, A t) const {
    return A((x < A(0) ? A(0) : x) - mul_rn(x, t) + dev_log1p(dev_exp(-fabs(x))));
  }
};
// (dx, dt) = ((sigmoid(x) - t) g, -x g), sigmoid without overflow (exp of -|x| only).
struct BceGrad {
  template <class A>
  __device__ void operator()(A x, A t, A g, A& da, A& db) const {
    const A e = dev_exp(-fabs(x));
    const A sig = x >= A(0) ? A(A(1) / (A(1) + e)) : A(e / (A(1) + e));
    da = A((sig - t) * g);
    db = A(-x * g);
  }
};
struct MseLoss {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return A((a - b) * (a - b));
  }
};
struct MseGrad {
  template <class A>
  __device__ void operator()(A a, A b, A g, A& da, A& db) const {
    const A d = A(A(2) * (a - b)) * g;
    da = d;
    db = A(-d);
  }
};

// binary_cross_entropy, l1_loss, smooth_l1_loss: the shared formulas (tensor/core/loss_formulas.h).
struct DevLossMath {
  static __device__ __forceinline__ float log(float v) { return dev_log(v); }
  static __device__ __forceinline__ float log1p(float v) { return dev_log1p(v); }
};
struct BceProbLoss {
  template <class A>
  __device__ A operator()(A x, A t) const {
    return formulas::bce_forward<DevLossMath>(x, t);
  }
};
struct BceProbGrad {
  template <class A>
  __device__ void operator()(A x, A t, A g, A& da, A& db) const {
    da = formulas::bce_grad_input(x, t, g);
    db = formulas::bce_grad_target<DevLossMath>(x, g);
  }
};
struct L1Loss {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return formulas::l1_forward(a, b);
  }
};
struct L1Grad {
  template <class A>
  __device__ void operator()(A a, A b, A g, A& da, A& db) const {
    da = formulas::l1_grad(a, b, g);
    db = A(-da);
  }
};
struct SmoothL1Loss {
  float beta;
  template <class A>
  __device__ A operator()(A a, A b) const {
    return formulas::smooth_l1_forward(a, b, A(beta));
  }
};
struct SmoothL1Grad {
  float beta;
  template <class A>
  __device__ void operator()(A a, A b, A g, A& da, A& db) const {
    da = formulas::smooth_l1_grad(a, b, A(beta), g);
    db = A(-da);
  }
};

// Unreduced: out[i] = f(a[i], b[i]). Reduced: each block sums its elements' losses in f64 in
// a fixed grid-stride order into partial[blockIdx.x]. calc: offsets of (a, b, out).
template <class T, class F>
__global__ void pointwise_loss_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                      double* __restrict__ partial, OffsetCalculator<3> calc, int64_t numel,
                                      bool reduce, F f) {
  using A = compute_t<T>;
  __shared__ double scratch[32];
  double total = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    calc.offsets(i, o);
    const A l = f(A(load(a[o[0]])), A(load(b[o[1]])));
    if (reduce) total += double(l);
    else out[o[2]] = store<T>(l);
  }
  if (!reduce) return;  // uniform over the block
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// (da[i], db[i]) = f(a[i], b[i], g[i]), g = dy[0] / divisor when reduced; a null da or db is
// skipped. calc: offsets of (a, b, dy, da, db) (zeros for dy when reduced, for an absent output).
template <class T, class F>
__global__ void pointwise_loss_backward_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                               const T* __restrict__ dy, T* __restrict__ da, T* __restrict__ db,
                                               OffsetCalculator<5> calc, int64_t numel, bool reduce, double divisor,
                                               F f) {
  using A = compute_t<T>;
  const A g0 = reduce ? A(A(load(dy[0])) / A(divisor)) : A(0);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[5];
    calc.offsets(i, o);
    const A g = reduce ? g0 : A(load(dy[o[2]]));
    A ga, gb;
    f(A(load(a[o[0]])), A(load(b[o[1]])), g, ga, gb);
    if (da) da[o[3]] = store<T>(ga);
    if (db) db[o[4]] = store<T>(gb);
  }
}

// Blocks of a reduced pointwise loss: fixed by numel alone, so the summation order is too.
unsigned loss_blocks(int64_t numel) { return std::min<unsigned>(grid_for(numel, kBlock * 4), 512u); }

template <class F>
void pointwise_loss(const char* name, const Strided& a, const Strided& b, bool reduce, double divisor,
                    const Strided& out, F f) {
  DeviceGuard guard(a.device().index);
  const Stream st = stream_of(a);
  const int64_t numel = a.numel();
  dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    T* po = static_cast<T*>(out.raw_data());
    if (numel == 0) {  // an empty reduced loss is 0 / divisor, as the CPU's empty sum
      if (reduce) {
        Workspace zero = workspace<double>(1, a.device());
        memset_async(zero.raw_data(), 0, sizeof(double), st);
        launch_loss_total<T>(static_cast<const double*>(zero.raw_data()), 1, divisor, po, st);
      }
      return;
    }
    const OffsetCalculator<3> calc =
        make_offset_calculator<3>(a.shape(), {a.strides(), b.strides(), elem_strides(out, reduce, a.shape().size())});
    const unsigned blocks = reduce ? loss_blocks(numel) : grid_for(numel);
    Workspace partial;
    double* pp = nullptr;
    if (reduce) {
      partial = workspace<double>(int64_t(blocks), a.device());
      pp = static_cast<double*>(partial.raw_data());
    }
    pointwise_loss_kernel<T, F><<<blocks, kBlock, 0, st>>>(
        static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()), po, pp, calc, numel, reduce, f);
    MT_CUDA_CHECK_LAUNCH("pointwise_loss_kernel");
    if (reduce) launch_loss_total<T>(pp, int64_t(blocks), divisor, po, st);
  });
}

template <class F>
void pointwise_loss_backward(const char* name, const Strided& a, const Strided& b, const Strided& dy, bool reduce,
                             double divisor, const Strided& da, const Strided& db, F f) {
  DeviceGuard guard(a.device().index);
  const int64_t numel = a.numel();
  if (numel == 0 || (!da.defined() && !db.defined())) return;
  const Stream st = stream_of(a);
  const size_t nd = a.shape().size();
  const Shape zero(nd, 0);
  const OffsetCalculator<5> calc =
      make_offset_calculator<5>(a.shape(), {a.strides(), b.strides(), elem_strides(dy, reduce, nd),
                                            da.defined() ? da.strides() : zero, db.defined() ? db.strides() : zero});
  dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    T* pda = da.defined() ? static_cast<T*>(da.raw_data()) : nullptr;
    T* pdb = db.defined() ? static_cast<T*>(db.raw_data()) : nullptr;
    pointwise_loss_backward_kernel<T, F><<<grid_for(numel), kBlock, 0, st>>>(
        static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()), static_cast<const T*>(dy.raw_data()),
        pda, pdb, calc, numel, reduce, divisor, f);
    MT_CUDA_CHECK_LAUNCH("pointwise_loss_backward_kernel");
  });
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void softmax(const Strided& x, int64_t dim, bool log_out, const Strided& out) {
  DeviceGuard guard(x.device().index);
  const RowView xv = row_view(x, dim), ov = row_view(out, dim);
  const int64_t rows = numel_of(xv.outer_shape);
  if (rows == 0 || xv.len == 0) return;
  const char* name = log_out ? "log_softmax" : "softmax";
  MT_CHECK(rows <= INT_MAX, name, ": ", rows, " rows exceed the CUDA grid (", x.meta(), ")");
  const OffsetCalculator<2> calc = make_offset_calculator<2>(xv.outer_shape, {xv.outer_strides, ov.outer_strides});
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<unsigned(rows), row_threads(xv.len), 0, stream_of(x)>>>(static_cast<const T*>(x.raw_data()),
                                                                                static_cast<T*>(out.raw_data()), calc,
                                                                                xv.len, xv.stride, ov.stride, log_out);
    MT_CUDA_CHECK_LAUNCH("softmax_kernel");
  });
}

void softmax_backward(const Strided& y, const Strided& dy, int64_t dim, bool log_out, const Strided& dx) {
  DeviceGuard guard(y.device().index);
  const RowView yv = row_view(y, dim), gv = row_view(dy, dim), dv = row_view(dx, dim);
  const int64_t rows = numel_of(yv.outer_shape);
  if (rows == 0 || yv.len == 0) return;
  const char* name = log_out ? "log_softmax backward" : "softmax backward";
  MT_CHECK(rows <= INT_MAX, name, ": ", rows, " rows exceed the CUDA grid (", y.meta(), ")");
  const OffsetCalculator<3> calc =
      make_offset_calculator<3>(yv.outer_shape, {yv.outer_strides, gv.outer_strides, dv.outer_strides});
  dispatch_floating(y.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<unsigned(rows), row_threads(yv.len), 0, stream_of(y)>>>(
        static_cast<const T*>(y.raw_data()), static_cast<const T*>(dy.raw_data()), static_cast<T*>(dx.raw_data()), calc,
        yv.len, yv.stride, gv.stride, dv.stride, log_out);
    MT_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
  });
}

void cross_entropy(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                   double label_smoothing, bool log_probs, bool reduce, bool mean, const Strided& out) {
  DeviceGuard guard(logits.device().index);
  const Stream st = stream_of(logits);
  const RowView lv = row_view(logits, 1);
  const int64_t rows = numel_of(lv.outer_shape);
  const char* op = class_loss_name(log_probs);
  MT_CHECK(rows <= INT_MAX, op, ": ", rows, " rows exceed the CUDA grid (", logits.meta(), ")");
  const ClassArgs ca = class_args(weight, ignore_index, label_smoothing, log_probs, op);
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* po = static_cast<T*>(out.raw_data());
    // Per-row losses and target weights (f64) when reduced; one word each for the empty loss.
    const int64_t words = std::max<int64_t>(rows, 1);
    Workspace row_loss = reduce ? workspace<double>(2 * words, logits.device()) : Workspace();
    double* pl = reduce ? static_cast<double*>(row_loss.raw_data()) : nullptr;
    double* pw = reduce ? pl + words : nullptr;
    if (rows == 0) {  // an empty reduced loss is 0 / divisor, as the CPU's empty sum
      if (reduce) {
        memset_async(pl, 0, 2 * sizeof(double), st);
        class_total_kernel<T><<<1, kBlock, 0, st>>>(pl, pw, 1, mean, po);
        MT_CUDA_CHECK_LAUNCH("class_total_kernel");
      }
      return;
    }
    check_targets(op, logits, targets, ignore_index);
    const OffsetCalculator<3> calc = make_offset_calculator<3>(
        lv.outer_shape, {lv.outer_strides, targets.strides(), elem_strides(out, reduce, lv.outer_shape.size())});
    cross_entropy_kernel<T><<<unsigned(rows), row_threads(lv.len), 0, st>>>(
        static_cast<const T*>(logits.raw_data()), static_cast<const int64_t*>(targets.raw_data()), po, pl, pw, calc,
        lv.len, lv.stride, reduce, ca);
    MT_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
    if (reduce) {
      class_total_kernel<T><<<1, kBlock, 0, st>>>(pl, pw, rows, mean, po);
      MT_CUDA_CHECK_LAUNCH("class_total_kernel");
    }
  });
}

void cross_entropy_backward(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                            double label_smoothing, bool log_probs, const Strided& dy, bool reduce, bool mean,
                            const Strided& dlogits) {
  DeviceGuard guard(logits.device().index);
  const Stream st = stream_of(logits);
  const RowView lv = row_view(logits, 1), dv = row_view(dlogits, 1);
  const int64_t rows = numel_of(lv.outer_shape);
  if (rows == 0) return;
  const char* op = class_loss_name(log_probs);
  MT_CHECK(rows <= INT_MAX, op, " backward: ", rows, " rows exceed the CUDA grid (", logits.meta(), ")");
  const ClassArgs ca = class_args(weight, ignore_index, label_smoothing, log_probs, op);
  const OffsetCalculator<4> calc = make_offset_calculator<4>(
      lv.outer_shape,
      {lv.outer_strides, targets.strides(), elem_strides(dy, reduce, lv.outer_shape.size()), dv.outer_strides});
  // The mean's divisor and the sum of the class weights, when the row kernel needs them.
  Workspace sums;
  double* ps = nullptr;
  if ((reduce && mean) || (ca.w.p && label_smoothing > 0.0)) {
    sums = workspace<double>(2, logits.device());
    ps = static_cast<double*>(sums.raw_data());
    const OffsetCalculator<1> tc = make_offset_calculator<1>(targets.shape(), {targets.strides()});
    class_weight_sums_kernel<<<1, kBlock, 0, st>>>(static_cast<const int64_t*>(targets.raw_data()), tc, targets.numel(),
                                                   lv.len, ca, ps);
    MT_CUDA_CHECK_LAUNCH("class_weight_sums_kernel");
  }
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    check_targets(op, logits, targets, ignore_index);
    cross_entropy_backward_kernel<T><<<unsigned(rows), row_threads(lv.len), 0, st>>>(
        static_cast<const T*>(logits.raw_data()), static_cast<const int64_t*>(targets.raw_data()),
        static_cast<const T*>(dy.raw_data()), static_cast<T*>(dlogits.raw_data()), calc, lv.len, lv.stride, dv.stride,
        reduce, ps, reduce && mean, ca);
    MT_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  });
}

void bce_with_logits(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out) {
  pointwise_loss("binary_cross_entropy_with_logits", x, t, reduce, divisor, out, BceLoss{});
}

void bce_with_logits_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor,
                              const Strided& dx, const Strided& dt) {
  pointwise_loss_backward("binary_cross_entropy_with_logits backward", x, t, dy, reduce, divisor, dx, dt, BceGrad{});
}

void bce(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out) {
  // The CPU's check of the probabilities (Note [Deferred device checks]).
  defer_range_check(x, 0.0, 1.0, [xm = x.meta(), tm = t.meta()](int64_t p, int64_t bits) {
    return detail::cat("binary_cross_entropy: probability ", std::bit_cast<double>(bits), " (at position ", p,
                       ") is outside [0, 1] (probs ", xm, ", targets ", tm,
                       "); it takes probabilities, such as a Sigmoid's output (logits go to "
                       "binary_cross_entropy_with_logits)");
  });
  pointwise_loss("binary_cross_entropy", x, t, reduce, divisor, out, BceProbLoss{});
}

void bce_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor, const Strided& dx,
                  const Strided& dt) {
  pointwise_loss_backward("binary_cross_entropy backward", x, t, dy, reduce, divisor, dx, dt, BceProbGrad{});
}

void l1_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out) {
  pointwise_loss("l1_loss", a, b, reduce, divisor, out, L1Loss{});
}

void l1_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                      const Strided& da, const Strided& db) {
  pointwise_loss_backward("l1_loss backward", a, b, dy, reduce, divisor, da, db, L1Grad{});
}

void smooth_l1_loss(const Strided& a, const Strided& b, double beta, bool reduce, double divisor, const Strided& out) {
  pointwise_loss("smooth_l1_loss", a, b, reduce, divisor, out, SmoothL1Loss{float(beta)});
}

void smooth_l1_loss_backward(const Strided& a, const Strided& b, double beta, const Strided& dy, bool reduce,
                             double divisor, const Strided& da, const Strided& db) {
  pointwise_loss_backward("smooth_l1_loss backward", a, b, dy, reduce, divisor, da, db, SmoothL1Grad{float(beta)});
}

void mse_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out) {
  pointwise_loss("mse_loss", a, b, reduce, divisor, out, MseLoss{});
}

void mse_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                       const Strided& da, const Strided& db) {
  pointwise_loss_backward("mse_loss backward", a, b, dy, reduce, divisor, da, db, MseGrad{});
}

}  // namespace mixtape::cuda
