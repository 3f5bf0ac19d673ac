// The CUDA emulator itself (Note [CUDA emulation] in emu.h): barriers, shuffles, shared memory,
// the schedule, and the faults a GPU would show (a deadlocked barrier, a bad configuration).
// Built only in the emulated build; the kernels here are written as the rewritten .cu files are.
#include "tests/cuda/emu/emu.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

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
  unsetenv("MIXTAPE_EMU_SCHEDULE");
  REQUIRE(cudaGetLastError() == cudaSuccess);
  return out;
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
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int v : out) CHECK(v == 32 * 33 / 2);
}

TEST_CASE("emulator: barriers that can never all be reached fail the launch", "[cuda][emulator]") {
  std::vector<int> out(32, 0);
  ::mt_emu::launch(::mt_emu::Config(1, 32), [&](auto&&... a) { divergent_barrier_kernel(a...); })(out.data());
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
