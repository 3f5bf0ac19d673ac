// Threads used by the CPU backend: one OpenMP pool runs mixtape's own kernels
// (tensor/cpu/parallel.h), the GEMMs among them, and, with the OpenMP build of OpenBLAS, its f64
// GEMMs too (Note [One thread pool] in CMakeLists.txt). Results never depend on the thread count
// (Note [Deterministic threads] in tensor/cpu/parallel.h).
#pragma once

namespace mixtape {

void set_num_threads(int n);  // n >= 1; throws otherwise
int num_threads();

}  // namespace mixtape
