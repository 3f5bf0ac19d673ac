// Fused optimizer updates on the GPU: one pass per parameter reads param, grad and state through
// their strides (OffsetCalculator) and writes param and state in place. Each launcher mirrors the
// CPU kernel of the same name in tensor/cpu/optim.cpp (Note [Update kernel dtypes], Note [16-bit
// update rules]); the rules are documented in tensor/ops/optim.h, and their arithmetic is
// tensor/core/update_formulas.h, the CPU's own code.
//
// Note [Bit-identical updates]
// The updates use only + - * / sqrt, so the GPU reproduces the CPU bit for bit when it evaluates
// the same expression tree in the same type with each operation rounded on its own: the formulas
// are shared (update_formulas.h), the build forbids contracting them into FMAs (--fmad=false,
// Note [No contracted multiply-adds] in CMakeLists.txt), nvcc's / and sqrt are correctly rounded
// by default, host scalars (bias corrections, 1 - beta, -lr) come from the same host functions,
// and 16-bit stores round with the device twins of the CPU's round_to_* (store, store_stochastic;
// Note [Rounding on the device]). Stochastic rounding draws rounding_word(seed, offset + i) for
// the element of row-major index i (formulas::weight_word, Note [Rounding words] in
// tensor/core/rng.h), the word the CPU draws for it, so a fixed (seed, offset) gives the CPU's
// bits too.
//
// Master weights: the fp32 kernels take the optional 16-bit copy of the master (Note [Fused
// master copy] in tensor/ops/optim.h) as one more operand, Q* q, written with store<Q> of the new
// fp32 value in the same pass; without a copy Q is float, q aliases the parameter's layout and
// has_copy is false, so it is never written.
#include <algorithm>
#include <cmath>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "tensor/core/update_formulas.h"

namespace mixtape::cuda {

namespace {

// N operands of one shape, each through its own strides (no broadcasting of shape: the
// front-ends check equal shapes; a zero stride in a read-only operand is honoured).
template <int N>
OffsetCalculator<N> same_shape_offsets(const Shape& shape, const std::array<const Strided*, N>& ts) {
  std::array<Shape, N> st;
  for (int k = 0; k < N; ++k) st[size_t(k)] = ts[size_t(k)]->strides();
  return make_offset_calculator<N>(shape, st);
}

#define MT_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// The device's side of the shared update formulas (tensor/core/update_formulas.h): its square
// root, and for the 16-bit rules (P = __half or __nv_bfloat16) its loads and its roundings.
template <class P>
struct DeviceUpdate {
  static __device__ __forceinline__ float sqrt(float x) { return sqrt_rn(x); }
  static __device__ __forceinline__ float load(P v) { return cuda::load(v); }
  static __device__ __forceinline__ P nearest(float v) { return store<P>(v); }
  static __device__ __forceinline__ P stochastic(float v, uint32_t r) { return store_stochastic<P>(v, r); }
};

// ---- fp32 updates -------------------------------------------------------------------------------

// Writes the new master value v into the rounded copy (Note [Fused master copy]).
template <class Q>
__device__ __forceinline__ void write_copy(Q* q, bool has_copy, float v) {
  if (has_copy) *q = store<Q>(v);
}

// torch.optim.SGD without momentum. Operands: param, grad, copy.
template <class P, class Q>
__global__ void sgd_plain_kernel(P* p, const P* g, Q* q, bool has_copy, OffsetCalculator<3> oc, int64_t n,
                                 formulas::SgdConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[3];
    oc.offsets(i, o);
    const P next = formulas::sgd(p[o[0]], g[o[1]], k);
    p[o[0]] = next;
    write_copy(q + o[2], has_copy, next);
  }
}

// torch.optim.SGD with momentum. Operands: param, grad, momentum buffer, copy.
template <class P, class Q>
__global__ void sgd_momentum_kernel(P* p, const P* g, P* b, Q* q, bool has_copy, OffsetCalculator<4> oc, int64_t n,
                                    formulas::SgdConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    const P prev = k.first ? P(0) : b[o[2]];  // not read at step 1
    P buf;
    const P next = formulas::sgd_momentum(p[o[0]], g[o[1]], prev, k, buf);
    b[o[2]] = buf;
    p[o[0]] = next;
    write_copy(q + o[3], has_copy, next);
  }
}

