// CUDA runtime: device discovery, the caching allocator, one stream per device, copies. Every
// CUDA call is checked; a failure becomes a mixtape::Error naming the call, file and line.
#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/runtime.h"

namespace mixtape::cuda {

namespace {

// Note [Runtime counters]
std::atomic<uint64_t> launches{0}, host_syncs{0}, device_allocs{0};

struct DeviceState {
  Stream stream = nullptr;
  std::unique_ptr<BlockCache> cache;
};

// One state per device, created on first use. The states are never destroyed: at process exit
// the driver may already be gone, and it reclaims the memory itself.
DeviceState& state(int device) {
  static std::mutex mutex;
  static std::vector<DeviceState*>* states = new std::vector<DeviceState*>();
  std::lock_guard<std::mutex> lock(mutex);
  const int n = device_count();
  MT_CHECK(device >= 0 && device < n, "cuda:", device, " does not exist (", n, " CUDA device(s) visible)");
  if (states->empty()) states->resize(size_t(n), nullptr);
  DeviceState*& s = (*states)[size_t(device)];
  if (!s) {
    s = new DeviceState();
    MT_CUDA_CHECK(cudaSetDevice(device));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    s->cache = std::make_unique<BlockCache>(
        [device](size_t n) -> void* {
          void* p = nullptr;
          cudaSetDevice(device);
          device_allocs.fetch_add(1, std::memory_order_relaxed);
          if (cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free out-of-memory error
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
      cudaSetDevice(device);
      cudaFree(p);
        });
  }
  return *s;
}

}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: report none
      return 0;
    }
    return count;
  }();
  return n;
}

bool is_available() { return device_count() > 0; }

DeviceInfo device_info(int device) {
  state(device);  // validates the index
  cudaDeviceProp p{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo info;
  info.name = p.name;
  info.major = p.major;
  info.minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  info.global_memory = p.totalGlobalMem;
  info.shared_per_block_optin = p.sharedMemPerBlockOptin;
  return info;
}

Stream stream(int device) { return state(device).stream; }

RuntimeCounters runtime_counters() {
  return {.launches = launches.load(), .host_syncs = host_syncs.load(), .device_allocs = device_allocs.load()};
}

void count_launch() { launches.fetch_add(1, std::memory_order_relaxed); }

void synchronize(int device) {
  DeviceGuard guard(device);
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

void* device_malloc(size_t nbytes, int device) {
  if (nbytes == 0) return nullptr;
  void* p = state(device).cache->allocate(nbytes);
  if (!p) {
    size_t free_bytes = 0, total = 0;
    DeviceGuard guard(device);
    cudaMemGetInfo(&free_bytes, &total);
    throw Error(detail::cat("cuda:", device, ": out of memory allocating ", nbytes, " bytes (", free_bytes, " of ",
                            total, " bytes free after emptying the cache)"));
  }
  return p;
}

void device_free(void* ptr, int device) noexcept {
  if (!ptr) return;
  // A pointer the cache never gave out is a bug elsewhere; there is no one to tell from a
  // destructor, so it is dropped rather than freed twice.
  (void)state(device).cache->release(ptr);
}

AllocatorStats allocator_stats(int device) { return state(device).cache->stats(); }

void empty_cache(int device) {
  synchronize(device);
  state(device).cache->empty();
}

void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream(device)));
  // Pageable source: the call returns once the bytes are staged, so the caller may free src; the
  // runtime synchronizes the stream first (counted above).
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream(device)));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream(device)));
}

void memset_async(void* dst, int value, size_t nbytes, Stream stream) {
  count_launch();
  MT_CUDA_CHECK(cudaMemsetAsync(dst, value, nbytes, stream));
}

}  // namespace mixtape::cuda
