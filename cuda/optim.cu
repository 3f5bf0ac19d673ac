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
// Note [Rounding on the device]). Stochastic rounding draws philox_words(seed, offset + i)[0] for
// the element of row-major index i, as the CPU loop does, so a fixed (seed, offset) gives the
// CPU's bits too.
//
// Master weights: the fp32 kernels take the optional 16-bit copy of the master (Note [Fused
// master copy] in tensor/ops/optim.h) as one more operand, Q* q, written with store<Q> of the new
// fp32 value in the same pass; without a copy Q is float, q aliases the parameter's layout and
// has_copy is false, so it is never written.
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
    formulas::sgd16<DeviceUpdate<P>>(p + o[0], g[o[1]], m + o[2], c + o[3], uint64_t(i), k);
  }
}

// Algorithm 4 / 5 and the nearest baseline. Operands: param, grad, exp_avg, exp_avg_sq, Kahan
// buffer (param's layout when unused, never dereferenced).
template <class P>
__global__ void adamw16_kernel(P* p, const float* g, P* m, P* v, P* c, OffsetCalculator<5> oc, int64_t n,
                               formulas::AdamW16Consts k) {
  MT_GRID_STRIDE(i, n) {
    int64_t o[5];
    oc.offsets(i, o);
    formulas::adamw16<DeviceUpdate<P>>(p + o[0], g[o[1]], m + o[2], v + o[3], c + o[4], uint64_t(i), k);
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
                 double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled, int64_t step,
                 const Strided& rounded_copy) {
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
      adam_kernel<P, Q><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
          param.data<P>(), grad.data<P>(), exp_avg.data<P>(), exp_avg_sq.data<P>(), copy_data<Q>(rounded_copy, param),
          has_copy, same_shape_offsets<5>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &qt}), n, k);
      MT_CUDA_CHECK_LAUNCH("adam_kernel");
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
                    const Strided& kahan_comp, double lr, double beta1, double beta2, double eps, double weight_decay,
                    int64_t step, Rounding rounding, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(param.device().index);
  const int64_t n = param.numel();
  dispatch_16bit("adamw16_update", param.dtype(), [&](auto tag) {
    using P = decltype(tag);
    if (n == 0) return;
    const formulas::AdamW16Consts k = formulas::adamw16_consts(
        lr, beta1, beta2, eps, weight_decay, step, formulas::weight_rule(rounding, kahan_comp.defined()), seed, offset);
    const Strided& ct = k.rule == formulas::WeightRule::kahan ? kahan_comp : param;
    MT_CHECK(exp_avg.dtype() == param.dtype() && exp_avg_sq.dtype() == param.dtype() && ct.dtype() == param.dtype(),
             "adamw16_update: state must have the parameter's dtype ", param.meta());
    adamw16_kernel<P><<<grid_for(n), kBlock, 0, stream_of(param)>>>(
        static_cast<P*>(param.raw_data()), grad.data<float>(), static_cast<P*>(exp_avg.raw_data()),
        static_cast<P*>(exp_avg_sq.raw_data()), static_cast<P*>(ct.raw_data()),
        same_shape_offsets<5>(param.shape(), {&param, &grad, &exp_avg, &exp_avg_sq, &ct}), n, k);
    MT_CUDA_CHECK_LAUNCH("adamw16_kernel");
  });
}

}  // namespace mixtape::cuda