// Adam / AdamW. Operands: param, grad, exp_avg, exp_avg_sq, copy.
template <class P, class Q>
__global__ void adam_kernel(P* p, const P* g, P* m, P* v, Q* q, bool has_copy, OffsetCalculator<5> oc, int64_t n,
                            formulas::AdamConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[5];
    oc.offsets(i, o);
    P mv = m[o[2]], vv = v[o[3]];
    const P next = formulas::adam<DeviceUpdate<P>>(p[o[0]], g[o[1]], mv, vv, k);
    m[o[2]] = mv;
    v[o[3]] = vv;
    p[o[0]] = next;
    write_copy(q + o[4], has_copy, next);
  }
}

// Adam / AdamW with amsgrad. Operands: param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, copy.
template <class P, class Q>
__global__ void adam_amsgrad_kernel(P* p, const P* g, P* m, P* v, P* vm, Q* q, bool has_copy, OffsetCalculator<6> oc,
                                    int64_t n, formulas::AdamConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[6];
    oc.offsets(i, o);
    P mv = m[o[2]], vv = v[o[3]], vmax = vm[o[4]];
    const P next = formulas::adam_amsgrad<DeviceUpdate<P>>(p[o[0]], g[o[1]], mv, vv, vmax, k);
    m[o[2]] = mv;
    v[o[3]] = vv;
    vm[o[4]] = vmax;
    p[o[0]] = next;
    write_copy(q + o[5], has_copy, next);
  }
}

// torch.optim.RMSprop. Operands: param, grad, square_avg, grad_avg, momentum buffer, copy (the
// buffers a setting does not use alias square_avg's layout and are neither read nor written).
template <class P, class Q>
__global__ void rmsprop_kernel(P* p, const P* g, P* sq, P* ga, P* b, Q* q, bool has_copy, OffsetCalculator<6> oc,
                               int64_t n, formulas::RmspropConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[6];
    oc.offsets(i, o);
    P sv = sq[o[2]];
    P gv = k.centered ? ga[o[3]] : P(0);
    P bv = k.use_mom ? b[o[4]] : P(0);
    const P next = formulas::rmsprop<DeviceUpdate<P>>(p[o[0]], g[o[1]], sv, gv, bv, k);
    sq[o[2]] = sv;
    if (k.centered) ga[o[3]] = gv;
    if (k.use_mom) b[o[4]] = bv;
    p[o[0]] = next;
    write_copy(q + o[5], has_copy, next);
  }
}

// torch.optim.Adagrad. Operands: param, grad, sum, copy.
template <class P, class Q>
__global__ void adagrad_kernel(P* p, const P* g, P* s, Q* q, bool has_copy, OffsetCalculator<4> oc, int64_t n,
                               formulas::AdagradConsts<P> k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    P sv = s[o[2]];
    const P next = formulas::adagrad<DeviceUpdate<P>>(p[o[0]], g[o[1]], sv, k);
    s[o[2]] = sv;
    p[o[0]] = next;
    write_copy(q + o[3], has_copy, next);
  }
}

// Only (f32, f32) has a kernel: the CPU also has (f64, f64), but f64 stays on the CPU
// (Note [Update kernel dtypes] in tensor/cpu/optim.cpp).
template <class F>
void dispatch_update(const char* op, DType param, DType state, F&& f) {
  if (param == DType::f32 && state == DType::f32) return f(float{});
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(param), " parameters with ", dtype_name(state), " state"));
}

// ---- 16-bit update rules (Note [16-bit update rules] in tensor/cpu/optim.cpp) -------------------

// Algorithm 2 / 3 and the nearest baseline. Operands: param, grad, momentum (param's layout when
// unused, never dereferenced), Kahan buffer (likewise).
template <class P>
__global__ void sgd16_kernel(P* p, const float* g, P* m, P* c, OffsetCalculator<4> oc, int64_t n,
                             formulas::Sgd16Consts k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    formulas::sgd16<DeviceUpdate<P>>(p + o[0], g[o[1]], m + o[2], c + o[3], formulas::weight_word(k, uint64_t(i)), k);
  }
}

