#include "dist/communicator.h"

#include <cstdlib>
#include <string>

#include "tensor/core/error.h"

namespace mixtape::dist {

namespace {

// The number of processes the launcher says it started (1 when none says so).
int launched_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1) return int(n);
    }
  return 1;
}

}  // namespace

void Communicator::set_timeout(double seconds) {
  MT_CHECK(seconds > 0.0 && seconds <= 1e7, "Communicator::set_timeout: ", seconds,
           " seconds (a collective's timeout is more than 0 and at most 10^7 seconds)");
  timeout_ = seconds;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

std::shared_ptr<Communicator> world() {
  if (launched_by_mpirun() && built_with_mpi()) return mpi_world();
  const int n = launched_size();
  MT_CHECK(n == 1, "dist::world: started by mpirun with ", n,
           " processes, but this build of mixtape has no MPI (configure with libopenmpi-dev installed, "
           "scripts/install_deps.sh; CMake option MIXTAPE_MPI); each process would train alone");
  return std::make_shared<SingleProcess>();
}

}  // namespace mixtape::dist
