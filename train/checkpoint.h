// Resumable runs: what a checkpoint of a training run holds, and the file it lives in.
//
// Note [Resumable runs]
// A checkpoint holds everything the next step depends on, so that k steps, a save, and a resumed
// run to N steps give the same weights, bit for bit, as N uninterrupted steps (on the CPU, where
// every kernel is deterministic):
//   model.*     parameters and buffers (the fp32 masters of the mixed policies, the 16-bit
//               weights of the pure ones, batch-norm statistics)
//   rng.*       the generators the model owns (dropout masks: nn::Module::generator_state)
//   trainer.*   optimizer moments and step counts, pure-16-bit rounding state (Philox position,
//               Kahan buffers), the loss scaler, the gradient-scaling rule's cached scales
//   sched.*     the learning-rate schedule's position
//   progress.*  the step; for data from a DataLoader the epoch and the batch within it (the
//               loader replays the epoch's permutation from there: Note [Epoch permutations] in
//               data/loader.h); the generators of data drawn per step (windows, noise); the
//               running sums of the program's reports
//   run.*       the run's identity: program, model, precision policy, optimizer, batch size,
//               seed and data. A resume refuses a checkpoint whose identity differs, naming
//               each difference.
// A run's length counts from the start of the whole run, and the learning-rate schedule spans
// the planned run (its epochs), not a step limit, so 8 steps, a save, and a resumed run to 16
// train exactly the steps of one 16-step run (train/loop.h).
// Saves are atomic (save_safetensors: temporary file, fsync, rename): a run killed while saving
// keeps the previous checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/trainer.h"
#include "tensor/core/rng.h"
#include "tensor/tensor_dict.h"

namespace mixtape::train {

// The run's identity, as (key, value) pairs stored under "run.".
using RunIdentity = std::vector<std::pair<std::string, std::string>>;

// The precision part of a run's identity: policy, loss scale, update rounding, compute dtype and
// optimizer of `t`, each key behind `prefix` ("G." for a GAN's generator).
void add_precision_identity(RunIdentity& id, const PrecisionTrainer& t, const std::string& prefix = {});

// A model with what trains it, under `prefix`: "model.", "rng.", "trainer." and "sched." (Note
// [Resumable runs]). `sched` may be null.
void add_training_state(TensorDict& ckpt, const std::string& prefix, const nn::Module& model,
                        const PrecisionTrainer& trainer, const LRScheduler* sched);
// The inverse of add_training_state. Each part checks names, shapes and dtypes before it copies.
void load_training_state(const TensorDict& ckpt, const std::string& prefix, nn::Module& model,
                         PrecisionTrainer& trainer, LRScheduler* sched);

// The prefixes add_training_state writes under `prefix` ("model.", "rng.", "trainer.", and
// "sched." when there is a schedule).
std::vector<std::string> training_state_prefixes(const std::string& prefix, bool sched);
// Refuses a checkpoint that holds a tensor no part of the run reads: each tensor's name must
// start with one of `prefixes` or be one of `names`. Each part refuses what it does not expect
// under its own prefix; this is the check above them, so that nothing in a file is dropped
// without a word (a tensor under a misspelled prefix is a file that is not what it seems).
void check_all_read(const TensorDict& ckpt, const std::vector<std::string>& prefixes,
                    const std::vector<std::string>& names, const std::string& path);

// A generator's position as progress metadata "<key>.seed" and "<key>.offset".
void add_generator(TensorDict& ckpt, const std::string& key, const Generator& g);
void load_generator(const TensorDict& ckpt, const std::string& key, Generator& g);

// progress.<key> as an integer or a double (a checkpoint's progress entries).
int64_t progress_int(const TensorDict& ckpt, const std::string& key);
double progress_double(const TensorDict& ckpt, const std::string& key);

// The file a run saves to and resumes from: at its end, every `every` steps (0: only at the
// end), and, with `resume`, the run continues the one saved there when the file exists.
class Checkpointer {
 public:
  Checkpointer() = default;
  Checkpointer(std::string path, int64_t every, bool resume) : path_(std::move(path)), every_(every), resume_(resume) {}

  const std::string& path() const { return path_; }
  // A data-parallel run: only rank 0 saves, and a checkpoint resumes on as many ranks as saved
  // it (metadata run.ranks, absent for one process).
  void set_ranks(int rank, int size) {
    rank_ = rank;
    ranks_ = size;
  }
  // Whether step `step` (counted from the run's start) ends with a save.
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  // Steps from `step` (included) to the first one at which a save is due, or to `last`.
  int64_t steps_until_due(int64_t step, int64_t last) const;
  // Whether this run continues a saved one (resume, and a file at path()).
  bool resuming() const;
  // With resume and a file at path(): its contents, after checking that its identity matches
  // `id`. Otherwise nullopt (a new run starts).
  std::optional<TensorDict> resume_state(const RunIdentity& id) const;
  // Warns (stderr) when the checkpoint's folder has less free space than `ckpt` needs: a run whose
  // only save comes at its end would otherwise find out after all its training. An atomic save
  // writes the new file beside the old one, so the whole size must be free.
  void check_room(const TensorDict& ckpt) const;
  // Adds the identity and saves `ckpt` atomically at path() (rank 0 only).
  void save(TensorDict ckpt, const RunIdentity& id) const;

 private:
  std::string path_;
  int64_t every_ = 0;
  bool resume_ = false;
  int rank_ = 0, ranks_ = 1;
};

}  // namespace mixtape::train
