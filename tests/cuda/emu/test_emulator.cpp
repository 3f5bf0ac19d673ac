// The CUDA emulator itself (Note [CUDA emulation] in emu.h): barriers, shuffles, shared memory,
// the schedule, and the faults a GPU would show (a deadlocked barrier, a bad configuration, an
// access out of bounds, a host that does not wait for the device, a fragment read by position).
// Built only in the emulated build; the kernels here are written as the rewritten .cu files are,
// and compiled with the same access checks (tests/CMakeLists.txt).
#include "tests/cuda/emu/emu.h"

#include "support/catch.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/backend.h"
#include "cuda/runtime.h"
#include "tests/cuda/emu/include/mma.h"

namespace {

constexpr int kThreads = 64;

// out[t] = the value thread (t + 1) % n wrote, read after a barrier.
void neighbour_kernel(int* out, bool barrier) {
  __shared__ int tile[kThreads];
  // What emulate.cmake adds after each __shared__ declaration of a .cu file:
  static const bool registered = ::mt_emu::register_shared(tile, sizeof(tile));
  (void)registered;
  const int t = int(threadIdx.x);
  tile[t] = t * 10;
  if (barrier) __syncthreads();
  out[t] = tile[(t + 1) % int(blockDim.x)];
}

// out[t] = the sum over the warp of lane + 1, through __shfl_xor_sync.
void warp_sum_kernel(int* out) {
  int v = int(threadIdx.x % 32) + 1;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

// Half a warp waits in __syncwarp for lanes that wait in __syncthreads for it: a hang on a GPU.
// (A __syncthreads that exited threads skip is not one: they count as arrived, as on the GPU.)
void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) __syncwarp();
  else __syncthreads();
  out[threadIdx.x] = 1;
}

std::vector<int> run_neighbour(bool barrier, const char* schedule) {
  setenv("MIXTAPE_EMU_SCHEDULE", schedule, 1);
  std::vector<int> out(kThreads, -1);
  ::mt_emu::launch(::mt_emu::Config(1, kThreads), [&](auto&&... a) { neighbour_kernel(a...); })(out.data(), barrier);
  cudaDeviceSynchronize();  // in deferred mode the kernel runs here
  unsetenv("MIXTAPE_EMU_SCHEDULE");
  REQUIRE(cudaGetLastError() == cudaSuccess);
  return out;
}

// p[i] = i for i < n + 1: the thread with i == n writes one element past the end.
void write_past_end_kernel(float* p, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) p[i] = float(i);
}

// out[i] = p[i - 1]: thread 0 reads one element before the start.
void read_before_start_kernel(const float* p, float* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = p[i - 1];
}

// p[i] = i, in bounds.
void fill_kernel(float* p, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = float(i);
}

// dst[i] = src[i].
void copy_kernel(const float* src, float* dst, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) dst[i] = src[i];
}

template <class Kernel>
auto launch_named(const char* name, dim3 grid, dim3 block, Kernel k) {
  return ::mt_emu::launch(::mt_emu::Config(grid, block).named(name, "test"), k);
}

std::string hex_of(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

// Runs the test body in deferred mode and restores the environment's choice afterwards.
struct DeferredScope {
  DeferredScope() { ::mt_emu::set_deferred(true); }
  ~DeferredScope() { ::mt_emu::set_deferred(std::nullopt); }
};

// C = A B for 16x16 f16 tiles, three ways: store_matrix_sync (right on every GPU), reading the
// fragment as if lane l held row-major elements 8l..8l+7 of the tile, and as if it held the PTX
// ISA's mma positions (Note [WMMA fragments in the emulator]).
void wmma_kernel(const __half* a, const __half* b, float* stored, float* assumed_rows, float* assumed_ptx) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(stored, acc, 16, wmma::mem_row_major);
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int i = 0; i < acc.num_elements; ++i) {
    assumed_rows[lane * 8 + i] = acc.x[i];
    assumed_ptx[(g + 8 * ((i / 2) % 2)) * 16 + 2 * t + i % 2 + 8 * (i / 4)] = acc.x[i];
  }
}

}  // namespace