// Algorithm 4 / 5 and the nearest baseline. Operands: param, grad, exp_avg, exp_avg_sq,
// max_exp_avg_sq (amsgrad), Kahan buffer (param's layout when unused, never dereferenced).
template <class P>
__global__ void adamw16_kernel(P* p, const float* g, P* m, P* v, P* vm, P* c, OffsetCalculator<6> oc, int64_t n,
                               formulas::AdamW16Consts k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[6];
    oc.offsets(i, o);
    formulas::adamw16<DeviceUpdate<P>>(p + o[0], g[o[1]], m + o[2], v + o[3], vm + o[4], c + o[5],
                                       formulas::weight_word(k, uint64_t(i)), k);
  }
}

// RMSprop with 16-bit state. Operands: param, grad, square_avg, grad_avg, momentum buffer, Kahan
// buffer (param's layout when unused, never dereferenced).
template <class P>
__global__ void rmsprop16_kernel(P* p, const float* g, P* sq, P* ga, P* b, P* c, OffsetCalculator<6> oc, int64_t n,
                                 formulas::Rmsprop16Consts k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[6];
    oc.offsets(i, o);
    formulas::rmsprop16<DeviceUpdate<P>>(p + o[0], g[o[1]], sq + o[2], ga + o[3], b + o[4], c + o[5],
                                         formulas::weight_word(k, uint64_t(i)), k);
  }
}

// Adagrad with a 16-bit accumulator. Operands: param, grad, sum, Kahan buffer (likewise).
template <class P>
__global__ void adagrad16_kernel(P* p, const float* g, P* s, P* c, OffsetCalculator<4> oc, int64_t n,
                                 formulas::Adagrad16Consts k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[4];
    oc.offsets(i, o);
    formulas::adagrad16<DeviceUpdate<P>>(p + o[0], g[o[1]], s + o[2], c + o[3], formulas::weight_word(k, uint64_t(i)),
                                         k);
  }
}

template <class F>
void dispatch_16bit(const char* op, DType t, F&& f) {
  if (t == DType::bf16) return f(__nv_bfloat16{});
  if (t == DType::f16) return f(__half{});
  throw Error(detail::cat(op, ": no kernel for ", dtype_name(t), " parameters (need bf16 or f16)"));
}

// The rounded copy's element type (Note [Fused master copy]): f(Q{}) with Q = __half or
// __nv_bfloat16, or float (never written) when there is no copy.
template <class F>
void dispatch_copy(const Strided& copy, F&& f) {
  if (!copy.defined()) return f(float{});
  dispatch_16bit("rounded copy", copy.dtype(), f);
}

// The copy operand of the fp32 kernels: its pointer and layout, or the parameter's (never written).
template <class Q>
Q* copy_data(const Strided& copy, const Strided& param) {
  return static_cast<Q*>(copy.defined() ? copy.raw_data() : param.raw_data());
}

// ---- the device-side step: every parameter at once (Note [Scaled step] in optim/scaled_step.cpp) ----
//
// Note [Multi-tensor launches]
// A step over P parameters launches a fixed number of kernels, not a few per parameter: the
// tensors go to the kernel by value, kMultiTensors at a time (pointers, sizes and per-tensor
// settings in a struct of under 4 KiB, the kernel-parameter limit), each split into chunks of
// kChunk elements, and a grid of kStepBlocks blocks walks the chunks of all of them (block b takes
// chunks b, b + kStepBlocks, ...). The grid does not depend on the GPU, so every sum runs in the
// same order on any device and the step is deterministic. Every operand is contiguous (the
// front-end checks). More than kMultiTensors tensors take one launch per kMultiTensors.

inline constexpr int kMultiTensors = 32;
inline constexpr int64_t kChunk = 16384;
inline constexpr int kStepBlocks = 64;

// Where each tensor's chunks start in the list's run of chunks, and the tensor that holds chunk c.
struct ChunkMap {
  int64_t first[kMultiTensors + 1];  // first[t]: the first chunk of tensor t; first[count] = all chunks
  int count;

  __device__ int tensor_of(int64_t c) const {
    int t = 0;
    while (c >= first[t + 1]) ++t;
    return t;
  }
};

// Builds first[] for sizes n[0..count).
void map_chunks(ChunkMap& map, const int64_t* n, int count) {
  map.count = count;
  map.first[0] = 0;
  for (int t = 0; t < count; ++t) map.first[t + 1] = map.first[t] + (n[t] + kChunk - 1) / kChunk;
}

