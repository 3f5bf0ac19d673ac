// The CUDA GEMM behind matmul, linear, bmm and the convolutions (cuda/gemm.cu). Host-facing: no
// CUDA type appears here except cuda::Stream, so plain C++ (tests, bench/) may include it.
//
//   C[z][m, n] = epilogue(alpha * sum_k A[z][m, k] B[z][k, n] (+ beta * C[z][m, n]))
//   epilogue(v) = act(v + bias), rounded once to C's dtype (Note [Rounding on the device]).
//
// Each operand is a logical matrix given by (pointer, row stride, col stride, batch stride) in
// elements, so a transposed operand is just swapped strides, a broadcast batch operand has batch
// stride 0, and any of the four transpose combinations works (Note [GEMM tiles] in gemm.cu).
// Inputs: f16 and bf16 run on Tensor Cores (WMMA m16n16k16) with fp32 accumulation; f32 runs an
// exact fp32 SIMT kernel (fp32 FMA), or TF32 Tensor Cores when opted in (Note [TF32 opt-in]).
// 8-bit operands (codes with power-of-two block scales) are widened to bf16 in the tiles and run
// on the bf16 Tensor Cores (Note [8-bit operands] in gemm.cu; GemmCodes below).
//
// Note [TF32 opt-in]
// TF32 keeps 10 of fp32's 23 mantissa bits in each product, so it changes results (relative error
// ~2^-11 per product instead of ~2^-24); mixtape therefore computes f32 GEMMs exactly unless the
// user opts in: set the environment variable MIXTAPE_TF32=1 (read once, on first use), call
// cuda::set_tf32_enabled(true), or hold a cuda::Tf32Scope. GemmParams::fp32_math overrides the
// global choice for one call (bench/ and tests use it). 16-bit GEMMs are not affected.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/runtime.h"
#include "tensor/core/dtype.h"
#include "tensor/core/error.h"

namespace mixtape::cuda {

// ---- TF32 opt-in (header-only, so every build and every test can read it) -------------------

inline std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("MIXTAPE_TF32");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }()};
  return flag;
}
inline bool tf32_enabled() { return tf32_flag().load(std::memory_order_relaxed); }
inline void set_tf32_enabled(bool on) { tf32_flag().store(on, std::memory_order_relaxed); }

