// Resumable runs: --checkpoint, --checkpoint-every and --resume, shared by the example programs.
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
//   progress.*  the step, the epoch and the batch within it (the loader replays the epoch's
//               permutation from there: Note [Epoch permutations] in data/loader.h), the program's
//               own generators (data windows, noise), the running sums of the epoch's report
//   run.*       the run's identity: program, model, precision policy, optimizer, batch size,
//               seed and data. --resume refuses a checkpoint whose identity differs, naming
//               each difference.
// --max-steps and --epochs count from the start of the whole run, and the learning-rate schedule
// spans the planned run (--epochs), not --max-steps, so `--max-steps 8` followed by
// `--max-steps 16 --resume` trains exactly the steps of one `--max-steps 16` run.
// Saves are atomic (save_safetensors: temporary file, fsync, rename): a run killed while saving
// keeps the previous checkpoint.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "mixtape.h"
#include "tensor/state_io.h"

namespace examples {

// The run's identity, as (key, value) pairs stored under "run.".
using RunIdentity = std::vector<std::pair<std::string, std::string>>;

// The precision part of a run's identity: policy, loss scale, update rounding, compute dtype and
// optimizer of `t`, each key behind `prefix` ("G." for a GAN's generator).
inline void add_precision_identity(RunIdentity& id, const mixtape::PrecisionTrainer& t,
                                   const std::string& prefix = {}) {
  using namespace mixtape;
  id.emplace_back(prefix + "precision", nn::precision_name(t.precision()));
  id.emplace_back(prefix + "loss_scale", t.options().loss_scale.str());
  if (nn::is_pure(t.precision()))
    id.emplace_back(prefix + "update_rounding", update_rounding_name(t.options().rounding));
  id.emplace_back(prefix + "compute_dtype", dtype_name(t.compute_dtype()));
  id.emplace_back(prefix + "optimizer", t.optimizer().name());
  if (t.options().loss_scale.kind == LossScaleSpec::Kind::gradient)
    id.emplace_back(prefix + "grad_scale_period", std::to_string(t.options().gradient_scaling.update_period));
}

// A model with what trains it, under `prefix`: "model.", "rng.", "trainer." and "sched." (Note
// [Resumable runs]). `sched` may be null.
inline void add_training_state(mixtape::TensorDict& ckpt, const std::string& prefix, const mixtape::nn::Module& model,
                               const mixtape::PrecisionTrainer& trainer, const mixtape::LRScheduler* sched) {
  ckpt.merge(prefix + "model.", model.state_dict());
  ckpt.merge(prefix + "rng.", model.generator_state());
  ckpt.merge(prefix + "trainer.", trainer.state_dict());
  if (sched) ckpt.merge(prefix + "sched.", sched->state_dict());
}

// The inverse of add_training_state. Each part checks names, shapes and dtypes before it copies.
inline void load_training_state(const mixtape::TensorDict& ckpt, const std::string& prefix, mixtape::nn::Module& model,
                                mixtape::PrecisionTrainer& trainer, mixtape::LRScheduler* sched) {
  try {
    model.load_state_dict(ckpt.sub(prefix + "model."));
    model.load_generator_state(ckpt.sub(prefix + "rng."));
    trainer.load_state_dict(ckpt.sub(prefix + "trainer."));
    if (sched) sched->load_state_dict(ckpt.sub(prefix + "sched."));
  } catch (const mixtape::Error& e) {
    if (prefix.empty()) throw;
    // which of the checkpoint's networks (dcgan: "generator.", "discriminator.") the entry belongs to
    throw mixtape::Error(mixtape::detail::cat("checkpoint entries '", prefix, "*': ", e.what()));
  }
}

// A generator's position as progress metadata "<key>.seed" and "<key>.offset".
inline void add_generator(mixtape::TensorDict& ckpt, const std::string& key, const mixtape::Generator& g) {
  ckpt.set_meta(key + ".seed", std::to_string(g.seed()));
  ckpt.set_meta(key + ".offset", std::to_string(g.offset()));
}
inline void load_generator(const mixtape::TensorDict& ckpt, const std::string& key, mixtape::Generator& g) {
  g.set_state(mixtape::state_io::get_uint(ckpt, key + ".seed", "checkpoint"),
              mixtape::state_io::get_uint(ckpt, key + ".offset", "checkpoint"));
}

// --checkpoint PATH, --checkpoint-every N, --resume.
class Checkpointer {
 public:
  // `file_name` is the default checkpoint's name in --out-dir ("cnn.safetensors").
  explicit Checkpointer(std::string file_name) : file_name_(std::move(file_name)) {}
  // A checkpoint at `path` without flags (precision_lab's runs: one file per run).
  static Checkpointer at(std::string path, int64_t every, bool resume) {
    Checkpointer c(std::filesystem::path(path).filename().string());
    c.path_ = std::move(path);
    c.every_ = every;
    c.resume_ = resume;
    return c;
  }

