// How a GEMM is split over the OpenMP threads without changing its result.
//
// Note [Deterministic GEMM]
// A BLAS library splits a GEMM over its threads in a way that depends on the thread count, and
// the sums it forms change with it: the same cnn run gave different weights with 1 and 2
// threads. So every GEMM here is cut into blocks that depend only on the shapes, each computed
// by a single-threaded call, and the blocks are handed to the OpenMP threads (Note
// [Deterministic threads] in parallel.h):
//   - wide or tall outputs: blocks of columns (or rows) of C, each a GEMM over all of K, so every
//     element is summed exactly as the one-block call sums it. Since no block boundary changes a
//     sum, there is one block per thread: a block packs its own copy of A (B for tall outputs),
//     and the cnn's weight gradient (K = 12,544) ran at 61 GFLOP/s on one thread cut into four
//     blocks, against about 100 for a GEMM whose operands are packed once;
//   - small outputs with long sums (weight gradients: dW [OC, C*KH*KW] sums over N*OH*OW): K is
//     cut into fixed chunks whose partial products are added to C in chunk order. These chunks
//     depend only on the shapes.
// Whatever the thread count, every element of C gets the same products in the same order, so the
// result is the same bits.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/cpu/parallel.h"
#include "tensor/cpu/workspace.h"

namespace mixtape::cpu {

inline constexpr int64_t kGemmSerialFlops = int64_t(1) << 22;  // below this one call does it all
inline constexpr int64_t kGemmMaxBlocks = 8;
inline constexpr int64_t kGemmMinBlockSide = 64;  // columns or rows of C per block
inline constexpr int64_t kGemmMinBlockK = 2048;   // length of a K chunk

// Whether gemm_blocked cuts the K of an [M, N, K] product into partial sums: every other shape
// is summed over all of K in one chain per element (in one call, or in blocks of columns or rows).
inline bool gemm_splits_k(int64_t M, int64_t N, int64_t K) {
  return M * N * K >= kGemmSerialFlops && N < 2 * kGemmMinBlockSide && M < 2 * kGemmMinBlockSide &&
         K / kGemmMinBlockK > 1;
}

// C[M, N] (leading dimension ldc) = (accumulate ? C : 0) + A B, computed by calls
//   block(i0, m, j0, n, k0, k, accumulate, c, ldc_c)
// each of which must compute, on the calling thread, the [m, n] block of C at rows i0, columns
// j0 from the K range [k0, k0 + k), into c (leading dimension ldc_c). done(i0, m, j0, n) is called
// for each block of C once its values are final, on the thread that computed it (an epilogue in
// the same parallel region, on values still in cache); where K is cut, once for all of C.
struct NoBlockDone {
  void operator()(int64_t, int64_t, int64_t, int64_t) const {}
};
template <class T, class Block, class Done = NoBlockDone>
void gemm_blocked(int64_t M, int64_t N, int64_t K, bool accumulate, T* C, int64_t ldc, Block block, Done done = {}) {
  // Splits [0, n) into `blocks` nearly equal pieces: piece t is [n t / blocks, n (t + 1) / blocks).
  auto bounds = [](int64_t n, int64_t blocks, int64_t t) { return n * t / blocks; };
  if (M * N * K < kGemmSerialFlops) {
    block(0, M, 0, N, 0, K, accumulate, C, ldc);
    done(0, M, 0, N);
    return;
  }
  if (N >= 2 * kGemmMinBlockSide || M >= 2 * kGemmMinBlockSide) {
    const bool by_columns = N >= M;
    const int64_t side = by_columns ? N : M;
    const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int64_t blocks = std::min({threads, kGemmMaxBlocks, side / kGemmMinBlockSide});
    parallel_for(blocks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t lo = bounds(side, blocks, t), hi = bounds(side, blocks, t + 1);
        if (by_columns) {
          block(0, M, lo, hi - lo, 0, K, accumulate, C + lo, ldc);
          done(0, M, lo, hi - lo);
        } else {
          block(lo, hi - lo, 0, N, 0, K, accumulate, C + lo * ldc, ldc);
          done(lo, hi - lo, 0, N);
        }
      }
    });
    return;
  }
  if (!gemm_splits_k(M, N, K)) {
    block(0, M, 0, N, 0, K, accumulate, C, ldc);
    done(0, M, 0, N);
    return;
  }
  const int64_t blocks = std::min(K / kGemmMinBlockK, kGemmMaxBlocks);
  T* partial = workspace<T>(Workspace::gemm_partials, blocks * M * N);
  parallel_for(blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = bounds(K, blocks, t), hi = bounds(K, blocks, t + 1);
      block(0, M, 0, N, lo, hi - lo, false, partial + t * M * N, N);
    }
  });
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T c = accumulate ? C[i * ldc + j] : T(0);
      for (int64_t t = 0; t < blocks; ++t) c += partial[size_t((t * M + i) * N + j)];
      C[i * ldc + j] = c;
    }
  done(0, M, 0, N);
}

}  // namespace mixtape::cpu
