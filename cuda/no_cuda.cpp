// Built without CUDA: the runtime and every launcher exist and throw, so a CPU-only build keeps
// the same API and a CUDA tensor gives a clear message instead of a link error.
#include "cuda/backend.h"
#include "cuda/gemm.h"
#include "cuda/runtime.h"
#include "tensor/core/error.h"

namespace mixtape::cuda {

namespace {
[[noreturn]] void unavailable(const char* what) {
  throw Error(detail::cat(what,
                          ": mixtape was built without CUDA (reconfigure with nvcc on the PATH "
                          "or -DMIXTAPE_CUDA=ON)"));
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
DeviceInfo device_info(int) { unavailable("cuda::device_info"); }
Stream stream(int) { unavailable("cuda::stream"); }
void synchronize(int) { unavailable("cuda::synchronize"); }
void* device_malloc(size_t, int) { unavailable("cuda::device_malloc"); }
void device_free(void*, int) noexcept {}
AllocatorStats allocator_stats(int) { unavailable("cuda::allocator_stats"); }
void empty_cache(int) { unavailable("cuda::empty_cache"); }
RuntimeCounters runtime_counters() { return {}; }
void count_launch() {}
GemmLoadCounts gemm_load_counts() { return {}; }
GemmLoadPlan gemm_load_plan(const GemmParams&) { unavailable("cuda::gemm_load_plan"); }
void memset_async(void*, int, size_t, Stream) { unavailable("cuda::memset_async"); }
void copy_host_to_device(void*, const void*, size_t, int) { unavailable("cuda::copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t, int) { unavailable("cuda::copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t, int) { unavailable("cuda::copy_device_to_device"); }
void* readout_malloc(size_t, int) { unavailable("cuda::readout_malloc"); }
void readout_free(void*, size_t, int) noexcept {}
int64_t* defer_check(int, CheckMessage) { unavailable("cuda::defer_check"); }
void check_deferred(int) {}

#define MT_CUDA_LAUNCHER(name, params) \
  void name params { unavailable("cuda::" #name); }
#include "cuda/launchers.def"
#undef MT_CUDA_LAUNCHER

double max_abs(const Strided&) { unavailable("cuda::max_abs"); }

}  // namespace mixtape::cuda
