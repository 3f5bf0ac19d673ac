// Data-parallel training: every process (rank) holds the whole model, trains on its own shard of
// each global batch, and the gradients are averaged over the ranks before the update, so that the
// parameters stay bit-identical everywhere (docs/data-parallel.md).
//
//   auto dp = std::make_shared<dist::DataParallel>(dist::world());   // one process without mpirun
//   dp->broadcast(model);                    // parameters and buffers from rank 0
//   PrecisionTrainer trainer(model, spec, precision);
//   trainer.set_data_parallel(dp);           // the step all-reduces, every decision agreed
//   for (batch : loader) {
//     Tensor x = dp->shard_rows(batch[0]);    // rows [rank B/N, (rank+1) B/N) of the global batch
//     ... forward, trainer.backward, trainer.step() ...
//   }
//
// What the ranks agree on, and how (Note [Gradient all-reduce] in data_parallel.cpp):
//   initial state   parameters, buffers and seeds broadcast from rank 0;
//   gradients       averaged with the same bits on every rank, at one common scale, pre-divided
//                   so that a 16-bit sum cannot overflow (docs/mixed-precision.md);
//   skip decision   every rank's inf/NaN flag in one all-reduce: one overflow skips everywhere,
//                   and the loss scaler then sees the same gradients on every rank, so its state
//                   evolves identically (backoff, LogMax);
//   gradient scaling  each node's beta agreed before use (this class is the rule's
//                   ScaleAgreement: Note [Scales agreed across processes]);
//   batch norm      statistics per rank, over the rank's shard (as PyTorch's DDP); the running
//                   statistics are rank 0's, broadcast after every step (sync_buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/gradient_scaling.h"
#include "autograd/variable.h"
#include "dist/communicator.h"
#include "nn/module.h"

namespace mixtape::dist {

// What one gradient all-reduce did.
struct GradSync {
  size_t grads = 0;             // gradients reduced
  size_t bytes = 0;             // bytes each rank contributed to the sums
  bool local_overflow = false;  // this rank's gradients held an inf/NaN before the sum
  bool any_overflow = false;    // some rank's did: the step is skipped on every rank
  double seconds = 0.0;         // wall time of the all-reduce (votes, packing, sums, unpacking)
};

class DataParallel final : public ScaleAgreement {
 public:
  explicit DataParallel(std::shared_ptr<Communicator> comm);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool is_root() const { return comm_->rank() == 0; }
  bool distributed() const { return comm_->size() > 1; }
  Communicator& comm() { return *comm_; }
  std::string describe() const { return comm_->describe(); }

  // This rank's rows of a global batch of `global` rows: [rank n, (rank + 1) n), n = global /
  // size(). Throws unless size() divides `global`.
  int64_t shard_size(int64_t global) const;
  Tensor shard_rows(const Tensor& batch) const;

  // Copies rank 0's parameters and buffers into every rank's model (same names, shapes and
  // dtypes everywhere, checked first), and its generators' states.
  void broadcast(nn::Module& model);
  // Rank 0's value on every rank.
  uint64_t broadcast(uint64_t value);
  void broadcast(Tensor& t);  // a CPU tensor, same shape and dtype on every rank (checked)
  // The mean over the ranks of each value (a shard's loss, for logs), the same on every rank.
  void mean_over_ranks(std::span<double> values);
  // Rank 0's buffers (batch-norm running statistics) on every rank.
  void sync_buffers(nn::Module& model);

  // Note [Gradient all-reduce]: replaces each parameter's gradient by the average over the ranks,
  // as a ScaledGrad at a scale every rank shares. Every rank passes the same parameters.
  GradSync all_reduce_gradients(const std::vector<Variable>& params);
  const GradSync& last_sync() const { return last_; }
  double total_sync_seconds() const { return total_seconds_; }

  // Whether every rank holds the same bits in `params` (a hash compared across ranks).
  bool identical(const std::vector<Variable>& params);
  bool identical(const nn::Module& model);

  // ScaleAgreement: the element-wise maximum over the ranks.
  void max_over_processes(std::span<double> votes) override;

 private:
  // Throws, naming `what`, unless every rank passed the same value.
  void check_same(uint64_t fingerprint, const char* what);

  std::shared_ptr<Communicator> comm_;
  GradSync last_;
  double total_seconds_ = 0.0;
  std::vector<char> buffer_;  // the packed gradients, reused
};

}  // namespace mixtape::dist