enum class GradType : uint8_t { f32, f16, bf16 };

__device__ __forceinline__ float load_grad(const void* g, GradType t, int64_t i) {
  switch (t) {
    case GradType::f16: return load(static_cast<const __half*>(g)[i]);
    case GradType::bf16: return load(static_cast<const __nv_bfloat16*>(g)[i]);
    default: return static_cast<const float*>(g)[i];
  }
}

struct UnscaleList {
  const void* g[kMultiTensors];
  float* out[kMultiTensors];
  int64_t n[kMultiTensors];
  double inv_scale[kMultiTensors];  // 1 / the gradient's own (host) scale
  GradType type[kMultiTensors];
  ChunkMap map;
};

// Steps 1 and 3 (and the sums of 4): out = g / (alpha S) in fp32 -- alpha the gradient's own
// scale, S the device loss scale, both powers of two, so one rounding of the exact quotient, as
// ScaledGrad::unscaled computes it -- and this block's partials[3]: sum of out^2 (in double, where
// the square of a float is exact), max |out| over the finite elements, and whether any stored
// value or its unscaled value is inf or NaN (the host check's found_inf: an unscaled value past
// FLT_MAX counts as an overflow).
__global__ void unscale_check_kernel(UnscaleList L, const float* __restrict__ loss_scale,
                                     double* __restrict__ partials) {
  __shared__ double scratch[32];
  const double s = double(*loss_scale);
  double sumsq = 0.0, mx = 0.0, bad = 0.0;
  for (int64_t c = blockIdx.x; c < L.map.first[L.map.count]; c += gridDim.x) {
    const int t = L.map.tensor_of(c);
    const int64_t begin = (c - L.map.first[t]) * kChunk, end = min(begin + kChunk, L.n[t]);
    const double inv = L.inv_scale[t] / s;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = load_grad(L.g[t], L.type[t], i);
      const float u = float(double(v) * inv);
      L.out[t][i] = u;
      if (!isfinite(v) || !isfinite(u)) {
        bad = 1.0;
      } else {
        sumsq += double(u) * double(u);
        mx = fmax(mx, double(fabsf(u)));
      }
    }
  }
  sumsq = block_sum(sumsq, scratch);
  mx = block_max(mx, scratch, 0.0);
  bad = block_max(bad, scratch, 0.0);
  if (threadIdx.x == 0) {
    double* p = partials + 3 * int64_t(blockIdx.x);
    p[0] = sumsq;
    p[1] = mx;
    p[2] = bad;
  }
}

// Step 2 and the clip factor of step 4, one thread: sums the partials in block order, applies the
// loss-scale rule (formulas::loss_scale_update, the host's code) and writes the state
// (formulas::StepF, StepI) that the update kernels and the host read.
__global__ void decide_kernel(const double* __restrict__ partials, int rows, float* __restrict__ f,
                              int64_t* __restrict__ i, formulas::LossScaleRule rule, double max_grad_norm) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double sumsq = 0.0, mx = 0.0;
  bool found_inf = false;
  for (int r = 0; r < rows; ++r) {
    sumsq += partials[3 * r];
    mx = fmax(mx, partials[3 * r + 1]);
    found_inf = found_inf || partials[3 * r + 2] != 0.0;
  }
  const double norm = found_inf ? double(INFINITY) : sqrt(sumsq);
  float scale = f[formulas::kScale];
  int64_t tracker = i[formulas::kTracker];
  const bool apply = formulas::loss_scale_update(rule, found_inf, scale, tracker);
  f[formulas::kScaleUsed] = f[formulas::kScale];
  f[formulas::kScale] = scale;
  f[formulas::kApplied] = apply ? 1.0f : 0.0f;
  f[formulas::kFoundInf] = found_inf ? 1.0f : 0.0f;
  f[formulas::kMaxAbs] = float(mx);
  f[formulas::kGradNorm] = apply ? float(norm) : 0.0f;
  f[formulas::kClip] = apply && max_grad_norm > 0.0 ? float(formulas::clip_coefficient(norm, max_grad_norm)) : 1.0f;
  i[formulas::kTracker] = tracker;
  i[formulas::kSteps] += 1;
  if (!apply) i[formulas::kSkipped] += 1;
}

enum class CopyType : uint8_t { none, f16, bf16 };

