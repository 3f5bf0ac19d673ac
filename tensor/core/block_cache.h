// The caching allocator's bookkeeping, in plain C++: the CUDA runtime caches device memory with
// it (cuda/runtime.cu) and Storage caches large host buffers (tensor/storage.cpp, Note [Host
// caching allocator]). The CPU tests exercise it with a fake allocator
// (tests/cuda/test_block_cache.cpp).
//
// Note [Caching allocator]
// cudaMalloc and cudaFree synchronize the device and cost tens of microseconds, so a training
// step that allocated every activation and gradient afresh would spend more time in the driver
// than in kernels. Freed blocks therefore go to a cache keyed by size class and are handed out
// again; steady-state training, which frees and asks for the same sizes every step, makes no
// real allocations after its first step (`real_allocs` stays flat; the tests and bench/ check
// this).
//   - Size classes: a request is rounded up to 512 bytes, then to the next of four classes per
//     power of two (2^k, 1.25 2^k, 1.5 2^k, 1.75 2^k), so reuse needs only a class match and no
//     block wastes more than a quarter of its size.
//   - Stream order: every kernel of a device runs on its one stream (runtime.h), so a block freed
//     on the host while kernels that read it are still queued can be handed to the next
//     allocation at once: the new owner's kernels are queued behind the old ones.
//   - Out of memory: when the real allocator fails, every cached block is released and the
//     request tried once more before the error reaches the caller.
//
// Note [Block observer]
// Size classes hide small overruns: a kernel that writes one element past a 1000-byte tensor
// lands in the 24 spare bytes of its 1024-byte block. The emulated CUDA device (Note [CUDA
// emulation] in tests/cuda/emu/emu.h) therefore watches every hand-out and return of a cache
// through block_observer(): handed_out(p, n) when allocate gives p for a request of exactly n
// bytes, taken_back(p) when release takes p back, so it knows each allocation's exact extent and
// its lifetime. Process-wide and null unless the emulator installs it (one atomic load per call);
// host caches call it too, and the observer ignores pointers that are not its own. It never
// changes what the cache does.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mixtape {

struct AllocatorStats {
  uint64_t requests = 0;     // allocate() calls with nbytes > 0
  uint64_t cache_hits = 0;   // requests served from the cache
  uint64_t real_allocs = 0;  // calls of the real allocator that succeeded
  uint64_t real_frees = 0;   // blocks handed back to the real allocator
  size_t bytes_in_use = 0;   // size-class bytes held by live allocations
  size_t bytes_cached = 0;   // size-class bytes waiting in the cache
  size_t peak_bytes_in_use = 0;
};

struct BlockObserver {
  void (*handed_out)(void* p, size_t nbytes);
  void (*taken_back)(void* p);
};
inline std::atomic<const BlockObserver*>& block_observer() {
  static std::atomic<const BlockObserver*> observer{nullptr};
  return observer;
}

class BlockCache {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // nullptr when out of memory
  using RawFree = std::function<void(void*)>;

  BlockCache(RawAlloc raw_alloc, RawFree raw_free) : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // The size a request of n bytes occupies (n > 0).
  static size_t size_class(size_t n) {
    constexpr size_t kMin = 512;
    n = (n + kMin - 1) / kMin * kMin;
    size_t p = kMin;
    while (p * 2 <= n) p *= 2;  // p <= n < 2p
    if (p == n) return n;
    const size_t quarter = p / 4;  // p >= 1024 here, so a whole number of 256-byte quarters
    return p + (n - p + quarter - 1) / quarter * quarter;
  }

  // nullptr for n == 0, or when the real allocator fails even after the cache is emptied.
  void* allocate(size_t n) {
    if (n == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    const size_t cls = size_class(n);
    void* p = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= cls;
      ++stats_.cache_hits;
    } else {
      p = raw_alloc_(cls);
      if (!p) {
        release_cached_locked();
        p = raw_alloc_(cls);
      }
      if (!p) return nullptr;
      ++stats_.real_allocs;
    }
    live_[p] = cls;
    stats_.bytes_in_use += cls;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
    if (const BlockObserver* o = block_observer().load(std::memory_order_acquire)) o->handed_out(p, n);
    return p;
  }

  // Returns p (from allocate) to the cache. Returns false for a pointer this cache never gave
  // out (the caller reports it); nullptr is accepted and ignored.
  bool release(void* p) {
    if (!p) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t cls = it->second;
    live_.erase(it);
    if (const BlockObserver* o = block_observer().load(std::memory_order_acquire)) o->taken_back(p);
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
    free_[cls].push_back(p);
    return true;
  }

  // Hands every cached block back to the real allocator (live blocks are untouched).
  void empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  void release_cached_locked() {
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) {
        raw_free_(p);
        ++stats_.real_frees;
        stats_.bytes_cached -= cls;
      }
      blocks.clear();
    }
  }

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::unordered_map<void*, size_t> live_;               // pointer -> size class
  AllocatorStats stats_;
};

}  // namespace mixtape
