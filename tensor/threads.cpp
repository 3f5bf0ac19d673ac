#include "tensor/threads.h"

#include <cblas.h>

#include "tensor/core/error.h"

namespace mixtape {

void set_num_threads(int n) {
  MT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  openblas_set_num_threads(n);
}

int num_threads() { return openblas_get_num_threads(); }

}  // namespace mixtape