struct AdamList {
  float* p[kMultiTensors];
  const float* g[kMultiTensors];
  float* m[kMultiTensors];
  float* v[kMultiTensors];
  void* q[kMultiTensors];  // the rounded 16-bit copy (Note [Fused master copy]), or null
  CopyType q_type[kMultiTensors];
  int64_t n[kMultiTensors];
  double lr[kMultiTensors], weight_decay[kMultiTensors];  // the parameter's group's
  int32_t step_index[kMultiTensors];                      // the parameter's row in `steps`
  ChunkMap map;
};

// Step 5 for every tensor of the list: skipped entirely unless control[kApplied]; the gradient
// times control[kClip] when clipping (as `coef * g` on the host), then formulas::adam at the
// parameter's next step count steps[step_index] + 1, and the rounded copy in the same pass.
__global__ void multi_adam_kernel(AdamList L, const float* __restrict__ control, const int64_t* __restrict__ steps,
                                  double beta1, double beta2, double eps, bool decoupled) {
  if (control[formulas::kApplied] == 0.0f) return;
  const float coef = control[formulas::kClip];
  for (int64_t c = blockIdx.x; c < L.map.first[L.map.count]; c += gridDim.x) {
    const int t = L.map.tensor_of(c);
    const int64_t begin = (c - L.map.first[t]) * kChunk, end = min(begin + kChunk, L.n[t]);
    const formulas::AdamConsts<float> k = formulas::adam_consts<float>(L.lr[t], beta1, beta2, eps, L.weight_decay[t],
                                                                       decoupled, steps[L.step_index[t]] + 1);
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
      float g = L.g[t][e];
      if (coef != 1.0f) g = g * coef;
      float mv = L.m[t][e], vv = L.v[t][e];
      const float next = formulas::adam<DeviceUpdate<float>>(L.p[t][e], g, mv, vv, k);
      L.m[t][e] = mv;
      L.v[t][e] = vv;
      L.p[t][e] = next;
      if (L.q_type[t] == CopyType::f16) static_cast<__half*>(L.q[t])[e] = store<__half>(next);
      else if (L.q_type[t] == CopyType::bf16) static_cast<__nv_bfloat16*>(L.q[t])[e] = store<__nv_bfloat16>(next);
    }
  }
}

// After the updates: steps[index[k]] += 1 for the updated parameters, when the step was applied.
struct IndexList {
  int32_t index[kMultiTensors];
  int count;
};
__global__ void advance_steps_kernel(int64_t* __restrict__ steps, IndexList L, const float* __restrict__ control) {
  if (control[formulas::kApplied] == 0.0f) return;
  for (int k = threadIdx.x; k < L.count; k += blockDim.x) steps[L.index[k]] += 1;
}

void check_contiguous(const char* op, const Strided& t, const char* what) {
  MT_CHECK(t.is_contiguous(), op, ": ", what, " ", t.meta(), " must be contiguous (Note [Multi-tensor launches])");
}

}  // namespace

void sgd_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, const Strided& rounded_copy) {
  DeviceGuard guard(param.device().index);
  const DType state_dtype = momentum != 0.0 ? momentum_buf.dtype() : param.dtype();
  const int64_t n = param.numel();
  dispatch_update("sgd_update", param.dtype(), state_dtype, [&](auto tag) {
    using P = decltype(tag);  // == compute type and grad type
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      const formulas::SgdConsts<P> k = formulas::sgd_consts<P>(lr, momentum, dampening, weight_decay, nesterov, step);
      const bool has_copy = rounded_copy.defined();
      const Strided& qt = has_copy ? rounded_copy : param;
      P* p = param.data<P>();
      const P* g = grad.data<P>();
      Q* q = copy_data<Q>(rounded_copy, param);
      const Stream s = stream_of(param);
      if (momentum == 0.0) {
        sgd_plain_kernel<P, Q><<<grid_for(n), kBlock, 0, s>>>(
            p, g, q, has_copy, same_shape_offsets<3>(param.shape(), {&param, &grad, &qt}), n, k);
        MT_CUDA_CHECK_LAUNCH("sgd_plain_kernel");
        return;
      }
      sgd_momentum_kernel<P, Q><<<grid_for(n), kBlock, 0, s>>>(
          p, g, momentum_buf.data<P>(), q, has_copy,
          same_shape_offsets<4>(param.shape(), {&param, &grad, &momentum_buf, &qt}), n, k);
      MT_CUDA_CHECK_LAUNCH("sgd_momentum_kernel");
    });
  });
}

