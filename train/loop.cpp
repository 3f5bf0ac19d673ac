#include "train/loop.h"

#include <algorithm>
#include <cmath>

#include "autograd/tape.h"
#include "cuda/runtime.h"

namespace mixtape::train {

namespace {

using Clock = std::chrono::steady_clock;

// Waits for the work queued on `d` (a no-op on the CPU), so that a clock read after it measures
// the kernels, not their queueing.
void synchronize(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

}  // namespace

TrainLoop::TrainLoop(LoopOptions options, std::vector<Learner> learners)
    : o_(std::move(options)), learners_(std::move(learners)), progress_(1) {
  MT_CHECK(!learners_.empty(), "TrainLoop: no learner to train");
  for (const Learner& l : learners_) {
    MT_CHECK(l.model && l.trainer, "TrainLoop: a learner without a model or a trainer");
    MT_CHECK(l.loss_column < o_.values, "TrainLoop: loss column ", l.loss_column, " of ", o_.values, " values");
  }
  MT_CHECK(o_.epochs >= 1 && o_.steps_per_epoch >= 1, "TrainLoop: ", o_.epochs, " epochs of ", o_.steps_per_epoch,
           " steps make no run");
  MT_CHECK(o_.log_every >= 1 && o_.values >= 1 && o_.max_steps >= 0, "TrainLoop: log_every ", o_.log_every, ", values ",
           o_.values, " and max_steps ", o_.max_steps, " must be positive");
  const int64_t planned = o_.steps_per_epoch * o_.epochs;
  total_ = o_.max_steps > 0 ? std::min(o_.max_steps, planned) : planned;
  progress_ = Progress(epochs_in_run());
  progress_.quiet = !o_.progress || (o_.dp && !o_.dp->is_root());
  for (const Learner& l : learners_) skipped_seen_.push_back(l.trainer->skipped());
}

void TrainLoop::add_loader(data::DataLoader& loader) {
  MT_CHECK(loader.batches_per_epoch() == o_.steps_per_epoch, "TrainLoop: the loader makes ", loader.batches_per_epoch(),
           " batches an epoch, the loop takes ", o_.steps_per_epoch);
  loader_ = &loader;
}

void TrainLoop::add_draws(const std::string& name, Generator& gen, StagedDraws::Draw draw) {
  draws_.push_back({name, &gen, std::move(draw)});
}

int TrainLoop::epochs_in_run() const { return int((total_ + o_.steps_per_epoch - 1) / o_.steps_per_epoch); }

// ---- checkpoints -------------------------------------------------------------------------------

TensorDict TrainLoop::checkpoint(bool epoch_done) const {
  TensorDict ckpt;
  for (const Learner& l : learners_) add_training_state(ckpt, l.checkpoint_prefix, *l.model, *l.trainer, l.sched);
  ckpt.set_meta("progress.step", std::to_string(step_));
  if (loader_) {  // the next batch: Note [Epoch permutations] in data/loader.h
    ckpt.set_meta("progress.epoch", std::to_string(step_ / o_.steps_per_epoch + 1));
    ckpt.set_meta("progress.batch", std::to_string(step_ % o_.steps_per_epoch));
  }
  for (const Draws& d : draws_) add_generator(ckpt, "progress." + d.name, *d.gen);
  if (save_state) save_state(ckpt, epoch_done);
  return ckpt;
}

void TrainLoop::save(bool epoch_done) const {
  if (checkpointer_) checkpointer_->save(checkpoint(epoch_done), identity_);
}

std::string TrainLoop::position() const {
  return detail::cat("step ", step_, " (epoch ", step_ / o_.steps_per_epoch + 1, ", batch ", step_ % o_.steps_per_epoch,
                     ")");
}

bool TrainLoop::resume(const Checkpointer* checkpoint, const RunIdentity& identity) {
  checkpointer_ = checkpoint;
  identity_ = identity;
  if (!checkpoint) return false;
  const std::optional<TensorDict> saved = checkpoint->resume_state(identity);
  if (saved) {
    std::vector<std::string> prefixes, names;
    for (const Learner& l : learners_)
      for (std::string& p : training_state_prefixes(l.checkpoint_prefix, l.sched != nullptr))
        prefixes.push_back(std::move(p));
    if (save_state) {  // the program's own tensors (char_lstm's vocabulary)
      TensorDict own;
      save_state(own, false);
      names = own.names();
    }
    check_all_read(*saved, prefixes, names, checkpoint->path());
    for (const Learner& l : learners_) load_training_state(*saved, l.checkpoint_prefix, *l.model, *l.trainer, l.sched);
    const int64_t step = progress_int(*saved, "step");
    MT_CHECK(step >= 0, "--resume: the checkpoint's step ", step, " is negative");
    if (loader_) {
      const int64_t epoch = progress_int(*saved, "epoch"), batch = progress_int(*saved, "batch");
      MT_CHECK(epoch == step / o_.steps_per_epoch + 1 && batch == step % o_.steps_per_epoch,
               "--resume: ", "the checkpoint's position (step ", step, ", epoch ", epoch, ", batch ", batch,
               ") does not fit this run's ", o_.steps_per_epoch, " batches per epoch");
    }
    for (const Draws& d : draws_) load_generator(*saved, "progress." + d.name, *d.gen);
    if (load_state) load_state(*saved);
    step_ = counted_ = step;
    for (size_t i = 0; i < learners_.size(); ++i) skipped_seen_[i] = learners_[i].trainer->skipped();
  }
  checkpoint->check_room(this->checkpoint(false));
  return saved.has_value();
}

// ---- the loop ----------------------------------------------------------------------------------

void TrainLoop::run(Metrics& metrics) {
  MT_CHECK(bool(objective) != bool(step), "TrainLoop: give either an objective or a step");
  MT_CHECK(!objective || learners_.size() == 1, "TrainLoop: an objective trains one learner, not ", learners_.size());
  MT_CHECK(loader_ || !draws_.empty(), "TrainLoop: no data (add_loader, add_draws)");
  log_ = std::make_unique<LossLog>(o_.log_every, learners_[0].trainer->device(), o_.values);
  if (step_ >= total_) {  // a finished run, resumed: report its last epoch again
    if (epoch_end)
      epoch_end(int((std::max<int64_t>(step_, 1) - 1) / o_.steps_per_epoch + 1), step_ % o_.steps_per_epoch == 0);
  }
  while (step_ < total_) {
    const int epoch = int(step_ / o_.steps_per_epoch + 1);
    train_epoch(epoch, metrics);
    const bool complete = step_ % o_.steps_per_epoch == 0;
    if (epoch_end) epoch_end(epoch, complete);
    if (o_.save_every_epoch && step_ < total_) save(complete);
  }
  save(step_ % o_.steps_per_epoch == 0);
}

void TrainLoop::train_epoch(int epoch, Metrics& metrics) {
  const Device device = learners_[0].trainer->device();
  const int64_t first = int64_t(epoch - 1) * o_.steps_per_epoch;  // steps before this epoch
  const int64_t end = std::min(first + o_.steps_per_epoch, total_);
  std::optional<EpochBatches> batches;  // Note [Batches staged on the device]
  if (loader_) batches.emplace(*loader_, epoch, step_ - first, device);
  std::vector<StagedDraws> draws;  // Note [Draws staged on the device]
  for (const Draws& d : draws_) draws.emplace_back(device, d.draw);
  if (epoch_start) epoch_start(epoch);
  progress_.start_epoch(step_ - first);
  const auto t_epoch = Clock::now();
  const auto progress = [&](bool force) {
    if (progress_loss) progress_.update(epoch, step_ - first, end - first, progress_loss(), force);
  };
  while (step_ < end) {
    const int64_t next = step_ + 1;
    StepInfo info{.step = next,
                  .epoch = epoch,
                  .batch = next - first,
                  .logs = next % o_.log_every == 0 || (o_.log_last_step && next == total_),
                  .reads = false,
                  .lr = learners_[0].trainer->optimizer().lr()};
    info.reads = info.logs || next == end;
    Batch batch;
    if (batches) {
      std::optional<data::Batch> b = batches->next();
      MT_CHECK(b.has_value(), "TrainLoop: the loader ran out of batches at batch ", info.batch, " of epoch ", epoch);
      batch = std::move(b->tensors);
    }
    const int64_t ahead = checkpointer_ ? checkpointer_->steps_until_due(next, end) : end - next + 1;
    for (StagedDraws& d : draws)
      for (Tensor& t : d.next(ahead)) batch.push_back(std::move(t));
    if (o_.dp && o_.dp->distributed())
      for (Tensor& t : batch) t = o_.dp->shard_rows(t);  // this rank's rows of the global batch
    counters_.begin_step();
    const std::vector<Tensor> values = train_step(batch, info);
    for (const Learner& l : learners_) metrics.write_telemetry(*l.trainer, l.telemetry_prefix);
    step_ = next;
    if (after_step) after_step(info);
    if (log_->add(values) || info.reads) count();  // the one read of a step that reads
    if (info.logs && step_event)
      if (std::optional<nlohmann::json> event = step_event(info)) metrics.write(*event);
    bool sampled = false;
    for (const Learner& l : learners_) sampled = sampled || l.trainer->sampled();
    counters_.end_step(info.reads || sampled);
    if (info.reads) progress(false);
    if (checkpointer_ && checkpointer_->due(step_) && step_ < total_) {
      count();
      save(step_ % o_.steps_per_epoch == 0);
    }
  }
  count();
  progress(true);
  epoch_secs_ = seconds_since(t_epoch);
  train_secs_ += epoch_secs_;
}

std::vector<Tensor> TrainLoop::train_step(const Batch& batch, const StepInfo& info) {
  if (step) {  // the program's whole step; then each learner's schedule
    std::vector<Tensor> values = step(batch, info);
    for (const Learner& l : learners_)
      if (l.sched) l.sched->step();
    return values;
  }
  PrecisionTrainer& trainer = *learners_[0].trainer;
  const bool timed = info.reads || !trainer.device().is_cuda();
  auto t = Clock::now();
  const auto lap = [&](double& slot) {
    if (!timed) return;
    synchronize(trainer.device());
    const auto now = Clock::now();
    slot += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  Tape tape;
  trainer.begin_step(tape);
  Objective o = objective(batch, info);
  lap(times_.forward);
  trainer.backward(tape, o.loss);
  lap(times_.backward);
  trainer.step();  // decided where the gradients are; read only when a step reads
  if (learners_[0].sched) learners_[0].sched->step();
  lap(times_.update);
  times_.steps += timed;
  if (o.values.empty()) return {o.loss.data()};
  return std::move(o.values);
}

void TrainLoop::count() {
  std::vector<double> v = log_->take();
  if (v.empty()) return;
  if (o_.dp && o_.dp->distributed()) o_.dp->mean_over_ranks(v);  // the global batch's, the same on every rank
  const auto w = size_t(o_.values);
  // A step a loss scaler skipped (inf/NaN gradients, as fp16 gives while a dynamic scale finds
  // its level) changed nothing; more non-finite losses than skipped steps mean a step with a
  // non-finite loss was applied (no loss scale to skip it): training diverged. (A non-finite loss
  // has non-finite gradients, which every skipping scaler skips.)
  for (size_t i = 0; i < learners_.size(); ++i) {
    const Learner& l = learners_[i];
    const int64_t skipped = l.trainer->skipped() - skipped_seen_[i];
    skipped_seen_[i] = l.trainer->skipped();
    if (l.loss_column < 0) continue;
    int64_t nonfinite = 0;
    for (size_t r = 0; r * w < v.size(); ++r) {
      const double loss = v[r * w + size_t(l.loss_column)];
      MT_CHECK(std::isfinite(loss) || ++nonfinite <= skipped, "the training loss",
               l.telemetry_prefix.empty() ? "" : " of " + l.telemetry_prefix.substr(0, l.telemetry_prefix.size() - 1),
               " became ", loss, " at step ", counted_ + int64_t(r) + 1, " under ", l.trainer->describe(),
               " (try a smaller --lr", diverged_hint(*l.trainer));
    }
  }
  for (size_t r = 0; r * w < v.size(); ++r)
    if (tally) tally(&v[r * w], counted_ + int64_t(r) + 1);
  counted_ += int64_t(v.size() / w);
}

}  // namespace mixtape::train