TEST_CASE("emulator: __syncthreads orders shared memory in either schedule", "[cuda][emulator]") {
  for (const char* schedule : {"forward", "reverse"}) {
    const std::vector<int> out = run_neighbour(true, schedule);
    for (int t = 0; t < kThreads; ++t) CHECK(out[size_t(t)] == ((t + 1) % kThreads) * 10);
  }
}

TEST_CASE("emulator: a missing barrier gives a result that depends on the schedule", "[cuda][emulator]") {
  // Without the barrier a thread may read its neighbour's slot before the neighbour wrote it:
  // in index order thread t reads slot t + 1 too early; in reverse order thread 63 reads slot 0.
  const std::vector<int> forward = run_neighbour(false, "forward");
  const std::vector<int> reverse = run_neighbour(false, "reverse");
  CHECK(forward != reverse);
}

TEST_CASE("emulator: warp shuffles exchange values between lanes", "[cuda][emulator]") {
  std::vector<int> out(96, 0);  // three warps
  ::mt_emu::launch(::mt_emu::Config(1, 96), [&](auto&&... a) { warp_sum_kernel(a...); })(out.data());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int v : out) CHECK(v == 32 * 33 / 2);
}

TEST_CASE("emulator: barriers that can never all be reached fail the launch", "[cuda][emulator]") {
  std::vector<int> out(32, 0);
  ::mt_emu::launch(::mt_emu::Config(1, 32), [&](auto&&... a) { divergent_barrier_kernel(a...); })(out.data());
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);  // a fault shows at the next wait, as on a GPU
  CHECK(::mt_emu::last_fault().find("deadlock") != std::string::npos);
  ::mt_emu::clear_fault();
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);  // read and cleared
}

TEST_CASE("emulator: a bad launch configuration is reported as on a GPU", "[cuda][emulator]") {
  std::vector<int> out(1, 0);
  ::mt_emu::launch(::mt_emu::Config(1, 2048), [&](auto&&... a) { warp_sum_kernel(a...); })(out.data());
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ::mt_emu::launch(::mt_emu::Config(dim3(1, 70000), 32), [&](auto&&... a) { warp_sum_kernel(a...); })(out.data());
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
}

TEST_CASE("emulator: a kernel writing one element past its allocation is caught", "[cuda][emulator]") {
  // 1000 bytes: the caching allocator's 1024-byte size class would hide the overrun on its own.
  constexpr int n = 250;
  auto* p = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  ::mt_emu::clear_fault();
  launch_named("write_past_end_kernel", 2, 128, [&](auto&&... a) { write_past_end_kernel(a...); })(p, n);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  cudaGetLastError();
  const std::string fault = ::mt_emu::last_fault();
  INFO(fault);
  CHECK(fault.find("out-of-bounds write of 4 byte(s) at address " + hex_of(p + n)) != std::string::npos);
  CHECK(fault.find("0 byte(s) after the end of the 1000-byte device allocation at " + hex_of(p)) != std::string::npos);
  CHECK(fault.find("kernel write_past_end_kernel") != std::string::npos);
  CHECK(fault.find("block (1, 0, 0), thread (122, 0, 0)") != std::string::npos);  // 250 = 128 + 122
  mixtape::cuda::device_free(p, 0);
  ::mt_emu::clear_fault();
}

TEST_CASE("emulator: the library's own kernels are checked the same way", "[cuda][emulator]") {
  // A view that claims one element more than its 1000-byte allocation: cuda::fill's kernel
  // (cuda/copy.cu, compiled with the checks like every emulated .cu file) writes past the end.
  void* p = mixtape::cuda::device_malloc(250 * sizeof(float), 0);
  const mixtape::Strided out = mixtape::Strided::contiguous(p, mixtape::DType::f32, {251}, mixtape::Device::cuda(0));
  ::mt_emu::clear_fault();
  bool failed = false;
  try {
    mixtape::cuda::fill(out, 1.0);
    failed = cudaDeviceSynchronize() == cudaErrorLaunchFailure;  // deferred: the fault shows at the wait
  } catch (const mixtape::Error&) {
    failed = true;  // run at once: MT_CUDA_CHECK_LAUNCH reports it
  }
  CHECK(failed);
  cudaGetLastError();
  const std::string fault = ::mt_emu::last_fault();
  INFO(fault);
  CHECK(fault.find("out-of-bounds write of 4 byte(s) at address " + hex_of(static_cast<float*>(p) + 250)) !=
        std::string::npos);
  CHECK(fault.find("launched by launch_elementwise") != std::string::npos);
  mixtape::cuda::device_free(p, 0);
  ::mt_emu::clear_fault();
}