void adam_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                 const Strided& max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
                 bool decoupled, int64_t step, const Strided& rounded_copy) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_update(decoupled ? "adamw_update" : "adam_update", param.dtype(), exp_avg.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      const formulas::AdamConsts<P> k = formulas::adam_consts<P>(lr, beta1, beta2, eps, weight_decay, decoupled, step);
      const bool has_copy = rounded_copy.defined();
      const Strided& qt = has_copy ? rounded_copy : param;
      if (max_exp_avg_sq.defined()) {
        adam_amsgrad_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
            param.data<P>(), grad.data<P>(), exp_avg.data<P>(), exp_avg_sq.data<P>(), max_exp_avg_sq.data<P>(),
            copy_data<Q>(rounded_copy, param), has_copy,
            same_shape_offsets<6>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq, &qt}), n, k);
        MT_CUDA_CHECK_LAUNCH("adam_amsgrad_kernel");
        return;
      }
      adam_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
          param.data<P>(), grad.data<P>(), exp_avg.data<P>(), exp_avg_sq.data<P>(), copy_data<Q>(rounded_copy, param),
          has_copy, same_shape_offsets<5>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &qt}), n, k);
      MT_CUDA_CHECK_LAUNCH("adam_kernel");
    });
  });
}

void rmsprop_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                    const Strided& momentum_buf, double lr, double alpha, double eps, double weight_decay,
                    double momentum, bool centered, const Strided& rounded_copy) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_update("rmsprop_update", param.dtype(), square_avg.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      const formulas::RmspropConsts<P> k =
          formulas::rmsprop_consts<P>(lr, alpha, eps, weight_decay, momentum, centered);
      const bool has_copy = rounded_copy.defined();
      const Strided& qt = has_copy ? rounded_copy : param;
      const Strided& at = k.centered ? grad_avg : square_avg;
      const Strided& bt = k.use_mom ? momentum_buf : square_avg;
      rmsprop_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
          param.data<P>(), grad.data<P>(), square_avg.data<P>(), at.data<P>(), bt.data<P>(),
          copy_data<Q>(rounded_copy, param), has_copy,
          same_shape_offsets<6>(param.shape(), {&param, &grad, &square_avg, &at, &bt, &qt}), n, k);
      MT_CUDA_CHECK_LAUNCH("rmsprop_kernel");
    });
  });
}

void adagrad_update(const Strided& param, const Strided& grad, const Strided& sum, double lr, double lr_decay,
                    double eps, double weight_decay, int64_t step, const Strided& rounded_copy) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_update("adagrad_update", param.dtype(), sum.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    dispatch_copy(rounded_copy, [&](auto copy_tag) {
      using Q = decltype(copy_tag);
      const formulas::AdagradConsts<P> k = formulas::adagrad_consts<P>(lr, lr_decay, eps, weight_decay, step);
      const bool has_copy = rounded_copy.defined();
      const Strided& qt = has_copy ? rounded_copy : param;
      adagrad_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
          param.data<P>(), grad.data<P>(), sum.data<P>(), copy_data<Q>(rounded_copy, param), has_copy,
          same_shape_offsets<4>(param.shape(), {&param, &grad, &sum, &qt}), n, k);
      MT_CUDA_CHECK_LAUNCH("adagrad_kernel");
    });
  });
}

void sgd16_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, const Strided& kahan_comp,
                  double lr, double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("sgd16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const formulas::Sgd16Consts k = formulas::sgd16_consts(
        lr, momentum, weight_decay, formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    // Absent buffers alias the parameter's layout and are never dereferenced.
    const Strided& mt = k.use_mom ? momentum_buf : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(mt.dtype() == param.dtype() && ct.dtype() == param.dtype(), "sgd16_update: state ", mt.meta(), " / ",
             ct.meta(), " must have the parameter's dtype ", param.meta());
    sgd16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(mt.raw_data()),
        static_cast<P*>(ct.raw_data()), same_shape_offsets<4>(param.shape(), {&param, &grad, &mt, &ct}), n, k);
    MT_CUDA_CHECK_LAUNCH("sgd16_kernel");
  });
}

