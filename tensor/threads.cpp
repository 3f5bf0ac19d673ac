#include "tensor/threads.h"

#include <omp.h>

#include "tensor/core/error.h"

namespace mixtape {

void set_num_threads(int n) {
  MT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  // The GEMMs run on these threads too, in blocks fixed by their shapes (Note [Deterministic GEMM]
  // in tensor/cpu/gemm_blocks.h); OpenBLAS itself stays on one thread.
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace mixtape
