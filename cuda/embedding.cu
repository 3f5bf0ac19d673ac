// Embedding on the GPU, forward and backward side by side. Each launcher mirrors the CPU kernel of
// the same name in tensor/cpu/embedding.cpp (the readable truth); the front-end in
// tensor/ops/embedding.cpp has validated shapes and dtypes and allocated the outputs.
//
// Note [Embedding backward on the GPU]
// dweight[v, :] is the sum of dy's rows at the positions p with indices[p] == v. The CPU sums in
// double in increasing p and rounds once. Here, deterministically and in the same order:
//   1. keys[p] = indices[p] * n + p, sorted by a bitonic sort (padded to a power of two with
//      INT64_MAX): the positions of each row become one run, in increasing p;
//   2. one thread per (v, column) finds the run of v by binary search and sums dy over it in
//      double, in increasing p, and stores once.
// Because the order of the double additions is the CPU's, dweight is bit-identical to the CPU
// result in every dtype, with no atomics. The row padding_idx (when there is one) is written as zero,
// as the CPU's, which skips its positions. A scatter with fp32 atomicAdd would be faster for
// huge index counts but order-dependent in the last bit.
//
// Out-of-range indices: the CPU throws at the first bad position. The launchers queue a one-block
// check of every index whose result the host reads with its next synchronization (Note [Deferred
// device checks] in cuda/runtime.h), so a bad index throws the CPU's message, naming the op, then;
// the kernels themselves skip a bad index, so no load leaves the table meanwhile.
#include <climits>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

// Queues the check that every index lies in [0, V) (Note [Deferred device checks]); a bad one
// throws the CPU's message at the host's next read. `table` names the [V, D] tensor in it.
void check_indices(const Strided& indices, int64_t V, const char* op, const char* table_name, const Strided& table) {
  defer_index_check(
      indices, V, [op = std::string(op), table = detail::cat(table_name, " ", table.meta()), V](int64_t p, int64_t k) {
        return detail::cat(op, ": index ", k, " (at position ", p, ") is out of range for ", V, " rows (", table, ")");
      });
}

// out [n, D] contiguous: out[row, j] = weight[idx[row], j]; a bad index (reported by the check)
// leaves its row unwritten.
template <class T>
__global__ void embedding_kernel(const int64_t* __restrict__ idx, OffsetCalculator<1> ic, const T* __restrict__ w,
                                 int64_t ws0, int64_t ws1, T* __restrict__ out, int64_t n, int64_t D, int64_t V) {
  const int64_t total = n * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / D, j = e - row * D;
    int64_t o[1];
    ic.offsets(row, o);
    const int64_t k = idx[o[0]];
    if (k < 0 || k >= V) continue;  // keeps every load in bounds; check_indices reports it
    out[e] = w[k * ws0 + j * ws1];
  }
}

// keys[p] = idx[p] * n + p for p < n, INT64_MAX up to npad (Note [Embedding backward on the GPU]).
__global__ void embedding_keys_kernel(const int64_t* __restrict__ idx, OffsetCalculator<1> ic, int64_t n, int64_t npad,
                                      int64_t* __restrict__ keys) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < npad; p += int64_t(gridDim.x) * blockDim.x) {
    if (p < n) {
      int64_t o[1];
      ic.offsets(p, o);
      keys[p] = idx[o[0]] * n + p;
    } else {
      keys[p] = INT64_MAX;
    }
  }
}

// Bitonic sort of npad (a power of two) keys, ascending. Step (k, j) compares pair t:
// i = (t / j) * 2j + t % j and i + j, ascending where (i & k) == 0. Every key is in exactly one
// pair per step, so the threads of a step never touch the same key.
__device__ __forceinline__ void bitonic_pair(int64_t* keys, int64_t t, int64_t j, int64_t k, int64_t base) {
  const int64_t i = (t / j) * 2 * j + t % j, l = i + j;
  const int64_t a = keys[i], b = keys[l];
  const bool up = ((base + i) & k) == 0;  // direction from the global index
  if (up ? a > b : a < b) {
    keys[i] = b;
    keys[l] = a;
  }
}

inline constexpr int64_t kSortTile = 2048;  // keys sorted in shared memory by one block (tile / 2 threads)

// One step (k, j) over the whole array in global memory: npad / 2 pairs.
__global__ void bitonic_global_step(int64_t* keys, int64_t npad, int64_t j, int64_t k) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < npad / 2; t += int64_t(gridDim.x) * blockDim.x)
    bitonic_pair(keys, t, j, k, 0);
}

// Block b holds keys [b * tile, (b + 1) * tile) in shared memory (tile = min(npad, kSortTile),
// blockDim.x = tile / 2) and runs, for each k in [k_first, k_last] (powers of two), the steps
// j = min(k, tile) / 2 .. 1: all of them stay inside the tile.
__global__ void __launch_bounds__(kSortTile / 2)
    bitonic_tile_steps(int64_t* keys, int64_t tile, int64_t k_first, int64_t k_last) {
  __shared__ int64_t s[kSortTile];
  const int64_t base = int64_t(blockIdx.x) * tile;
  for (int64_t t = threadIdx.x; t < tile; t += blockDim.x) s[t] = keys[base + t];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k <<= 1) {
    for (int64_t j = (k < tile ? k : tile) >> 1; j > 0; j >>= 1) {
      bitonic_pair(s, threadIdx.x, j, k, base);
      __syncthreads();
    }
  }
  for (int64_t t = threadIdx.x; t < tile; t += blockDim.x) keys[base + t] = s[t];
}

