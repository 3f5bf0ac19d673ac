// --checkpoint, --checkpoint-every and --resume: the flags of a resumable run (what a checkpoint
// holds and how a run resumes: Note [Resumable runs] in train/checkpoint.h).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <utility>

#include "common.h"
#include "mixtape.h"

namespace examples {

class CheckpointFlags {
 public:
  // `file_name` is the default checkpoint's name in --out-dir ("cnn.safetensors").
  explicit CheckpointFlags(std::string file_name) : file_name_(std::move(file_name)) {}

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

  // After parsing: the checkpoint, at the default path in `out_dir` when --checkpoint was not
  // given, saved by rank 0 of `ranks`. Checks that its folder can be written before any step is
  // trained.
  mixtape::train::Checkpointer finish(const std::string& out_dir, int rank, int ranks) const {
    const std::string path = path_.empty() ? (std::filesystem::path(out_dir) / file_name_).string() : path_;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    check_output_dir(parent.empty() ? std::string(".") : parent.string(), "--checkpoint");
    mixtape::train::Checkpointer c(path, every_, resume_);
    c.set_ranks(rank, ranks);
    return c;
  }

 private:
  std::string file_name_;
  std::string path_;
  int64_t every_ = 0;
  bool resume_ = false;
};

}  // namespace examples
