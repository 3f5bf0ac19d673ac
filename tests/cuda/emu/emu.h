// A CUDA device emulated on the CPU, for running the cuda/ kernels where there is no GPU.
//
// Note [CUDA emulation]
// The build with MIXTAPE_CUDA=EMULATE (CMake preset `cuda-emu`, run by scripts/test.sh) compiles
// every cuda/*.cu file as C++ with this header included first, and links tests/cuda/emu/runtime.cpp
// in place of the CUDA runtime library. The kernels are the real source, unchanged; only three
// things differ from nvcc:
//   - the launch syntax: the build rewrites `kernel<<<grid, block, smem, stream>>>(args)` into a
//     call of ::mt_emu::launch with the configuration and the kernel (and `extern __shared__ T x[]`
//     into a pointer to the block's dynamic shared memory), see tests/cuda/emu/emulate.cmake;
//   - the device: every block of a launch runs on the calling thread, one after the other, each
//     CUDA thread a fiber with its own stack. __syncthreads, __syncwarp and the warp shuffles
//     suspend the fiber until every thread of the block (or warp) that has not exited arrives;
//     when no thread can go on, the launch fails with "deadlock" (a barrier some threads never
//     reach). __shared__ variables are function statics, which is exact because one block runs
//     at a time. Atomics are plain read-modify-writes (one OS thread). The tests run twice: in
//     index order and with MIXTAPE_EMU_SCHEDULE=reverse (blocks, and threads between barriers,
//     in the opposite order), so a result that depends on the order, a race on a GPU, fails.
//   - the arithmetic: the *_rn intrinsics are the host's IEEE operations (the library builds with
//     -ffp-contract=off), the 16-bit conversions are the CUDA headers' own host versions, and
//     the WMMA tile products (include/mma.h) are computed in fp32.
// Three checks go beyond running the code (runtime.cpp, include/mma.h): every load and store of
// the emulated .cu files is checked against the exact extent of the live device allocations
// (Note [Device memory checks]); MIXTAPE_EMU_DEFERRED=1 runs kernels and copies only when the
// host waits, and reports a host that touches pinned memory a queued copy still uses (Note
// [Deferred execution]); and WMMA fragments are spread over the lanes as on the hardware (Note
// [WMMA fragments in the emulator]).
// So the emulated backend checks the kernels' indexing, tiling, ragged edges, barriers, memory
// bounds and the host launch code against the CPU reference, in CI. It does not check what only silicon can
// show: real concurrency (races that neither order exposes), the hardware's
// intrinsics and Tensor Core rounding, memory limits, speed. Those need the GPU run
// (scripts/gpu_check.sh), and a passing emulated test is not a GPU result.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---- keywords ------------------------------------------------------------------------------------
// The CUDA headers already define __global__, __device__ and __host__ as nothing for a host
// compiler, and __forceinline__ / __align__ as GCC attributes.
// __noinline__ is also a GCC attribute name that libstdc++ spells __attribute__((__noinline__))
// (shared_ptr): the standard headers it needs are included above, before the macro exists.
#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)
#define __noinline__ __attribute__((noinline))

namespace mt_emu {

// What a CUDA thread sees of itself.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned linear;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};
extern ThreadContext* current;  // the running fiber's
extern cudaError_t last_error;  // what cudaGetLastError returns and clears

// Barriers (runtime.cpp). Each suspends the calling fiber until every live thread of the block
// (or of its warp) has arrived.
void block_barrier();
int block_barrier_or(int predicate);
void warp_barrier();
// 32 exchange slots of 8 bytes for the calling thread's warp.
uint64_t* warp_slots();
// The block's dynamic shared memory (the launch's smem bytes).
void* dynamic_shared();
// Records a __shared__ variable (emulate.cmake adds the call after each declaration) so that
// every block starts with garbage in it, as on a GPU. Returns true.
bool register_shared(void* p, size_t bytes);
// Records a device-side fault (__trap) and ends the calling thread; the launch then fails.
[[noreturn]] void trap(const char* what);

// The configuration of a <<<grid, block, smem, stream>>> launch.
// `kernel` (the launch's kernel expression) and `caller` (the function that launched it) name
// the kernel in fault reports; emulate.cmake fills them in.
struct Config {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  const char* kernel = "kernel";
  const char* caller = "?";
  Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}
  Config& named(const char* k, const char* c) {
    kernel = k;
    caller = c;
    return *this;
  }
};

// Runs body(closure) once per thread of every block (runtime.cpp), after validating the
// configuration as cudaLaunchKernel does (cudaErrorInvalidConfiguration for cudaGetLastError):
// at once, or, in deferred mode (Note [Deferred execution] in runtime.cpp), when the host next
// waits for the stream. `params` is where the kernel's arguments were copied (the allocation
// holding closure): the runtime scans it for pointers to pinned host memory the kernel may use.
void run(const Config& cfg, void (*body)(void*), std::shared_ptr<void> closure, const void* params, size_t bytes);

