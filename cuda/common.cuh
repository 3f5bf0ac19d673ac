// What every CUDA kernel file shares: checked calls, the device guard, the storage type of each
// dtype with its conversions, the one dtype switch, launch geometry and warp/block reductions.
// Included only by cuda/*.cu.
//
// Note [Rounding on the device]
// Every store of a 16-bit value goes through store<T>() below, the device twin of store<> in
// tensor/core/dtype.h (one name on both devices, so a search for `store<` finds every rounding):
// round to nearest even with __float2half_rn / __float2bfloat16_rn, whose results the host
// conversions in tensor/core/half.h match bit for bit (docs/design.md section 3; checked on all 65,536
// patterns by tests/cuda/test_copy.cpp). Stochastic rounding has no CUDA intrinsic; the kernels
// call the host's own bits16::float_to_*_sr through store_stochastic<T>(), compiled for the
// device (the build passes --expt-relaxed-constexpr), with the same Philox words, so both devices
// draw the same stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/indexing.h"
#include "cuda/runtime.h"
#include "tensor/core/dtype.h"
#include "tensor/core/error.h"
#include "tensor/core/half.h"
#include "tensor/core/rng.h"
#include "tensor/core/strided.h"

#define MT_CUDA_CHECK(call)                                                                                          \
  do {                                                                                                               \
    const cudaError_t mt_err_ = (call);                                                                              \
    if (mt_err_ != cudaSuccess)                                                                                      \
      throw ::mixtape::Error(                                                                                        \
          ::mixtape::detail::cat(#call, " failed at ", __FILE__, ":", __LINE__, ": ", cudaGetErrorString(mt_err_))); \
  } while (0)

// After a <<<...>>> launch: a bad configuration is reported here, with the kernel's name; the
// launch is counted (Note [Runtime counters] in cuda/runtime.h).
#define MT_CUDA_CHECK_LAUNCH(kernel_name)                                                                              \
  do {                                                                                                                 \
    ::mixtape::cuda::count_launch();                                                                                   \
    const cudaError_t mt_err_ = cudaGetLastError();                                                                    \
    if (mt_err_ != cudaSuccess)                                                                                        \
      throw ::mixtape::Error(::mixtape::detail::cat("launch of ", kernel_name, " failed at ", __FILE__, ":", __LINE__, \
                                                    ": ", cudaGetErrorString(mt_err_)));                               \
  } while (0)

namespace mixtape::cuda {

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) MT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The stream of an operand's device (Note [One stream per device] in runtime.h).
inline Stream stream_of(const Strided& t) { return stream(t.device().index); }

// Queues a check that every i64 of `indices` lies in [0, limit) or equals `allowed` (when given:
// cross_entropy's ignore_index); a failure throws message(position, value) at the host's next
// read of the readout block (Note [Deferred device checks] in cuda/runtime.h). One launch (none
// for an empty tensor). cuda/checks.cu.
void defer_index_check(const Strided& indices, int64_t limit, CheckMessage message, bool has_allowed = false,
                       int64_t allowed = 0);
// The same for a floating tensor's values: each must lie in [lo, hi] (NaN passes); the message
// gets the position and the bits of the value widened to double (std::bit_cast<double>).
void defer_range_check(const Strided& values, double lo, double hi, CheckMessage message);

// ---- storage types and conversions ------------------------------------------------------------

template <class T>
struct compute_of {
  using type = float;
};  // 16-bit and f32 compute in fp32
template <>
struct compute_of<double> {
  using type = double;
};
template <class T>
using compute_t = typename compute_of<T>::type;

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }

// The one rounding point of the device (Note [Rounding on the device]).
template <class T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half store<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// From a double accumulator (batch-norm statistics, bias and embedding gradients), rounded once
// as the CPU's store<T>(double): round-to-odd to float first (Note [Rounding f64 and i64 to 16
// bits] in tensor/core/half.h), with the host's own functions compiled for the device.
template <class T>
__device__ __forceinline__ T store(double v);
template <>
__device__ __forceinline__ float store<float>(double v) {
  return __double2float_rn(v);
}
template <>
__device__ __forceinline__ __half store<__half>(double v) {
  return __ushort_as_half(bits16::double_to_half_rn(v));
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(double v) {
  return __ushort_as_bfloat16(bits16::double_to_bf16_rn(v));
}

// Stochastic rounding of v with random word r (tensor/core/half.h, Note [Stochastic rounding]).
template <class T>
__device__ __forceinline__ T store_stochastic(float v, uint32_t r);
template <>
__device__ __forceinline__ __half store_stochastic<__half>(float v, uint32_t r) {
  return __ushort_as_half(bits16::float_to_half_sr(v, r));
}
template <>
__device__ __forceinline__ __nv_bfloat16 store_stochastic<__nv_bfloat16>(float v, uint32_t r) {
  return __ushort_as_bfloat16(bits16::float_to_bf16_sr(v, r));
}

// Arithmetic rounded once per operation, spelled out where a kernel must equal the CPU's fp32
// expression bit for bit. The build already forbids contraction (--fmad=false, Note [No
// contracted multiply-adds] in CMakeLists.txt) and nvcc's / and sqrt are correctly rounded by
// default; the names make the intent survive a change of flags.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// ---- the dtype switch --------------------------------------------------------------------------

// dispatch_floating(dtype, "op", f), the device twin of the CPU's dtype switch of the same name
// (tensor/core/dtype.h): calls f(T{}) with T the device storage type of dtype, float, __half or
// __nv_bfloat16. Anything else throws naming the op. f64 tensors stay on the CPU (docs/design.md
// section 3: empty() refuses them on a CUDA device), so no kernel is compiled for double.
// A function object rather than a function template, so that argument-dependent lookup (DType
// lives in namespace mixtape) never offers both switches for one call.
struct DispatchFloating {
  template <class F>
  void operator()(DType dtype, const char* op, F&& f) const {
    switch (dtype) {
      case DType::f32: f(float{}); return;
      case DType::f16: f(__half{}); return;
      case DType::bf16: f(__nv_bfloat16{}); return;
      default: break;
    }
    throw Error(detail::cat(op, ": the CUDA backend has no ", dtype_name(dtype),
                            " kernel (f32, f16 and bf16 run on the GPU; f64 stays on the CPU)"));
  }
};
inline constexpr DispatchFloating dispatch_floating{};

// ---- launch geometry -----------------------------------------------------------------------------

inline constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  constexpr int64_t kMaxBlocks = 65535LL * 8;
  return unsigned(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

template <class T>
__device__ __forceinline__ T* element(T* base, int64_t offset) {
  return base + offset;
}

// Device memory a launcher needs for itself (per-block partial sums, flags, im2col columns, a
// contiguous copy of an operand): a contiguous `shape` of `dtype` from the caching allocator of
// `device` (Note [Caching allocator]), handed back when the Workspace goes out of scope; kernels
// already queued on the device's stream that use it come before those of any later owner.
// Move-only; default-constructed, it holds nothing.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Shape& shape, DType dtype, Device device)
      : view_(Strided::contiguous(device_malloc(size_t(numel_of(shape)) * dtype_size(dtype), device.index), dtype,
                                  shape, device)) {}
  ~Workspace() { release(); }
  Workspace(Workspace&& o) noexcept : view_(std::move(o.view_)) { o.view_ = Strided(); }
  Workspace& operator=(Workspace&& o) noexcept {
    if (this != &o) {
      release();
      view_ = std::move(o.view_);
      o.view_ = Strided();
    }
    return *this;
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const Strided& view() const { return view_; }  // the memory as a launcher operand
  void* raw_data() const { return view_.raw_data(); }
  template <class T>
  T* data() const {
    return view_.data<T>();
  }

 private:
  void release() noexcept {
    if (view_.defined()) device_free(view_.raw_data(), view_.device().index);
  }
  Strided view_;
};

// n values of A (float or double), e.g. per-block partial sums: kernels accumulate in double
// where the CPU does. (f64 tensors stay on the CPU; a launcher's own double scratch may not.)
template <class A>
Workspace workspace(int64_t n, Device device) {
  static_assert(sizeof(A) == 4 || sizeof(A) == 8, "workspace of 4- or 8-byte values");
  return Workspace({n}, sizeof(A) == 8 ? DType::f64 : DType::f32, device);
}

// A contiguous copy of x on its device (copy_cast's bit copy) in `copy`, for kernels that need
// one; x itself when it is contiguous already.
const Strided& contiguous(const Strided& x, Workspace& copy);

// Shape/strides of t as an OffsetCalculator<1>, or several tensors viewed with one shape.
template <int N>
OffsetCalculator<N> offsets_for(const Shape& shape, const std::array<const Strided*, N>& ts) {
  std::array<Shape, N> st;
  for (int k = 0; k < N; ++k) {
    const Strided& t = *ts[size_t(k)];
    Shape s(shape.size(), 0);
    const size_t lead = shape.size() - size_t(t.dim());
    for (size_t i = 0; i < size_t(t.dim()); ++i) s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
    st[size_t(k)] = s;
  }
  return make_offset_calculator<N>(shape, st);
}

// ---- per-channel vectors of any floating dtype ----------------------------------------------

// A [C] tensor (weight, bias, running stats, dweight, dbias of batch norm, layer norm and group
// norm) seen by a kernel; p == nullptr when the tensor is undefined. Read as double, written from
// double with the CPU's store<T>(double) rounding.
struct ChanVec {
  void* p = nullptr;
  int64_t stride = 0;
  int kind = 0;  // 0 f32, 1 f64, 2 f16, 3 bf16
};

inline ChanVec chan_vec(const Strided& t, const char* op) {
  ChanVec v;
  if (!t.defined()) return v;
  v.p = t.raw_data();
  v.stride = t.strides()[0];
  switch (t.dtype()) {
    case DType::f32: v.kind = 0; break;
    case DType::f64: v.kind = 1; break;
    case DType::f16: v.kind = 2; break;
    case DType::bf16: v.kind = 3; break;
    default: throw Error(detail::cat(op, ": per-channel tensor ", t.meta(), " must be floating"));
  }
  return v;
}

__device__ inline double chan_read(const ChanVec& v, int64_t c) {
  const int64_t o = c * v.stride;
  switch (v.kind) {
    case 0: return double(static_cast<const float*>(v.p)[o]);
    case 1: return static_cast<const double*>(v.p)[o];
    case 2: return double(__half2float(static_cast<const __half*>(v.p)[o]));
    default: return double(__bfloat162float(static_cast<const __nv_bfloat16*>(v.p)[o]));
  }
}

__device__ inline void chan_write(const ChanVec& v, int64_t c, double x) {
  const int64_t o = c * v.stride;
  switch (v.kind) {
    case 0: static_cast<float*>(v.p)[o] = store<float>(x); return;
    case 1: static_cast<double*>(v.p)[o] = x; return;
    case 2: static_cast<__half*>(v.p)[o] = store<__half>(x); return;
    default: static_cast<__nv_bfloat16*>(v.p)[o] = store<__nv_bfloat16>(x); return;
  }
}

// ---- reductions ------------------------------------------------------------------------------------

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values of A in shared memory. Call from every thread of the block.
template <class A>
__device__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : A(0);
  return warp_sum(v);
}

template <class A>
__device__ A block_max(A v, A* scratch, A lowest) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return warp_max(v);
}

}  // namespace mixtape::cuda
