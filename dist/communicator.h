// The processes of a data-parallel run and the collectives between them (docs/data-parallel.md).
//
//   std::shared_ptr<dist::Communicator> world = dist::world();   // MPI under mpirun, else one process
//   world->rank(), world->size();
//   world->broadcast(bytes, n, /*root=*/0);
//   world->all_reduce_sum(buffer, n, DType::f16);                 // the same bits on every rank
//
// Note [Communicator seam]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Everything above this header (dist/data_parallel.h, the trainer, the examples) talks to a
// Communicator: a handful of blocking collectives on host buffers. One implementation carries
// them over MPI (dist/mpi/mpi_communicator.cpp, the only file that includes <mpi.h>), another is
// the single process (every collective is the identity). A NCCL communicator for GPUs would be
// a third implementation of the same class, taking device pointers and a stream; CMake already
// finds NCCL where it is installed (CMakeLists.txt) and nothing else has to change.
//
// Note [Same bits on every rank]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The parameters of the ranks stay bit-identical only if every rank receives bit-identical
// reduced gradients. MPI does not promise that for a floating-point MPI_Allreduce (an
// implementation may add in a different order on different ranks), so all_reduce_sum is a
// reduce-scatter followed by an all-gather: each element is summed once, by the rank that owns
// its block, and the result is copied to everyone. That is also the bandwidth-optimal shape of
// an all-reduce (a ring moves 2 (N-1)/N of the buffer per rank). 16-bit elements are summed in
// fp32 and rounded once per addition (round to nearest even, tensor/core/half.h).
//
// Note [Collectives that cannot hang]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A rank that stops (swapped out, wedged, SIGSTOP) would leave the others waiting in a collective
// forever. So every collective waits at most timeout() seconds (default 1800, the default of
// PyTorch's CPU process groups; the examples' --dist-timeout), then throws an Error that names the
// collective, its number in the run, the training step (set_step) and the ranks that did not
// arrive; the program's error path then ends the job (abort_all). How the MPI communicator waits
// without spinning, and finds the missing ranks, is in dist/mpi/mpi_communicator.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensor/core/dtype.h"

namespace mixtape::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi (Open MPI v4.1.4)", "single process": for logs.
  virtual std::string describe() const = 0;

  // Copies `bytes` bytes at `data` from rank `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Element-wise sum over the ranks of n elements of dtype (f32, f64, f16, bf16) at `data`, in
  // place; every rank receives the same bits (Note [Same bits on every rank]).
  virtual void all_reduce_sum(void* data, size_t n, DType dtype) = 0;
  // Element-wise maximum over the ranks, in place (small control messages: flags, exponents).
  virtual void all_reduce_max(std::span<double> values) = 0;
  virtual void barrier() = 0;

  // Note [Collectives that cannot hang]. Throws unless 0 < seconds <= 10^7.
  void set_timeout(double seconds);
  double timeout() const { return timeout_; }
  // The training step the collectives run for (1 = the first), for the timeout's message; 0
  // before training. The trainer sets it at the start of each step.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  static constexpr double kDefaultTimeout = 1800.0;

 protected:
  double timeout_ = kDefaultTimeout;
  int64_t step_ = 0;
};

// The single process: rank 0 of 1, every collective leaves its buffer as it is.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "single process"; }
  void broadcast(void*, size_t, int) override {}
  void all_reduce_sum(void*, size_t, DType) override {}
  void all_reduce_max(std::span<double>) override {}
  void barrier() override {}
};

// Whether this build carries the MPI communicator (CMake option MIXTAPE_MPI).
bool built_with_mpi();
// Whether this process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
// MPICH's and others' PMI_SIZE).
bool launched_by_mpirun();
// All the processes mpirun started (MPI_COMM_WORLD), initializing MPI on the first call and
// finalizing it when the program exits. Throws "built without MPI" in a build without it.
std::shared_ptr<Communicator> mpi_world();
// mpi_world() when launched by mpirun, the single process otherwise: what the examples use, so
// that `./cnn` and `mpirun -np 2 ./cnn` run the same code. A build without MPI started by
// mpirun with more than one process throws, saying so, rather than training N copies.
std::shared_ptr<Communicator> world();
// For a program's error path: ends every rank of an MPI run at once (MPI_Abort), so that ranks
// waiting in a collective for the one that failed do not wait forever. Returns (doing nothing)
// when MPI is not running. The library itself never calls it.
void abort_all(int code);

}  // namespace mixtape::dist
