// The caching allocator's bookkeeping (tensor/core/block_cache.h) with a fake device allocator: no GPU
// needed. test_runtime.cpp checks the same counters with real device memory.
#include "support/catch.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "tensor/core/block_cache.h"

using mixtape::BlockCache;

namespace {

struct FakeDevice {
  size_t capacity = size_t(1) << 30;
  size_t used = 0;
  std::map<void*, size_t> live;  // pointer -> bytes
  BlockCache cache{[this](size_t n) -> void* {
                     if (used + n > capacity) return nullptr;
                     used += n;
                     void* p = std::malloc(n);
                     live[p] = n;
                     return p;
                   },
                   [this](void* p) {
    auto it = live.find(p);
    REQUIRE(it != live.end());
    used -= it->second;
    live.erase(it);
    std::free(p);
                   }};
  ~FakeDevice() { cache.empty(); }
};

}  // namespace

TEST_CASE("BlockCache size classes waste at most a quarter", "[cuda_alloc]") {
  CHECK(BlockCache::size_class(1) == 512);
  CHECK(BlockCache::size_class(512) == 512);
  CHECK(BlockCache::size_class(513) == 1024);
  CHECK(BlockCache::size_class(1025) == 1536);  // 512-byte granule first
  CHECK(BlockCache::size_class(2049) == 2560);
  CHECK(BlockCache::size_class(4096) == 4096);
  CHECK(BlockCache::size_class(4097) == 5120);
  for (size_t n = 1; n < (size_t(1) << 26); n = n * 3 + 7) {
    const size_t c = BlockCache::size_class(n);
    INFO("n = " << n << ", class = " << c);
    CHECK(c >= n);
    CHECK(c % 256 == 0);
    if (n > 1024) CHECK(double(c) <= 1.25 * double(n) + 512);
    CHECK(BlockCache::size_class(c) == c);  // classes are fixed points
  }
}

TEST_CASE("BlockCache reuses freed blocks, so a repeated step allocates nothing", "[cuda_alloc]") {
  FakeDevice dev;
  const std::vector<size_t> step_sizes = {4096, 100, 70000, 4096, 1 << 20, 33};
  auto run_step = [&] {
    std::vector<void*> ptrs;
    for (size_t n : step_sizes) ptrs.push_back(dev.cache.allocate(n));
    for (void* p : ptrs) REQUIRE(p != nullptr);
    for (void* p : ptrs) REQUIRE(dev.cache.release(p));
  };
  run_step();
  const auto warm = dev.cache.stats();
  CHECK(warm.real_allocs == step_sizes.size());
  for (int i = 0; i < 10; ++i) run_step();
  const auto after = dev.cache.stats();
  CHECK(after.real_allocs == warm.real_allocs);  // flat after warm-up
  CHECK(after.cache_hits == 10 * step_sizes.size());
  CHECK(after.bytes_in_use == 0);
  CHECK(after.bytes_cached == warm.bytes_cached);
  CHECK(after.peak_bytes_in_use == warm.peak_bytes_in_use);
}

TEST_CASE("BlockCache hands distinct live blocks and rejects foreign pointers", "[cuda_alloc]") {
  FakeDevice dev;
  void* a = dev.cache.allocate(1000);
  void* b = dev.cache.allocate(1000);
  CHECK(a != b);
  CHECK(dev.cache.allocate(0) == nullptr);
  int not_ours = 0;
  CHECK_FALSE(dev.cache.release(&not_ours));
  CHECK(dev.cache.release(nullptr));
  REQUIRE(dev.cache.release(a));
  CHECK_FALSE(dev.cache.release(a));    // a second release of the same block is refused
  CHECK(dev.cache.allocate(900) == a);  // same class: the cached block comes back
  REQUIRE(dev.cache.release(a));
  REQUIRE(dev.cache.release(b));
}

TEST_CASE("BlockCache empties its cache and retries when the device is full", "[cuda_alloc]") {
  FakeDevice dev;
  dev.capacity = 3 * 4096;
  void* a = dev.cache.allocate(4096);
  void* b = dev.cache.allocate(4096);
  REQUIRE(dev.cache.release(a));
  REQUIRE(dev.cache.release(b));         // 8 KiB cached, 4 KiB left on the device
  void* big = dev.cache.allocate(8192);  // a new class: fails once, empties the cache, succeeds
  REQUIRE(big != nullptr);
  const auto s = dev.cache.stats();
  CHECK(s.real_frees == 2);
  CHECK(s.bytes_cached == 0);
  CHECK(dev.cache.allocate(1 << 20) == nullptr);  // more than the device has: nullptr, no throw
  REQUIRE(dev.cache.release(big));
  dev.cache.empty();
  CHECK(dev.live.empty());
}