// Enables (or disables) TF32 for its lifetime and restores the previous setting.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool on = true) : previous_(tf32_enabled()) { set_tf32_enabled(on); }
  ~Tf32Scope() { set_tf32_enabled(previous_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool previous_;
};

// ---- the GEMM -------------------------------------------------------------------------------------

enum class Fp32Math : uint8_t { global, exact, tf32 };  // global: tf32_enabled() decides
enum class BiasAlong : uint8_t { none, cols, rows };    // bias[n] on every row, or bias[m] on every column
enum class Activation : uint8_t { none, relu };

// What makes an operand 8-bit (Note [8-bit operands] in gemm.cu): its pointer holds one code a
// byte in `format`, and its logical element (r, c) stands for
//   to_float(code) * scale[(r / br) * srs + (c / bc) * scs]   (scale == nullptr: 1),
// as the CPU GEMM's GemmScales (tensor/cpu/gemm.h). Each scale is a power of two (or NaN, which
// makes its block NaN): the GEMM applies it exactly while it widens the codes to bf16. A scale
// constant along K need not be one: give it as a GemmFactor instead, applied to the fp32 sums.
struct GemmCodes {
  DType format = DType::f32;     // e4m3, e5m2, e3m2, e2m3 or e2m1; any other dtype: not 8-bit (the default)
  const float* scale = nullptr;  // device memory, f32
  int64_t br = 1, bc = 1, srs = 0, scs = 0;
};

struct GemmOperand {
  const void* ptr = nullptr;
  int64_t row_stride = 0, col_stride = 0, batch_stride = 0;  // elements
  GemmCodes codes{};                                         // 8-bit operands only
};

// A factor per row (or per column) of C, constant along K, that multiplies the fp32 sum before
// the bias (8-bit GEMMs: the per-tensor and rowwise scales): row m's is s[(m / block) * stride].
struct GemmFactor {
  const float* s = nullptr;  // device memory, f32; nullptr: 1
  int64_t block = 1, stride = 1;
};

struct GemmParams {
  int device = 0;  // where the pointers live; split-K workspaces are allocated there
  int64_t M = 0, N = 0, K = 0, batch = 1;
  DType in_dtype = DType::f32;   // dtype of A, B and bias: f32, f16 or bf16
  GemmOperand a;                 // logical [M, K]
  GemmOperand b;                 // logical [K, N]
  DType out_dtype = DType::f32;  // C: in_dtype or f32
  void* c = nullptr;
  int64_t c_row_stride = 0, c_col_stride = 1, c_batch_stride = 0;
  float alpha = 1.0f;
  float beta = 0.0f;           // 0: C is only written (never read, so it may hold NaN garbage)
  const void* bias = nullptr;  // in_dtype (8-bit operands: bias_dtype); length N (cols) or M (rows)
  int64_t bias_stride = 1;
  BiasAlong bias_along = BiasAlong::none;
  Activation activation = Activation::none;
  Fp32Math fp32_math = Fp32Math::global;
  const char* caller = "gemm";  // the launcher that asks, for GemmRecorder (a string literal)
  // 8-bit operands (Note [8-bit operands] in gemm.cu): a.codes and b.codes both set, batch 1,
  // in_dtype bf16 (the arithmetic they are widened to). The tiles read them K-contiguous (A
  // row-major, B column-major: quantize()'s codes [rows, K]); any other layout is copied first.
  // C may be f32, f16 or bf16, the bias f32, f16 or bf16 (bias_dtype), and the epilogue is
  //   C = act(alpha * acc * (row_factor(m) * col_factor(n)) (+ beta * C) + bias), rounded once.
  GemmFactor row_factor, col_factor;
  DType bias_dtype = DType::f32;
};

// Queues the GEMM on `stream` (the stream of p.device). Throws mixtape::Error on bad arguments
// (dtype combination, negative sizes) or a failed launch. Never synchronizes.
void gemm(const GemmParams& p, Stream stream);

// How the GEMMs since the program started load their operands (Note [GEMM tiles]): per call, one
// count per operand under the widest aligned load its layout allows (16, 8 or 4 bytes), or
// element by element (no unit-stride dim, or a misaligned base; gemm() now stages such an
// operand, so this count stays 0 and tests can require it). Ragged edges do not count: they are
// element by element in every case. edge_only: operands whose contiguous dim is shorter than one
// 16-byte vector (a 1 x 1 dy per image), which have no full chunk. staged: operands copied first
// into a row-padded workspace and read from it as 16-byte vectors (counted under vec16 too; Note
// [Staged operands] in gemm.cu). bench/gemm reports the load per shape; the conv and example
// tests check that the examples' shapes load as vectors. All 0 without CUDA.
struct GemmLoadCounts {
  uint64_t vec16 = 0, vec8 = 0, vec4 = 0, elementwise = 0, edge_only = 0, staged = 0;
};
GemmLoadCounts gemm_load_counts();
// The widest load gemm(p) uses for the full chunks of A and of B, in bytes (16, 8, 4; 0: element
// by element; kGemmNoFullChunk: the operand has no full chunk), and whether it stages the operand
// first, without running it.
inline constexpr int kGemmNoFullChunk = -1;
struct GemmLoadPlan {
  int a_bytes = 0, b_bytes = 0;
  bool a_staged = false, b_staged = false;
};
GemmLoadPlan gemm_load_plan(const GemmParams& p);

// Records every GEMM queued while it is alive: its sizes, the load path of each operand
// (gemm_load_plan's bytes) and the launcher that asked. For tests and benchmarks that want to
// know which calls of a training step load element by element, and why. Off by default: without
// a recorder, gemm() pays one relaxed atomic load. One recorder at a time (a second throws).
struct GemmCall {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  int a_bytes = 0, b_bytes = 0;  // as GemmLoadPlan
  bool a_staged = false, b_staged = false;
  const char* caller = "";
};
class GemmRecorder {
 public:
  GemmRecorder() {
    GemmRecorder* none = nullptr;
    if (!active().compare_exchange_strong(none, this)) throw Error("GemmRecorder: another recorder is active");
  }
  ~GemmRecorder() { active().store(nullptr); }
  GemmRecorder(const GemmRecorder&) = delete;
  GemmRecorder& operator=(const GemmRecorder&) = delete;

  std::vector<GemmCall> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  // Called by gemm() for every call it queues.
  static void record(const GemmCall& call) {
    if (GemmRecorder* r = active().load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(r->mutex_);
      r->calls_.push_back(call);
    }
  }

 private:
  static std::atomic<GemmRecorder*>& active() {
    static std::atomic<GemmRecorder*> recorder{nullptr};
    return recorder;
  }
  mutable std::mutex mutex_;
  std::vector<GemmCall> calls_;
};

}  // namespace mixtape::cuda