void bitonic_sort(int64_t* keys, int64_t npad, Stream s) {
  if (npad < 2) return;
  const int64_t tile = npad < kSortTile ? npad : kSortTile;
  const unsigned tiles = unsigned(npad / tile);
  // k = 2 .. tile: entirely inside tiles.
  bitonic_tile_steps<<<tiles, unsigned(tile / 2), 0, s>>>(keys, tile, 2, tile);
  MT_CUDA_CHECK_LAUNCH("bitonic_tile_steps");
  for (int64_t k = tile * 2; k <= npad; k <<= 1) {
    for (int64_t j = k >> 1; j >= tile; j >>= 1) {
      bitonic_global_step<<<grid_for(npad / 2), kBlock, 0, s>>>(keys, npad, j, k);
      MT_CUDA_CHECK_LAUNCH("bitonic_global_step");
    }
    bitonic_tile_steps<<<tiles, unsigned(tile / 2), 0, s>>>(keys, tile, k, k);  // j = tile/2 .. 1
    MT_CUDA_CHECK_LAUNCH("bitonic_tile_steps");
  }
}

// dweight [V, D] contiguous; one thread per (v, j). keys: the n sorted keys. dy row p at
// dy + offsets(p) + j * dstride.
template <class T>
__global__ void embedding_backward_kernel(const int64_t* __restrict__ keys, int64_t n, const T* __restrict__ dy,
                                          OffsetCalculator<1> dyc, int64_t dstride, T* __restrict__ dw, int64_t V,
                                          int64_t D, int64_t padding_idx) {
  const int64_t total = V * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = e / D, j = e - v * D;
    if (v == padding_idx) {  // no gradient for the padding row
      dw[e] = store<T>(0.0);
      continue;
    }
    const int64_t lo_key = v * n;
    // First key >= v * n.
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < lo_key) lo = mid + 1;
      else hi = mid;
    }
    double acc = 0.0;
    for (int64_t q = lo; q < n && keys[q] - lo_key < n; ++q) {  // the run of row v, increasing p
      int64_t o[1];
      dyc.offsets(keys[q] - lo_key, o);
      acc += double(load(dy[o[0] + j * dstride]));
    }
    dw[e] = store<T>(acc);
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void embedding(const Strided& indices, const Strided& weight, const Strided& out) {
  DeviceGuard guard(weight.device().index);
  const int64_t V = weight.size(0), D = weight.size(1), n = indices.numel();
  const OffsetCalculator<1> ic = make_offset_calculator<1>(indices.shape(), {indices.strides()});
  check_indices(indices, V, "embedding", "weight", weight);
  if (n == 0 || D == 0) return;
  MT_CHECK(out.is_contiguous(), "embedding: output must be contiguous, got ", out.meta());
  dispatch_floating(weight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<grid_for(n * D), kBlock, 0, stream_of(weight)>>>(
        static_cast<const int64_t*>(indices.raw_data()), ic, static_cast<const T*>(weight.raw_data()),
        weight.strides()[0], weight.strides()[1], static_cast<T*>(out.raw_data()), n, D, V);
    MT_CUDA_CHECK_LAUNCH("embedding_kernel");
  });
}

void embedding_backward(const Strided& indices, const Strided& dy, int64_t padding_idx, const Strided& dweight) {
  DeviceGuard guard(dy.device().index);
  const int64_t V = dweight.size(0), D = dweight.size(1), n = indices.numel();
  const OffsetCalculator<1> ic = make_offset_calculator<1>(indices.shape(), {indices.strides()});
  check_indices(indices, V, "embedding backward", "dweight", dweight);
  if (V == 0 || D == 0) return;
  MT_CHECK(dweight.is_contiguous(), "embedding backward: dweight must be contiguous, got ", dweight.meta());
  MT_CHECK(n == 0 || V <= INT64_MAX / n, "embedding backward: ", V, " rows x ", n,
           " indices overflow the 64-bit sort keys");
  const Stream s = stream_of(dy);
  // Sorted keys (Note [Embedding backward on the GPU]); npad: n rounded up to a power of two.
  int64_t npad = 1;
  while (npad < n) npad <<= 1;
  Workspace keys({npad}, DType::i64, dy.device());
  int64_t* pk = keys.data<int64_t>();
  if (n > 0) {
    embedding_keys_kernel<<<grid_for(npad), kBlock, 0, s>>>(static_cast<const int64_t*>(indices.raw_data()), ic, n,
                                                            npad, pk);
    MT_CUDA_CHECK_LAUNCH("embedding_keys_kernel");
    bitonic_sort(pk, npad, s);
  }
  // dy viewed as [n, D]: its leading dims follow indices' shape.
  const Shape& dys = dy.strides();
  const Shape lead(dys.begin(), dys.end() - 1);
  const OffsetCalculator<1> dyc = make_offset_calculator<1>(indices.shape(), {lead});
  dispatch_floating(dy.dtype(), "embedding backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T><<<grid_for(V * D), kBlock, 0, s>>>(pk, n, static_cast<const T*>(dy.raw_data()), dyc,
                                                                    dys.back(), static_cast<T*>(dweight.raw_data()), V,
                                                                    D, padding_idx);
    MT_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
  });
}

}  // namespace mixtape::cuda
