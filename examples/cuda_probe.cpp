// cuda_probe: prints the CUDA devices mixtape can use and exits 0, or prints "SKIPPED: no CUDA
// device (...)" and exits 77 when there is none (no GPU visible, or mixtape built without CUDA).
// 77 is the exit code ctest reads as "skipped" (SKIP_RETURN_CODE): the CUDA smoke runs
// (examples/smoke.sh with a cuda device) call it first, so a machine without a GPU reports them
// as skipped, never as passed.
#include <cstdio>

#include "common.h"
#include "mixtape.h"

int main() {
  namespace cuda = mixtape::cuda;
  if (!cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device (%s)\n",
                cuda::built_with_cuda() ? "built with CUDA, no GPU visible" : "built without CUDA");
    return 77;
  }
  try {
    for (int i = 0; i < cuda::device_count(); ++i)
      std::printf("%s\n", examples::device_description(mixtape::Device::cuda(i), 0).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
