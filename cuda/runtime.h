// CUDA runtime seam: device discovery, the caching allocator, one stream per device, copies.
// Implemented in runtime.cu when mixtape is built with CUDA; otherwise (cuda/no_cuda.cpp) the
// queries report no device and everything else throws "built without CUDA". This header names no
// CUDA type, so tensor/ includes it in every build.
//
// Note [One stream per device]
// Every kernel and copy for device d is queued on stream(d), a non-blocking stream created on
// first use; launchers take it as a parameter and nothing uses the legacy default stream. One
// stream keeps the program order of ops without events, and is what makes the caching
// allocator's immediate reuse safe (Note [Caching allocator] in tensor/core/block_cache.h). Reads back to
// the host (copy_device_to_host, Tensor::item, max_abs) wait for the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/core/block_cache.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace mixtape::cuda {

using Stream = CUstream_st*;

bool built_with_cuda();
int device_count();  // 0 when built without CUDA or when no GPU is visible
bool is_available();

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t global_memory = 0;  // bytes
  size_t shared_per_block_optin = 0;
};
DeviceInfo device_info(int device);

Stream stream(int device);     // the device's stream (Note [One stream per device])
void synchronize(int device);  // waits for everything queued on stream(device)

// Device memory through the caching allocator (Note [Caching allocator]). device_malloc throws
// with the size and the device's free memory when even an emptied cache cannot serve it.
void* device_malloc(size_t nbytes, int device);
void device_free(void* ptr, int device) noexcept;
AllocatorStats allocator_stats(int device);
void empty_cache(int device);  // real frees of every cached block (synchronizes first)

// Note [Runtime counters]
// What a training step costs the host, counted where it happens, over every device since the
// program started: kernel launches (every <<<...>>> goes through MT_CUDA_CHECK_LAUNCH, and
// memset_async counts as one), host synchronizations (synchronize(), every device-to-host copy,
// and every host-to-device copy: from pageable memory the CUDA runtime synchronizes the stream
// before it stages the bytes), and device allocations (calls that reach cudaMalloc, not blocks the
// caching allocator serves again). The emulated device counts the same way; without CUDA they
// stay 0. The examples report them per step (examples/common.h, StepCounters).
struct RuntimeCounters {
  uint64_t launches = 0;
  uint64_t host_syncs = 0;
  uint64_t device_allocs = 0;
};
RuntimeCounters runtime_counters();
void count_launch();  // MT_CUDA_CHECK_LAUNCH's part

// Copies queued on stream(device); copy_device_to_host returns once the bytes are on the host.
void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device);
// Sets nbytes at dst to `value` on `stream` (a counted launch).
void memset_async(void* dst, int value, size_t nbytes, Stream stream);

}  // namespace mixtape::cuda
