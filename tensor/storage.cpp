#include "tensor/storage.h"

#include <cstdlib>
#include <new>

#include "cuda/runtime.h"
#include "tensor/core/block_cache.h"
#include "tensor/core/error.h"

namespace mixtape {

namespace {

constexpr size_t kHostAlignment = 64;  // one cache line; enough for AVX-512 loads

// Note [Host caching allocator]
// A training step frees and asks for the same large buffers every step (activations, gradients,
// im2col columns). Handed back to the C library, large blocks go back to the kernel, and every
// new step faults their pages in again, zero-filled: with two threads that cost as much system
// time as half the user time of a cnn run. Buffers of at least kHostCacheMin bytes therefore go
// through the same size-class cache as device memory (Note [Caching allocator] in
// block_cache.h), so steady-state training allocates nothing new after its first step; smaller
// ones, which the C library keeps in its own free lists, go to it directly. Out of memory, the
// cache is emptied and the request retried.
constexpr size_t kHostCacheMin = size_t(64) << 10;

// Never destroyed, like the device caches (cuda/runtime.cu): a tensor that outlives main's statics
// can still return its block, and the cached blocks stay reachable to the end, so leak checkers do
// not report them (a destroyed cache would drop its only pointers to them).
BlockCache& host_cache() {
  static BlockCache* const cache =
      new BlockCache([](size_t n) { return std::aligned_alloc(kHostAlignment, n); }, [](void* p) { std::free(p); });
  return *cache;
}

void* host_alloc(size_t nbytes) {
  if (nbytes >= kHostCacheMin) return host_cache().allocate(nbytes);
  const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  return rounded ? std::aligned_alloc(kHostAlignment, rounded) : nullptr;
}

void host_free(void* p, size_t nbytes) {
  if (nbytes >= kHostCacheMin) host_cache().release(p);
  else std::free(p);
}

}  // namespace

AllocatorStats host_allocator_stats() { return host_cache().stats(); }
void empty_host_cache() { host_cache().empty(); }

Storage::Storage(size_t nbytes, Device device, bool readout) : nbytes_(nbytes), device_(device) {
  on_device(
      device,
      [&] {
    data_ = host_alloc(nbytes);
    MT_CHECK(nbytes == 0 || data_, "Storage: out of host memory allocating ", nbytes, " bytes");
      },
      [&] {
    if (readout && nbytes > 0) data_ = cuda::readout_malloc(nbytes, device.index);
    readout_ = data_ != nullptr;
    if (!readout_) data_ = cuda::device_malloc(nbytes, device.index);
  });
}

Storage::~Storage() {
  on_device(
      device_, [&] { host_free(data_, nbytes_); },
      [&] {
    if (readout_) cuda::readout_free(data_, nbytes_, device_.index);
    else cuda::device_free(data_, device_.index);
      });
}

}  // namespace mixtape
