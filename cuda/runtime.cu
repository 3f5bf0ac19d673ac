// CUDA runtime: device discovery, the caching allocator, one stream per device, copies. Every
// CUDA call is checked; a failure becomes a mixtape::Error naming the call, file and line.
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/runtime.h"

namespace mixtape::cuda {

namespace {

// Note [Runtime counters]
std::atomic<uint64_t> launches{0}, host_syncs{0}, device_allocs{0};
// Launches and copies that may have written device memory, on any device: the host's copy of a
// readout block is current while this has not moved since the read (Note [Readout block]).
std::atomic<uint64_t> work{0};

void queued() { work.fetch_add(1, std::memory_order_relaxed); }

// Note [Readout block]: the block of one device, and what the host knows about it.
//   [0, kStageBytes)                         staging for small reads
//   [kStageBytes, + kCheckSlots * 16)         the slots of deferred checks
//   the rest                                 readout_malloc's pieces (16-byte aligned)
struct Readout {
  struct Check {
    size_t offset;
    CheckMessage message;
  };
  unsigned char* dev = nullptr;
  std::vector<unsigned char> host;              // the last read, [0, end)
  size_t end = kStageBytes + kCheckSlots * 16;  // bytes in use (reads copy [0, end))
  uint64_t read_at = ~uint64_t(0);              // `work` at the last read
  std::vector<std::pair<size_t, size_t>> free;  // pieces given back: (offset, bytes)
  std::vector<Check> checks;                    // pending, in launch order
  std::mutex mutex;
};

struct DeviceState {
  Stream stream = nullptr;
  std::unique_ptr<BlockCache> cache;
  std::atomic<Readout*> readout{nullptr};  // created on first use
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
        [device](void* p) {  // cudaFree waits for the device: a host synchronization
      cudaSetDevice(device);
      host_syncs.fetch_add(1, std::memory_order_relaxed);
      cudaFree(p);
        });
  }
  return *s;
}

// The device's readout block, created (one cudaMalloc, counted) on first use.
Readout& readout(int device) {
  DeviceState& s = state(device);
  if (Readout* r = s.readout.load()) return *r;
  static std::mutex create;
  std::lock_guard<std::mutex> lock(create);
  if (Readout* r = s.readout.load()) return *r;
  auto* r = new Readout();  // never destroyed, like the device states
  DeviceGuard guard(device);
  device_allocs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&r->dev), kReadoutBytes));
  MT_CUDA_CHECK(cudaMemsetAsync(r->dev, 0, kReadoutBytes, s.stream));
  queued();
  s.readout.store(r);
  return *r;
}

Readout* readout_if_any(int device) { return state(device).readout.load(); }

// Reads [0, r.end) of the block (one synchronization), then throws the first failed check.
// Called with r.mutex held.
void read_block(Readout& r, int device) {
  DeviceGuard guard(device);
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  r.host.resize(r.end);
  const uint64_t at = work.load();
  MT_CUDA_CHECK(cudaMemcpyAsync(r.host.data(), r.dev, r.end, cudaMemcpyDeviceToHost, stream(device)));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  r.read_at = at;
  std::vector<Readout::Check> checks = std::move(r.checks);
  r.checks.clear();
  for (const Readout::Check& c : checks) {
    int64_t slot[2];
    std::memcpy(slot, r.host.data() + c.offset, sizeof slot);
    if (slot[0] >= 0) throw Error(c.message(slot[0], slot[1]));
  }
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

void count_launch() {
  launches.fetch_add(1, std::memory_order_relaxed);
  queued();
}

void synchronize(int device) {
  if (Readout* r = readout_if_any(device)) {  // the read waits for the stream, and brings the block
    std::lock_guard<std::mutex> lock(r->mutex);
    return read_block(*r, device);
  }
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
  queued();
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream(device)));
  // Pageable source: the call returns once the bytes are staged, so the caller may free src; the
  // runtime synchronizes the stream first (counted above).
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  Readout* r = readout_if_any(device);
  if (r) {  // Note [Readout block]
    std::lock_guard<std::mutex> lock(r->mutex);
    const auto* p = static_cast<const unsigned char*>(src);
    if (p >= r->dev && p + nbytes <= r->dev + r->end) {  // a readout tensor: the last read, if current
      if (r->read_at != work.load() || r->host.size() < r->end) read_block(*r, device);
      std::memcpy(dst, r->host.data() + (p - r->dev), nbytes);
      return;
    }
    if (nbytes <= kStageBytes) {                         // staged into the block: one read brings it and the block
      launches.fetch_add(1, std::memory_order_relaxed);  // the staging copy runs on the device
      MT_CUDA_CHECK(cudaMemcpyAsync(r->dev, src, nbytes, cudaMemcpyDeviceToDevice, stream(device)));
      queued();
      read_block(*r, device);
      std::memcpy(dst, r->host.data(), nbytes);
      return;
    }
  }
  host_syncs.fetch_add(1, std::memory_order_relaxed);
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream(device)));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  if (r) {
    std::lock_guard<std::mutex> lock(r->mutex);
    if (!r->checks.empty()) read_block(*r, device);
  }
}

void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  queued();
  launches.fetch_add(1, std::memory_order_relaxed);  // a copy engine's work on the stream, like a kernel's
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream(device)));
}

void* readout_malloc(size_t nbytes, int device) {
  Readout& r = readout(device);
  std::lock_guard<std::mutex> lock(r.mutex);
  const size_t n = (nbytes + 15) / 16 * 16;
  if (n == 0) return nullptr;
  for (size_t i = r.free.size(); i-- > 0;)  // the piece of this size given back last
    if (r.free[i].second == n) {
      const size_t off = r.free[i].first;
      r.free.erase(r.free.begin() + std::ptrdiff_t(i));
      return r.dev + off;
    }
  if (r.end + n > kReadoutBytes) return nullptr;
  const size_t off = r.end;
  r.end += n;
  return r.dev + off;
}

void readout_free(void* ptr, size_t nbytes, int device) noexcept {
  if (!ptr) return;
  Readout* r = readout_if_any(device);
  if (!r) return;
  std::lock_guard<std::mutex> lock(r->mutex);
  r->free.emplace_back(size_t(static_cast<unsigned char*>(ptr) - r->dev), (nbytes + 15) / 16 * 16);
}

int64_t* defer_check(int device, CheckMessage message) {
  Readout& r = readout(device);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.checks.size() == kCheckSlots) read_block(r, device);  // every slot waits: drain them first
  const size_t off = kStageBytes + r.checks.size() * 16;
  r.checks.push_back({off, std::move(message)});
  return reinterpret_cast<int64_t*>(r.dev + off);
}

void check_deferred(int device) {
  Readout* r = readout_if_any(device);
  if (!r) return;
  std::lock_guard<std::mutex> lock(r->mutex);
  if (!r->checks.empty()) read_block(*r, device);
}

void memset_async(void* dst, int value, size_t nbytes, Stream stream) {
  count_launch();
  MT_CUDA_CHECK(cudaMemsetAsync(dst, value, nbytes, stream));
}

}  // namespace mixtape::cuda
