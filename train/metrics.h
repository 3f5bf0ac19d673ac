// What a training run reports: a JSON Lines metrics file (docs/design.md section 6), the
// precision part of its summary, the device work of its steps, and a progress line.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "cuda/runtime.h"
#include "optim/trainer.h"

namespace mixtape::train {

// One JSON object per line, flushed per event so a crash loses nothing already written. An empty
// path writes nothing.
class Metrics {
 public:
  // `append`: a resumed run adds its events after those of the run it continues.
  explicit Metrics(const std::string& path = {}, bool append = false);
  void write(const nlohmann::json& event);
  // The step's telemetry lines (PrecisionTrainer::write_telemetry), flushed together.
  void write_telemetry(const PrecisionTrainer& t, const std::string& prefix = {});

 private:
  std::string path_;
  std::ofstream out_;
};

// The precision part of a "summary" event: policy, skipped steps, the final loss scale, the 8-bit
// operands' saturation, and the underflow the rounding census measured (sampled steps only).
void add_precision_summary(nlohmann::json& j, const PrecisionTrainer& t, const std::string& prefix = {});
// The same as one closing line.
std::string precision_summary(const PrecisionTrainer& t);
// The end of a "training diverged" message (after "(try a smaller --lr"): a 16-bit run without a
// loss scale is pointed to a dynamic one.
const char* diverged_hint(const PrecisionTrainer& t);

// What the training steps cost the host on the device (Note [Runtime counters] in
// cuda/runtime.h), for the summary event: kernel launches per step, host synchronizations per
// step that does not log and per step that does (a step event or telemetry reads numbers back),
// and device allocations; each over the steps after the first (the first allocates what the later
// ones reuse). On the CPU every count is 0.
class StepCounters {
 public:
  void begin_step() { at_ = cuda::runtime_counters(); }
  void end_step(bool logged);
  void add_to(nlohmann::json& summary) const;

 private:
  cuda::RuntimeCounters at_;
  uint64_t steps_ = 0, quiet_steps_ = 0, logging_steps_ = 0;
  uint64_t launches_ = 0, syncs_ = 0, logging_syncs_ = 0, allocs_ = 0;
};

// "epoch 2/10 [ 312/ 938] loss 0.4123  41.2 steps/s  ETA 15s" on stderr: redrawn in place twice
// a second on a terminal, one line every 15 s when stderr is a file or a pipe.
class Progress {
 public:
  explicit Progress(int epochs) : epochs_(epochs) {}
  // `first`: the batches of the epoch trained before (a run resumed inside it).
  void start_epoch(int64_t first = 0) {
    t0_ = std::chrono::steady_clock::now();
    first_ = first;
  }
  // `step`: the batch within the epoch, counted from 1; `steps`: the epoch's batches in this run
  // (the last epoch may stop early).
  void update(int epoch, int64_t step, int64_t steps, double loss, bool force = false);

  bool quiet = false;  // a data-parallel rank other than 0

 private:
  int epochs_;
  int64_t first_ = 0;
  bool tty_ = isatty(fileno(stderr)) != 0;
  std::chrono::steady_clock::time_point t0_{}, last_{};
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mixtape::train
