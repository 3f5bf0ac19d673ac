// TrainLoop: the training loop every example runs, over one or more models with their
// PrecisionTrainers, batches from a DataLoader and / or drawn per step, and hooks for what a
// program reports.
//
// Note [The training loop]
// A run is `epochs` epochs of `steps_per_epoch` steps, cut short at `max_steps` (counted from the
// run's start); the learning-rate schedules span the planned run, so a step limit only stops it
// (Note [Resumable runs] in train/checkpoint.h). Each step:
//   1. takes its batch: the next batch of the epoch (EpochBatches) and the step's draws
//      (StagedDraws), each field cut to this rank's rows under data parallelism;
//   2. trains: with `objective`, records the forward pass on a tape, runs backward from the
//      objective and lets the trainer step (timing the three parts); with `step`, the program
//      does all of it (several models, as a GAN); then each learner's schedule steps;
//   3. writes each learner's telemetry, calls `after_step`;
//   4. keeps the step's values (its losses) on the device (LossLog) until a step reads them: a
//      logging step, the epoch's last step of this run, a full log, or a save. Reading takes the
//      means over the ranks, checks each learner's loss column for divergence (a non-finite loss
//      with no skipped step to account for it), and hands each step's values to `tally`;
//   5. writes the `step_event` on logging steps (every `log_every` steps), updates the progress
//      line, and saves a checkpoint every `every` steps of the Checkpointer.
// After each epoch of the run, `epoch_end` reports (an evaluation, a sample), and with
// `save_every_epoch` a checkpoint is saved; at the end of the run the last one is.
// A run resumed from a checkpoint at or past its end trains nothing and reports its last epoch
// again. Nothing here reads the device except when a step reads (Note [Scaled step] in
// optim/scaled_step.h), so a step that does not log makes no host synchronization.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "data/loader.h"
#include "dist/data_parallel.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/trainer.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/staging.h"

namespace mixtape::train {

// A model with what trains it.
struct Learner {
  nn::Module* model = nullptr;
  PrecisionTrainer* trainer = nullptr;
  LRScheduler* sched = nullptr;   // stepped after every step; may be null
  std::string checkpoint_prefix;  // its entries' prefix in the checkpoint ("", "generator.")
  std::string telemetry_prefix;   // its telemetry lines' prefix ("", "G.")
  int loss_column = -1;           // the step value that is its loss, checked for divergence (-1: none)
};

struct LoopOptions {
  int epochs = 1;
  int64_t steps_per_epoch = 0;
  int64_t max_steps = 0;  // 0: every epoch
  int64_t log_every = 50;
  bool log_last_step = false;              // the run's last step logs too
  int64_t values = 1;                      // one-element values each step returns (its losses)
  bool save_every_epoch = false;           // a checkpoint after every epoch, not only at the end
  bool progress = true;                    // the progress line on stderr (rank 0 only)
  std::shared_ptr<dist::DataParallel> dp;  // null: one process
};

// The step in progress, as the hooks see it.
struct StepInfo {
  int64_t step = 0;    // counted from 1 and from the run's start
  int epoch = 1;       // counted from 1
  int64_t batch = 0;   // within the epoch, counted from 1
  bool logs = false;   // a step event is due
  bool reads = false;  // the values are read back at this step
  double lr = 0.0;     // the first learner's learning rate for this step's update
};

// What backward runs from, and the values the step reports (empty: the objective itself).
struct Objective {
  Variable loss;
  std::vector<Tensor> values;
};

// Seconds in each part of the timed steps (the `objective` form). GPU kernels run
// asynchronously, so each part ends with a synchronize: on a GPU only the steps that read are
// timed (they synchronize anyway), on the CPU every step.
struct StepTimes {
  double forward = 0.0, backward = 0.0, update = 0.0;
  int64_t steps = 0;
};

class TrainLoop {
 public:
  using Batch = std::vector<Tensor>;  // the fields of every data source, in the order added

  TrainLoop(LoopOptions options, std::vector<Learner> learners);

  // ---- the data ----
  // An epoch's batches of `loader` (which must make steps_per_epoch of them); its position is
  // saved as progress.epoch and progress.batch.
  void add_loader(data::DataLoader& loader);
  // Fields drawn on the host for each step from `gen` (saved as progress.<name>.seed/.offset).
  void add_draws(const std::string& name, Generator& gen, StagedDraws::Draw draw);

  // ---- one step: either form ----
  // One learner: the objective of a batch (the loop records it, runs backward and steps).
  std::function<Objective(const Batch&, const StepInfo&)> objective;
  // Any number of learners: the whole step, updates included; returns the step's values.
  std::function<std::vector<Tensor>(const Batch&, const StepInfo&)> step;

  // ---- what the program reports and keeps (each optional) ----
  std::function<void(const double* values, int64_t step)> tally;             // each step's values, once read
  std::function<std::optional<nlohmann::json>(const StepInfo&)> step_event;  // on logging steps
  std::function<void(const StepInfo&)> after_step;
  std::function<void(int epoch)> epoch_start;
  std::function<void(int epoch, bool complete)> epoch_end;  // after the epoch's run of steps
  std::function<double()> progress_loss;                    // the progress line's loss
  // The program's own checkpoint entries ("progress.*" sums, data such as a vocabulary), and their
  // inverse; `epoch_done`: the next step starts an epoch (the epoch's sums are not carried over).
  std::function<void(TensorDict&, bool epoch_done)> save_state;
  std::function<void(const TensorDict&)> load_state;

  // Continues the run saved at `checkpoint` when it resumes one (returns whether it did), then
  // warns when its folder is short of room; null: no checkpoints.
  bool resume(const Checkpointer* checkpoint, const RunIdentity& identity);
  // Trains from where the run stands to its end, with events to `metrics`; saves the checkpoint
  // every `every` steps, after each epoch with save_every_epoch, and at the end.
  void run(Metrics& metrics);

  // The whole training state (Note [Resumable runs]).
  TensorDict checkpoint(bool epoch_done) const;

  int64_t steps() const { return step_; }               // trained so far, from the run's start
  std::string position() const;                         // "step 7 (epoch 1, batch 7)": where the next step starts
  int64_t total_steps() const { return total_; }        // where the run ends
  int epochs_in_run() const;                            // the epochs total_steps() touches
  double train_seconds() const { return train_secs_; }  // this process's training steps
  double epoch_seconds() const { return epoch_secs_; }  // the last epoch's
  const StepTimes& times() const { return times_; }
  const StepCounters& counters() const { return counters_; }

 private:
  struct Draws {
    std::string name;
    Generator* gen;
    StagedDraws::Draw draw;
  };

  void train_epoch(int epoch, Metrics& metrics);
  std::vector<Tensor> train_step(const Batch& batch, const StepInfo& info);
  void count();  // reads the pending values (Note [The training loop], 4)
  void save(bool epoch_done) const;

  LoopOptions o_;
  std::vector<Learner> learners_;
  data::DataLoader* loader_ = nullptr;
  std::vector<Draws> draws_;
  const Checkpointer* checkpointer_ = nullptr;
  RunIdentity identity_;
  int64_t step_ = 0, total_ = 0;
  int64_t counted_ = 0;                // the last step whose values were read
  std::vector<int64_t> skipped_seen_;  // each learner's skipped steps when they were
  std::unique_ptr<LossLog> log_;
  Progress progress_;
  StepTimes times_;
  StepCounters counters_;
  double train_secs_ = 0.0, epoch_secs_ = 0.0;
};

}  // namespace mixtape::train