void adamw16_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                    const Strided& max_exp_avg_sq, const Strided& kahan_comp, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step, Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("adamw16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const formulas::AdamW16Consts k = formulas::adamw16_consts(lr, beta1, beta2, eps, weight_decay, step,
                                                               formulas::weight_rule(rounding, kahan_comp.defined()),
                                                               seed, offset, max_exp_avg_sq.defined());
    const Strided& xt = k.amsgrad ? max_exp_avg_sq : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(exp_avg.dtype() == param.dtype() && exp_avg_sq.dtype() == param.dtype() && xt.dtype() == param.dtype() &&
                 ct.dtype() == param.dtype(),
             "adamw16_update: state must have the parameter's dtype ", param.meta());
    adamw16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(exp_avg.raw_data()),
        static_cast<P*>(exp_avg_sq.raw_data()), static_cast<P*>(xt.raw_data()), static_cast<P*>(ct.raw_data()),
        same_shape_offsets<6>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &xt, &ct}), n, k);
    MT_CUDA_CHECK_LAUNCH("adamw16_kernel");
  });
}

void rmsprop16_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                      const Strided& momentum_buf, const Strided& kahan_comp, double lr, double alpha, double eps,
                      double weight_decay, double momentum, bool centered, Rounding rounding, uint64_t seed,
                      uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("rmsprop16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const formulas::Rmsprop16Consts k =
        formulas::rmsprop16_consts(lr, alpha, eps, weight_decay, momentum, centered,
                                   formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    const Strided& at = k.centered ? grad_avg : param;
    const Strided& bt = k.use_mom ? momentum_buf : param;
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(square_avg.dtype() == param.dtype() && at.dtype() == param.dtype() && bt.dtype() == param.dtype() &&
                 ct.dtype() == param.dtype(),
             "rmsprop16_update: state must have the parameter's dtype ", param.meta());
    rmsprop16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(square_avg.raw_data()),
        static_cast<P*>(at.raw_data()), static_cast<P*>(bt.raw_data()), static_cast<P*>(ct.raw_data()),
        same_shape_offsets<6>(param.shape(), {&param, &grad, &square_avg, &at, &bt, &ct}), n, k);
    MT_CUDA_CHECK_LAUNCH("rmsprop16_kernel");
  });
}

void adagrad16_update(const Strided& param, const Strided& grad, const Strided& sum, const Strided& kahan_comp,
                      double lr, double lr_decay, double eps, double weight_decay, int64_t step, Rounding rounding,
                      uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("adagrad16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const formulas::Adagrad16Consts k = formulas::adagrad16_consts(
        lr, lr_decay, eps, weight_decay, step, formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(sum.dtype() == param.dtype() && ct.dtype() == param.dtype(),
             "adagrad16_update: state must have the parameter's dtype ", param.meta());
    adagrad16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(sum.raw_data()),
        static_cast<P*>(ct.raw_data()), same_shape_offsets<4>(param.shape(), {&param, &grad, &sum, &ct}), n, k);
    MT_CUDA_CHECK_LAUNCH("adagrad16_kernel");
  });
}