TEST_CASE("emulator: a kernel reading one element before its allocation is caught", "[cuda][emulator]") {
  constexpr int n = 100;
  auto* p = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  auto* out = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  ::mt_emu::clear_fault();
  launch_named("read_before_start_kernel", 1, 128, [&](auto&&... a) { read_before_start_kernel(a...); })(p, out, n);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  cudaGetLastError();
  const std::string fault = ::mt_emu::last_fault();
  INFO(fault);
  CHECK(fault.find("out-of-bounds read of 4 byte(s) at address " + hex_of(p - 1)) != std::string::npos);
  CHECK(fault.find("4 byte(s) before the start of the 400-byte device allocation at " + hex_of(p)) !=
        std::string::npos);
  CHECK(fault.find("kernel read_before_start_kernel") != std::string::npos);
  CHECK(fault.find("block (0, 0, 0), thread (0, 0, 0)") != std::string::npos);
  mixtape::cuda::device_free(out, 0);
  mixtape::cuda::device_free(p, 0);
  ::mt_emu::clear_fault();
}

TEST_CASE("emulator: a kernel using a buffer freed before its launch is caught", "[cuda][emulator]") {
  constexpr int n = 64;
  auto* src = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  auto* dst = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  mixtape::cuda::device_free(src, 0);  // back to the cache: the memory exists, the buffer does not
  ::mt_emu::clear_fault();
  launch_named("copy_kernel", 1, 64, [&](auto&&... a) { copy_kernel(a...); })(src, dst, n);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  cudaGetLastError();
  const std::string fault = ::mt_emu::last_fault();
  INFO(fault);
  CHECK(fault.find("freed before this operation was issued") != std::string::npos);
  mixtape::cuda::device_free(dst, 0);
  ::mt_emu::clear_fault();
}