// launch(cfg, call)(args...): what kernel<<<cfg>>>(args...) becomes (emulate.cmake), with
// call = [&](auto&&... a) { kernel(a...); }. The arguments are copied once at the launch, as
// the GPU copies them into its parameter space, and every thread calls the kernel on them
// (its by-value parameters are the thread's own copies). The copy lives until the kernel has
// run, which in deferred mode is after the launching call returned.
template <class Call>
auto launch(const Config& cfg, Call call) {
  return [cfg, call](auto&&... args) {
    struct Closure {
      Call call;
      std::tuple<std::decay_t<decltype(args)>...> params;
    };
    auto c = std::make_shared<Closure>(Closure{call, std::tuple<std::decay_t<decltype(args)>...>(args...)});
    const void* params = &c->params;
    run(
        cfg,
        [](void* p) {
      Closure& c = *static_cast<Closure*>(p);
      std::apply(c.call, c.params);
        },
        c, params, sizeof(c->params));
  };
}

// Per-warp scratch of `floats` floats for the calling thread's warp (the WMMA emulation in
// include/mma.h gathers a warp's fragments there).
float* warp_scratch(size_t floats);
// Whether the second schedule runs (MIXTAPE_EMU_SCHEDULE=reverse): include/mma.h then spreads
// fragments over the lanes in a scrambled order instead of the PTX ISA's.
bool reverse_schedule();

// The last fault the emulator reported (a kernel fault, an out-of-bounds access, a host access
// to memory a queued operation still uses), also printed to stderr; empty when there was none.
std::string last_fault();
void clear_fault();
// Whether kernels and copies run deferred (MIXTAPE_EMU_DEFERRED=1, or set_deferred): queued in
// stream order and run when the host waits (Note [Deferred execution] in runtime.cpp).
bool deferred();
// Overrides the environment variable; nullopt hands the choice back to it. Leaving deferred mode
// first runs what is queued.
void set_deferred(std::optional<bool> on);

template <class T>
T shuffle(T v, int src_lane) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t* slots = warp_slots();
  const unsigned lane = current->linear & 31u;
  std::memcpy(&slots[lane], &v, sizeof(T));
  warp_barrier();  // every lane has written
  T r;
  std::memcpy(&r, &slots[unsigned(src_lane) & 31u], sizeof(T));
  warp_barrier();  // every lane has read before the slots are reused
  return r;
}

}  // namespace mt_emu

#define threadIdx (::mt_emu::current->thread_idx)
#define blockIdx (::mt_emu::current->block_idx)
#define blockDim (::mt_emu::current->block_dim)
#define gridDim (::mt_emu::current->grid_dim)

// ---- synchronization -------------------------------------------------------------------------
inline void __syncthreads() { mt_emu::block_barrier(); }
inline int __syncthreads_or(int predicate) { return mt_emu::block_barrier_or(predicate); }
inline void __syncwarp(unsigned = 0xffffffffu) { mt_emu::warp_barrier(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
  return mt_emu::shuffle(v, int(mt_emu::current->linear & 31u) ^ lane_mask);
}
template <class T>
T __shfl_sync(unsigned, T v, int src_lane, int = 32) {
  return mt_emu::shuffle(v, src_lane);
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int = 32) {
  const int lane = int(mt_emu::current->linear & 31u);
  return mt_emu::shuffle(v, lane + int(delta) < 32 ? lane + int(delta) : lane);
}
[[noreturn]] inline void __trap() { mt_emu::trap("__trap()"); }

// ---- atomics (one OS thread runs every fiber: a plain read-modify-write is atomic) ------------
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <class T>
T atomicOr(T* p, T v) {
  const T old = *p;
  *p = old | v;
  return old;
}

// ---- arithmetic and bit intrinsics -------------------------------------------------------------
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return float(a); }
inline float __ll2float_rn(long long v) { return float(v); }
// CUDA returns INT64_MIN for NaN and out-of-range values; so does this.
inline long long __float2ll_rz(float f) {
  if (!(f > -9.2233720368547758e18f && f < 9.2233720368547758e18f)) return INT64_MIN;
  return static_cast<long long>(f);
}
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
template <class T>
T __ldg(const T* p) {
  return *p;
}
// Device max/min as CUDA's headers give them (fmaxf/fminf for floating types), and the math
// predicates device code calls unqualified.
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
#define MT_EMU_INTEGER_MINMAX(T)                   \
  inline T max(T a, T b) { return a < b ? b : a; } \
  inline T min(T a, T b) { return b < a ? b : a; }
MT_EMU_INTEGER_MINMAX(int)
MT_EMU_INTEGER_MINMAX(unsigned)
MT_EMU_INTEGER_MINMAX(long)
MT_EMU_INTEGER_MINMAX(unsigned long)
MT_EMU_INTEGER_MINMAX(long long)
MT_EMU_INTEGER_MINMAX(unsigned long long)
#undef MT_EMU_INTEGER_MINMAX
using std::isfinite;
using std::isinf;
using std::isnan;
