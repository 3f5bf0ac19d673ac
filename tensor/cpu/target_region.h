// Regions of a source file compiled for one instruction set.
//
// Note [Target regions]
// The vector paths of the CPU kernels (gemm.cpp, convert.cpp, pool.cpp, batch_norm.cpp) are
// compiled in the baseline build, for a CPU that may lack the instructions they use. Each sits
// between MT_TARGET_BEGIN("avx2,f16c,fma") and MT_TARGET_END: every function defined there,
// lambdas and template instantiations included, is compiled for those features and may run only
// where the CPU has them (the caller asks: a VectorPaths table, or the conversion path in use).
// Under GCC the region also silences -W(maybe-)uninitialized, which GCC 12 reports for the
// deliberately undefined pass-through operand inside its own AVX-512 intrinsics.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mixtape::cpu {

// The mask of the first min(n, lanes) of a vector's `lanes` lanes (lanes <= 32, n >= 0): the
// lanes that a row's last, partial vector loads and stores (cast to __mmask8/16/32).
constexpr uint32_t first_lanes(int64_t n, int lanes) {
  return uint32_t((uint64_t(1) << std::min<int64_t>(n, lanes)) - 1u);
}

}  // namespace mixtape::cpu

#define MT_PRAGMA(...) _Pragma(#__VA_ARGS__)

#if defined(__clang__)
#define MT_TARGET_BEGIN(features) \
  MT_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define MT_TARGET_END MT_PRAGMA(clang attribute pop)
#else
#define MT_TARGET_BEGIN(features)                     \
  MT_PRAGMA(GCC push_options)                         \
  MT_PRAGMA(GCC target(features))                     \
  MT_PRAGMA(GCC diagnostic push)                      \
  MT_PRAGMA(GCC diagnostic ignored "-Wuninitialized") \
  MT_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define MT_TARGET_END           \
  MT_PRAGMA(GCC diagnostic pop) \
  MT_PRAGMA(GCC pop_options)
#endif
