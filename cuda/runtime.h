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
#include <functional>
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
// memset_async and every device-to-device copy count as one), host synchronizations
// (synchronize(), every device-to-host copy, every host-to-device copy: from pageable memory the
// CUDA runtime synchronizes the stream before it stages the bytes, and every cudaFree of a cached
// block, on the allocator's out-of-memory retry and in empty_cache), and device allocations
// (calls that reach cudaMalloc, not blocks the caching allocator serves again). The emulated device counts the same way; without CUDA they
// stay 0. The training loop reports them per step (train/metrics.h, StepCounters).
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

// Note [Readout block]
// A training step on the GPU decides on the device (Note [Scaled step] in optim/scaled_step.cpp)
// and checks its indices there (Note [Deferred device checks]); the host wants those numbers only
// now and then: when it logs, checkpoints, or when something else reads the device anyway. Each
// device therefore has one small block of device memory, the readout block (kReadoutBytes),
// that the host reads whole, in one copy, every time it synchronizes with the device:
//   - copy_device_to_host of a few bytes (kStageBytes or fewer: Tensor::item(), a flag) first
//     copies them into the block's staging area on the stream and then reads the block: one
//     synchronization brings the value, every pending check and every readout tensor;
//   - copy_device_to_host of anything larger, and synchronize(), read the block too when checks
//     are pending (a larger read is one more synchronization; synchronize() reads the block
//     instead of waiting for the stream, which is the same wait);
//   - a read of memory inside the block (a readout tensor: Tensor readout_zeros in
//     tensor/tensor.h) is served from the host's copy of the last read, with no synchronization,
//     as long as no work was queued on any device since; otherwise it reads the block again.
// So the loss scaler's state, the step's skip flag and gradient norm, and a training loop's loss
// log can sit in the block, and the one read a logging step makes brings all of them.
// readout_malloc hands out pieces of the block (nullptr when it is full: the caller falls back
// to device_malloc); readout_free gives them back.
inline constexpr size_t kReadoutBytes = size_t(16) << 10;
inline constexpr size_t kStageBytes = 256;
void* readout_malloc(size_t nbytes, int device);
void readout_free(void* ptr, size_t nbytes, int device) noexcept;

// Note [Deferred device checks]
// A launcher that validates values the host cannot see (cross_entropy's targets, embedding's
// indices, binary_cross_entropy's probabilities) checks them on the device instead of reading them
// back: defer_check returns a slot of two words in the readout block, which the check kernel writes
// unconditionally with [the first bad position or -1, the value there]. The host keeps `message`
// and, at the next read of the block (Note [Readout block]), throws message(position, value) for
// the first failed check in launch order, so the error names the op, shapes and dtypes as the
// immediate check did, and a bad index never costs a synchronization of its own. At most
// kCheckSlots checks wait at a time; one more reads the block first. check_deferred(device) reads
// now if any check is pending.
inline constexpr size_t kCheckSlots = 64;
using CheckMessage = std::function<std::string(int64_t position, int64_t value)>;
int64_t* defer_check(int device, CheckMessage message);
void check_deferred(int device);

}  // namespace mixtape::cuda
