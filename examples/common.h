// Shared pieces of the example programs: the flags every program has, a JSON Lines metrics
// file (DESIGN.md section 6), and a progress line with rate and ETA.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "mixtape.h"

namespace examples {

struct CommonFlags {
  int epochs = 1;
  int batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 0;
  int threads = 2;
  std::string metrics;      // JSON Lines file; empty = none
  int max_steps = 0;        // stop after this many training steps (0 = no limit), for smoke runs

  void add_to(CLI::App& app) {
    // Every program calls this first: make stdout line-buffered so results reach log files as
    // they happen, not when the program ends.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    app.add_option("--epochs", epochs, "training epochs")->check(CLI::Range(1, 100000))->capture_default_str();
    app.add_option("--batch-size", batch_size, "batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    app.add_option("--threads", threads, "CPU threads for the GEMMs")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_option("--metrics", metrics, "write JSON Lines metrics to this file");
    app.add_option("--max-steps", max_steps, "stop after this many steps (0: run every epoch)")
        ->check(CLI::NonNegativeNumber)->capture_default_str();
  }
};

// One JSON object per line, flushed per event so a crash loses nothing already written.
class Metrics {
 public:
  explicit Metrics(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::out | std::ios::trunc);
    MT_CHECK(out_.good(), "cannot open metrics file '", path, "' for writing");
  }
  void write(const nlohmann::json& event) {
    if (!out_.is_open()) return;
    out_ << event.dump() << '\n';
    out_.flush();
    MT_CHECK(out_.good(), "writing the metrics file failed");
  }

 private:
  std::ofstream out_;
};

// "epoch 2/10 [ 312/ 938] loss 0.4123  41.2 steps/s  ETA 15s": redrawn in place twice a second
// on a terminal, one line every 15 s when stderr is a file or a pipe.
class Progress {
 public:
  Progress(int epochs, int64_t steps_per_epoch)
      : epochs_(epochs), steps_(steps_per_epoch), tty_(isatty(fileno(stderr)) != 0) {}
  void start_epoch() { t0_ = std::chrono::steady_clock::now(); }
  void update(int epoch, int64_t step, double loss, bool force = false) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < (tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(15000))) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - t0_).count();
    const double rate = secs > 0 ? double(step) / secs : 0.0;
    const double eta = rate > 0 ? double(steps_ - step) / rate : 0.0;
    std::fprintf(stderr, "%sepoch %d/%d [%5lld/%5lld] loss %.4f  %6.1f steps/s  ETA %4.0fs ", tty_ ? "\r" : "", epoch,
                 epochs_, (long long)step, (long long)steps_, loss, rate, eta);
    if (force || !tty_) std::fputc('\n', stderr);
  }

 private:
  int epochs_;
  int64_t steps_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_{}, last_{};
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace examples