void unscale_and_decide(const std::vector<Strided>& grads, const std::vector<float>& scales,
                        const std::vector<Strided>& out, const Strided& fstate, const Strided& istate,
                        const formulas::LossScaleRule& rule, double max_grad_norm) {
  const char* op = "unscale_and_decide";
  DeviceGuard guard(fstate.device().index);
  const Stream st = stream_of(fstate);
  const int launches = int((grads.size() + kMultiTensors - 1) / kMultiTensors);
  // Partial sums of every block of every launch, summed by decide_kernel in this order.
  Workspace partials = workspace<double>(3 * int64_t(kStepBlocks) * std::max(launches, 1), fstate.device());
  double* pp = partials.data<double>();
  if (launches == 0) memset_async(pp, 0, 3 * kStepBlocks * sizeof(double), st);
  for (int l = 0; l < launches; ++l) {
    UnscaleList L{};
    const size_t first = size_t(l) * kMultiTensors;
    const int count = int(std::min<size_t>(kMultiTensors, grads.size() - first));
    for (int t = 0; t < count; ++t) {
      const Strided& g = grads[first + size_t(t)];
      const Strided& o = out[first + size_t(t)];
      check_contiguous(op, g, "gradient");
      check_contiguous(op, o, "output");
      MT_CHECK(o.dtype() == DType::f32 && o.numel() == g.numel(), op, ": output ", o.meta(), " for gradient ",
               g.meta());
      L.g[t] = g.raw_data();
      L.out[t] = o.data<float>();
      L.n[t] = g.numel();
      L.inv_scale[t] = 1.0 / double(scales[first + size_t(t)]);
      if (g.dtype() == DType::f32) L.type[t] = GradType::f32;
      else if (g.dtype() == DType::f16) L.type[t] = GradType::f16;
      else if (g.dtype() == DType::bf16) L.type[t] = GradType::bf16;
      else throw Error(detail::cat(op, ": no kernel for ", g.meta(), " gradients (need f32, f16 or bf16)"));
    }
    map_chunks(L.map, L.n, count);
    unscale_check_kernel<<<kStepBlocks, kBlock, 0, st>>>(L, fstate.data<float>() + formulas::kScale,
                                                         pp + 3 * int64_t(kStepBlocks) * l);
    MT_CUDA_CHECK_LAUNCH("unscale_check_kernel");
  }
  decide_kernel<<<1, 32, 0, st>>>(pp, kStepBlocks * std::max(launches, 1), fstate.data<float>(), istate.data<int64_t>(),
                                  rule, max_grad_norm);
  MT_CUDA_CHECK_LAUNCH("decide_kernel");
}

void multi_adam_update(const std::vector<Strided>& params, const std::vector<Strided>& grads,
                       const std::vector<Strided>& exp_avgs, const std::vector<Strided>& exp_avg_sqs,
                       const std::vector<Strided>& copies, const std::vector<double>& lrs,
                       const std::vector<double>& weight_decays, double beta1, double beta2, double eps, bool decoupled,
                       const Strided& steps, const std::vector<int64_t>& step_index, const Strided& control) {
  const char* op = decoupled ? "multi_adamw_update" : "multi_adam_update";
  if (params.empty()) return;
  DeviceGuard guard(control.device().index);
  const Stream st = stream_of(control);
  for (size_t first = 0; first < params.size(); first += kMultiTensors) {
    AdamList L{};
    IndexList idx{};
    const int count = int(std::min<size_t>(kMultiTensors, params.size() - first));
    for (int t = 0; t < count; ++t) {
      const size_t k = first + size_t(t);
      for (const Strided* x : {&params[k], &grads[k], &exp_avgs[k], &exp_avg_sqs[k]}) {
        check_contiguous(op, *x, "operand");
        MT_CHECK(x->dtype() == DType::f32 && x->numel() == params[k].numel(), op, ": operand ", x->meta(),
                 " of parameter ", params[k].meta(), " must be f32 and of its size");
      }
      L.p[t] = params[k].data<float>();
      L.g[t] = grads[k].data<float>();
      L.m[t] = exp_avgs[k].data<float>();
      L.v[t] = exp_avg_sqs[k].data<float>();
      L.q[t] = nullptr;
      L.q_type[t] = CopyType::none;
      if (copies[k].defined()) {
        check_contiguous(op, copies[k], "rounded copy");
        L.q[t] = copies[k].raw_data();
        if (copies[k].dtype() == DType::f16) L.q_type[t] = CopyType::f16;
        else if (copies[k].dtype() == DType::bf16) L.q_type[t] = CopyType::bf16;
        else throw Error(detail::cat(op, ": the rounded copy ", copies[k].meta(), " must be f16 or bf16"));
      }
      L.n[t] = params[k].numel();
      L.lr[t] = lrs[k];
      L.weight_decay[t] = weight_decays[k];
      L.step_index[t] = int32_t(step_index[k]);
      idx.index[t] = int32_t(step_index[k]);
    }
    idx.count = count;
    map_chunks(L.map, L.n, count);
    multi_adam_kernel<<<kStepBlocks, kBlock, 0, st>>>(L, control.data<float>(), steps.data<int64_t>(), beta1, beta2,
                                                      eps, decoupled);
    MT_CUDA_CHECK_LAUNCH("multi_adam_kernel");
    advance_steps_kernel<<<1, 32, 0, st>>>(steps.data<int64_t>(), idx, control.data<float>());
    MT_CUDA_CHECK_LAUNCH("advance_steps_kernel");
  }
}

}  // namespace mixtape::cuda