  void add_to(CLI::App& app) {
    app.add_option("--checkpoint", path_,
                   "save the whole training state here at the end and every --checkpoint-every steps "
                   "(default: " +
                       file_name_ + " in --out-dir)");
    app.add_option("--checkpoint-every", every_, "also save every N steps (0: only at the end)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40))
        ->capture_default_str();
    app.add_flag("--resume", resume_,
                 "continue the run saved at --checkpoint when that file exists (the same program, model, "
                 "precision policy, batch size and seed; --max-steps and --epochs count from the run's start)");
  }

  // After parsing: the default path in `out_dir` when --checkpoint was not given. Checks that the
  // checkpoint's folder can be written before any step is trained.
  void finish(const std::string& out_dir) {
    if (path_.empty()) path_ = (std::filesystem::path(out_dir) / file_name_).string();
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    check_output_dir(parent.empty() ? std::string(".") : parent.string(), "--checkpoint");
  }

  const std::string& path() const { return path_; }
  // A data-parallel run (Note [Data-parallel examples]): only rank 0 saves, and a checkpoint
  // resumes on as many ranks as saved it (metadata run.ranks, absent for one process).
  void set_ranks(int rank, int size) {
    rank_ = rank;
    ranks_ = size;
  }
  // Whether step `step` (counted from the run's start) ends with a save.
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  // Steps from `step` (included) to the first one at which a save is due, or to `last`.
  int64_t steps_until_due(int64_t step, int64_t last) const {
    const int64_t due_step = every_ > 0 ? (step + every_ - 1) / every_ * every_ : last;
    return std::min(due_step, last) - step + 1;
  }

  // Whether this run continues a saved one (--resume and a file at path()).
  bool resuming() const {
    std::error_code ec;
    return resume_ && std::filesystem::exists(path_, ec);
  }

  // With --resume and a file at path(): its contents, after checking that its identity matches
  // `id`. Without --resume, or when there is no file yet: nullopt (a new run starts).
  std::optional<mixtape::TensorDict> resume_state(const RunIdentity& id) const {
    if (!resume_) return std::nullopt;
    if (!resuming()) {
      std::printf("resume: no checkpoint at %s yet; starting a new run\n", path_.c_str());
      return std::nullopt;
    }
    mixtape::TensorDict ckpt = mixtape::load_safetensors(path_);  // checks its checksums (Note [Checksums])
    if (!ckpt.verified)
      std::printf(
          "resume: %s carries no checksums (written by another program, or by mixtape before it wrote "
          "them): its contents could not be verified\n",
          path_.c_str());
    std::string differences;
    const std::string saved_ranks = ckpt.has_meta("run.ranks") ? ckpt.meta("run.ranks") : std::string("1");
    if (saved_ranks != std::to_string(ranks_))
      differences +=
          "\n  ranks: the checkpoint was saved by " + saved_ranks + ", this run has " + std::to_string(ranks_);
    for (const auto& [key, value] : id) {
      const std::string saved = ckpt.has_meta("run." + key) ? ckpt.meta("run." + key) : std::string("(none)");
      if (saved != value)
        differences += "\n  " + key + ": the checkpoint has '" + saved + "', this run '" + value + "'";
    }
    MT_CHECK(differences.empty(), "--resume: ", path_, " belongs to another run:", differences,
             "\n(give another --checkpoint to start a new run, or the flags the checkpoint was trained with)");
    return ckpt;
  }

  // Warns (stderr) when the checkpoint's folder has less free space than `ckpt` needs: a run whose
  // only save comes at its end would otherwise find out after all its training. An atomic save
  // writes the new file beside the old one, so the whole size must be free. The write-probe of
  // finish() already checked that the folder can be written at all.
  void check_room(const mixtape::TensorDict& ckpt) const {
    if (rank_ != 0) return;
    uint64_t bytes = uint64_t(1) << 16;  // the header and the metadata, generously
    for (const auto& [name, t] : ckpt) bytes += uint64_t(t.numel()) * mixtape::dtype_size(t.dtype());
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    std::error_code ec;
    const std::filesystem::space_info room = std::filesystem::space(parent.empty() ? "." : parent, ec);
    if (ec || room.available >= bytes) return;
    std::fprintf(stderr,
                 "warning: --checkpoint %s: its folder has %llu bytes free, and a checkpoint of this run takes "
                 "about %llu: the saves will fail unless space is freed\n",
                 path_.c_str(), (unsigned long long)room.available, (unsigned long long)bytes);
  }

  // Adds the identity and saves `ckpt` atomically at path().
  void save(mixtape::TensorDict ckpt, const RunIdentity& id) const {
    if (rank_ != 0) return;
    for (const auto& [key, value] : id) ckpt.set_meta("run." + key, value);
    if (ranks_ > 1) ckpt.set_meta("run.ranks", std::to_string(ranks_));
    mixtape::save_safetensors(path_, ckpt);
  }

 private:
  std::string file_name_;
  std::string path_;
  int64_t every_ = 0;
  bool resume_ = false;
  int rank_ = 0, ranks_ = 1;
};

// progress.<key> as an integer (a checkpoint's progress entries; Note [Resumable runs]).
inline int64_t progress_int(const mixtape::TensorDict& ckpt, const std::string& key) {
  return mixtape::state_io::get_int(ckpt, "progress." + key, "checkpoint");
}
inline double progress_double(const mixtape::TensorDict& ckpt, const std::string& key) {
  return mixtape::state_io::get_double(ckpt, "progress." + key, "checkpoint");
}

}  // namespace examples