TEST_CASE("emulator: deferred kernels run in stream order after the launch returns", "[cuda][emulator]") {
  DeferredScope deferred;
  constexpr int n = 64;
  auto* a = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  auto* b = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  ::mt_emu::clear_fault();
  launch_named("fill_kernel", 1, 64, [&](auto&&... x) { fill_kernel(x...); })(a, n);
  launch_named("copy_kernel", 1, 64, [&](auto&&... x) { copy_kernel(x...); })(a, b, n);
  // A buffer given back while a queued kernel still reads it is fine on one stream (the next
  // owner's work queues behind): the kernel issued before the free may use it, later ones not.
  mixtape::cuda::device_free(a, 0);
  std::vector<float> host(n, -1.0f);
  REQUIRE(cudaMemcpyAsync(host.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  CHECK(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(::mt_emu::last_fault().empty());
  for (int i = 0; i < n; ++i) CHECK(host[size_t(i)] == float(i));
  mixtape::cuda::device_free(b, 0);
}

TEST_CASE("emulator: a host read of a result before the stream is synchronized is caught", "[cuda][emulator]") {
  DeferredScope deferred;
  constexpr int n = 64;
  auto* d = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  float* h = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&h), n * sizeof(float)) == cudaSuccess);
  for (int i = 0; i < n; ++i) h[i] = -1.0f;
  ::mt_emu::clear_fault();
  launch_named("fill_kernel", 1, 64, [&](auto&&... x) { fill_kernel(x...); })(d, n);
  REQUIRE(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  const float early = *static_cast<volatile float*>(h + 5);  // the bug: no synchronization first
  std::string fault = ::mt_emu::last_fault();
  INFO(fault);
  CHECK(early == -1.0f);  // on a GPU too, the copy has not happened yet
  CHECK(fault.find("host read of pinned host memory at " + hex_of(h + 5)) != std::string::npos);
  CHECK(fault.find("cudaMemcpyAsync of 256 bytes from " + hex_of(d)) != std::string::npos);
  CHECK(cudaStreamSynchronize(nullptr) == cudaErrorIllegalAddress);  // the fault is reported at the wait
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  ::mt_emu::clear_fault();
  // Waiting first is right.
  REQUIRE(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  CHECK(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(h[5] == 5.0f);
  CHECK(::mt_emu::last_fault().empty());
  CHECK(cudaFreeHost(h) == cudaSuccess);
  mixtape::cuda::device_free(d, 0);
}

TEST_CASE("emulator: pinned buffers freed or refilled while queued work uses them are caught", "[cuda][emulator]") {
  DeferredScope deferred;
  constexpr int n = 64;
  auto* d = static_cast<float*>(mixtape::cuda::device_malloc(n * sizeof(float), 0));
  float* h = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&h), n * sizeof(float), 0) == cudaSuccess);
  for (int i = 0; i < n; ++i) h[i] = float(i);
  ::mt_emu::clear_fault();
  SECTION("freed while a kernel that reads it (mapped host memory) is queued") {
    float* mapped = nullptr;
    REQUIRE(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), h, 0) == cudaSuccess);
    launch_named("copy_kernel", 1, 64, [&](auto&&... x) { copy_kernel(x...); })(mapped, d, n);
    CHECK(cudaFreeHost(h) == cudaSuccess);  // the bug: the kernel has not run yet
    const std::string fault = ::mt_emu::last_fault();
    INFO(fault);
    CHECK(fault.find("cudaFreeHost of the 256-byte pinned buffer at " + hex_of(h)) != std::string::npos);
    CHECK(fault.find("kernel copy_kernel") != std::string::npos);
    CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  }
  SECTION("refilled while a copy from it is queued") {
    REQUIRE(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
    static_cast<volatile float*>(h)[3] = 42.0f;  // the bug: the copy may not have read it yet
    const std::string fault = ::mt_emu::last_fault();
    INFO(fault);
    CHECK(fault.find("host write to pinned host memory at " + hex_of(h + 3)) != std::string::npos);
    CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
    CHECK(cudaFreeHost(h) == cudaSuccess);
  }
  cudaGetLastError();
  ::mt_emu::clear_fault();
  mixtape::cuda::device_free(d, 0);
}

TEST_CASE("emulator: WMMA fragments are spread over the lanes, so code assuming a layout is caught",
          "[cuda][emulator]") {
  std::vector<__half> a(256), b(256);
  std::vector<float> want(256, 0.0f);
  for (int i = 0; i < 256; ++i) {
    a[size_t(i)] = __float2half(float((i * 7) % 11) - 5.0f);
    b[size_t(i)] = __float2half(float((i * 5) % 13) - 6.0f);
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      for (int k = 0; k < 16; ++k)
        want[size_t(r * 16 + c)] += __half2float(a[size_t(r * 16 + k)]) * __half2float(b[size_t(k * 16 + c)]);
  auto run = [&](const char* schedule) {
    setenv("MIXTAPE_EMU_SCHEDULE", schedule, 1);
    std::vector<float> stored(256, 0.0f), rows(256, 0.0f), ptx(256, 0.0f);
    launch_named("wmma_kernel", 1, 32, [&](auto&&... x) { wmma_kernel(x...); })(a.data(), b.data(), stored.data(),
                                                                                rows.data(), ptx.data());
    cudaDeviceSynchronize();
    unsetenv("MIXTAPE_EMU_SCHEDULE");
    REQUIRE(cudaGetLastError() == cudaSuccess);
    return std::vector<std::vector<float>>{stored, rows, ptx};
  };
  const auto forward = run("forward");
  const auto reverse = run("reverse");
  CHECK(forward[0] == want);  // store_matrix_sync is right under either layout
  CHECK(reverse[0] == want);
  CHECK(forward[1] != want);  // "lane l holds elements 8l..8l+7" is wrong on the GPU and here
  CHECK(forward[2] == want);  // the PTX mma layout is what the first schedule uses...
  CHECK(reverse[2] != want);  // ...but WMMA does not promise it, and the second schedule differs
}
