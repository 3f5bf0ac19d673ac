// Threads used by the CPU backend. The GEMMs run on OpenBLAS's thread pool; mixtape's own CPU
// kernels are single-threaded, so results never depend on the thread count.
#pragma once

namespace mixtape {

void set_num_threads(int n);  // n >= 1; throws otherwise
int num_threads();

}  // namespace mixtape
