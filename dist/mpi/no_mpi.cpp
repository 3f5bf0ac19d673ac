// The build without MPI (CMake option MIXTAPE_MPI off, or libopenmpi-dev not installed): the same
// API, and a clear error when more than one process is asked for.
#include "dist/communicator.h"
#include "tensor/core/error.h"

namespace mixtape::dist {

bool built_with_mpi() { return false; }

std::shared_ptr<Communicator> mpi_world() {
  throw Error(
      "dist::mpi_world: mixtape was built without MPI; install libopenmpi-dev (scripts/install_deps.sh) and "
      "configure again (CMake option MIXTAPE_MPI) to train across processes");
}

void abort_all(int) {}

}  // namespace mixtape::dist
