// char_lstm: a character-level language model, Embedding -> 2-layer LSTM (or GRU, --cell gru) ->
// Linear, trained on the fortunes corpus (Debian package fortunes) or any text file or folder.
//
//   ./char_lstm                                   # default run: ~5-10 min on 2 cores
//   ./char_lstm --smoke                           # tiny model, 60 steps, a few seconds (CI)
//   ./char_lstm --data book.txt --hidden 512 --epochs 20 --temperature 0.6 --prompt "Q:"
//   ./char_lstm --precision fp16 --loss-scale backoff     # mixed precision (optim/trainer.h)
//   ./char_lstm --precision bf16-pure --update-rounding kahan
//   ./char_lstm --cell gru                        # GRU layers instead of LSTM layers
//   mpirun -np 2 ./char_lstm --threads 1 --precision fp16 --loss-scale backoff   # data parallel
//
// Training draws random windows of --seq-len characters (every position is a prediction:
// input[t] -> target[t] = the next character); each window starts from a zero state. Validation
// reads the held-out tail of the corpus as --eval-batch parallel streams and carries the recurrent
// state from one chunk to the next, so every prediction sees the whole stream before it.
// Losses are reported in bits per character (cross-entropy in nats / ln 2) next to the
// unigram entropy of the corpus, what a model that ignores context gets at best.
//
// Every step goes through a PrecisionTrainer: the embedding rows, the LSTM and the head compute
// in the policy's dtype, the cross-entropy in fp32 (the allow-list's cast_input rule), and the
// trainer scales the loss, checks, unscales and clips the gradients (--clip acts on the true,
// unscaled gradient) and updates the parameters. Evaluation and sampling run in the same
// compute dtype as training.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "char_lstm_model.h"
#include "checkpoint.h"
#include "common.h"
#include "mixtape.h"

using namespace mixtape;
using examples::CharLSTM;
using examples::CharLSTMSize;
using examples::sequence_loss;

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kLn2 = 0.69314718055994530942;

// ---- flags -----------------------------------------------------------------------------------

constexpr const char* kAbout =
    "Train a character-level LSTM language model (Embedding -> LSTM -> Linear) on the fortunes corpus\n"
    "or any text, report train/validation bits per character against the corpus's unigram entropy,\n"
    "and sample a passage.\n\n"
    "An epoch is --steps-per-epoch steps on random windows of --seq-len characters. The defaults\n"
    "(hidden 256, 2 layers, batch 32, seq-len 100, 8 epochs x 100 steps, Adam lr 5e-3 with 20 warm-up\n"
    "steps and cosine decay to lr/10, clip 1.0, no dropout) take about 5-10 minutes on 2 cores and\n"
    "reach about 2.8 bits per character on validation, against a unigram entropy of 4.8 on fortunes;\n"
    "more epochs keep improving it (add --dropout 0.2 for runs that see the corpus several times).\n"
    "--precision, --loss-scale and --update-rounding pick the precision policy (default fp32).\n"
    "--cell gru swaps the LSTM layers for GRU layers of the same sizes.\n"
    "--smoke trains a tiny model for 60 steps (a few seconds) for CI.";

// char_lstm's own flags; the shared ones (--epochs, --lr, --precision, --device, ...) are in
// common.h.
struct Config {
  std::string data = data::kFortunesDir;
  std::string out_dir = ".";
  int64_t hidden = 256;
  int64_t embed = 64;
  int64_t layers = 2;
  std::string cell = "lstm";
  int64_t seq_len = 100;
  double dropout = 0.0;
  double clip = 1.0;
  double weight_decay = 0.0;  // > 0: AdamW
  std::string schedule = "cosine";
  int64_t warmup = 20;
  int64_t steps_per_epoch = 100;
  int64_t log_every = 10;
  double val_fraction = 0.05;
  int64_t eval_batch = 64;
  int64_t eval_chars = 32768;  // per intermediate evaluation; the final one reads the whole split
  double temperature = 0.8;
  int64_t sample_len = 300;
  std::string prompt = "\\n";
  bool smoke = false;
  examples::OptimizerFlags optimizer;  // --optimizer / --amsgrad; the default is optimizer_spec's
  examples::DataParallelFlags dist;    // --dist-timeout

  void add_to(CLI::App& app) {
    optimizer.add_to(app);
    dist.add_to(app);
    app.add_option("--data", data, "text file, or folder of text files (read non-recursively)")->capture_default_str();
    app.add_option("--out-dir", out_dir, "folder for the checkpoint char_lstm.safetensors (see --checkpoint)")
        ->capture_default_str();
    app.add_option("--hidden", hidden, "LSTM hidden size")->check(CLI::Range(1, 1 << 14))->capture_default_str();
    app.add_option("--embed", embed, "embedding size")->check(CLI::Range(1, 1 << 14))->capture_default_str();
    app.add_option("--layers", layers, "LSTM layers")->check(CLI::Range(1, 64))->capture_default_str();
    app.add_option("--cell", cell, "the recurrent layers: lstm or gru (nn::LSTM or nn::GRU)")
        ->check(CLI::IsMember({"lstm", "gru"}))
        ->capture_default_str();
    app.add_option("--seq-len", seq_len, "characters per training window and validation chunk")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    app.add_option("--dropout", dropout, "dropout between the recurrent layers")
        ->check(examples::finite)
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    app.add_option("--clip", clip, "clip gradients to this global L2 norm (0: off)")
        ->check(examples::finite)
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "decoupled weight decay; > 0 switches Adam to AdamW")
        ->check(examples::finite)
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--schedule", schedule, "learning-rate schedule after warm-up: cosine (to lr/10) or constant")
        ->check(CLI::IsMember({"cosine", "constant"}))
        ->capture_default_str();
    app.add_option("--warmup", warmup, "linear warm-up steps")->check(examples::non_negative)->capture_default_str();
    app.add_option("--steps-per-epoch", steps_per_epoch, "training steps per epoch")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_option("--log-every", log_every, "write a step event every N steps")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
        ->capture_default_str();
    app.add_option("--val-fraction", val_fraction, "held-out tail of the corpus for validation")
        ->check(examples::finite)
        ->check(CLI::Range(0.001, 0.5))
        ->capture_default_str();
    app.add_option("--eval-batch", eval_batch, "parallel validation streams")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    app.add_option(
           "--eval-chars", eval_chars,
           "validation characters scored after each epoch (0: all); the final evaluation scores all but with --smoke")
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--temperature", temperature, "sampling temperature (0: always the most likely character)")
        ->check(examples::finite)
        ->check(examples::non_negative)
        ->capture_default_str();
    app.add_option("--sample-len", sample_len, "characters to sample at the end (0: none)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--prompt", prompt, "text the sample starts from (\\n and \\t escapes understood)")
        ->capture_default_str();
    app.add_flag("--smoke", smoke, "tiny fixed configuration for CI: 60 steps of a 128-unit model (a few seconds)");
  }

  // After parsing: --smoke's configuration for the flags not given explicitly.
  void finish(const CLI::App& app, examples::CommonFlags& flags) {
    if (!smoke) return;
    using examples::smoke_default;
    smoke_default(app, "--hidden", hidden, 128);
    smoke_default(app, "--embed", embed, 32);
    smoke_default(app, "--seq-len", seq_len, 32);
    smoke_default(app, "--dropout", dropout, 0.0);
    smoke_default(app, "--steps-per-epoch", steps_per_epoch, 30);
    smoke_default(app, "--log-every", log_every, 3);
    smoke_default(app, "--warmup", warmup, 0);
    smoke_default(app, "--schedule", schedule, "constant");
    smoke_default(app, "--eval-chars", eval_chars, 8192);
    smoke_default(app, "--sample-len", sample_len, 80);
    smoke_default(app, "--epochs", flags.epochs, 2);
    smoke_default(app, "--batch-size", flags.batch_size, 32);
    smoke_default(app, "--lr", flags.lr, 1e-2);
  }
};

// "\n" and "\t" escapes in a flag value become the characters ("\\" a backslash).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char n = s[i + 1];
      if (n == 'n' || n == 't' || n == '\\') {
        out += n == 'n' ? '\n' : n == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// ---- data ------------------------------------------------------------------------------------

// The corpus, split into a training head and a validation tail, with the validation chunks.
struct Text {
  data::TextCorpus corpus;
  std::vector<data::TextBatch> val_batches;  // --eval-batch streams, cut into --seq-len chunks
  int64_t n_train, n_valid;                  // characters in each split
  double unigram;                            // the corpus's unigram entropy, bits per character
  Clock::time_point t_load;                  // when loading started
};

// Reads --data and checks that it is long enough and holds every character of the prompt.
Text load_text(const Config& c, const std::string& prompt) {
  const auto t_load = Clock::now();
  data::TextCorpus corpus = data::TextCorpus::from_path(c.data, c.val_fraction);
  for (unsigned char ch : prompt)
    MT_CHECK(corpus.vocab().contains(ch), "--prompt: the character with byte value ", int(ch),
             " does not occur in the corpus '", c.data, "'");
  const int64_t n_train = int64_t(corpus.ids(data::TextSplit::train).size());
  const int64_t n_valid = int64_t(corpus.ids(data::TextSplit::validation).size());
  MT_CHECK(n_train > c.seq_len, "the training split has ", n_train, " characters, too few for --seq-len ", c.seq_len,
           " (use a larger corpus or a smaller --seq-len)");
  MT_CHECK(n_valid >= 2, "the validation split has ", n_valid, " characters, too few to score (raise --val-fraction)");
  std::vector<data::TextBatch> val_batches =
      corpus.eval_batches(data::TextSplit::validation, std::min<int64_t>(c.eval_batch, n_valid - 1), c.seq_len);
  const double unigram = corpus.unigram_entropy_bits();
  return {std::move(corpus), std::move(val_batches), n_train, n_valid, unigram, t_load};
}

// ---- model -----------------------------------------------------------------------------------

// The model is examples/char_lstm_model.h's CharLSTM (also timed by bench/cpu_train_step).
CharLSTMSize model_size(const Config& c) {
  return {.embed = c.embed, .hidden = c.hidden, .layers = c.layers, .dropout = c.dropout, .cell = c.cell};
}

// How long the run is. The schedule spans the planned run (--epochs); --max-steps only stops it
// (Note [Resumable runs] in examples/checkpoint.h).
struct Plan {
  int64_t planned_steps;  // --epochs x --steps-per-epoch: the schedule's length
  int64_t total_steps;    // planned_steps, or --max-steps when that is fewer
  int64_t warmup;         // --warmup, at most planned_steps
  int epochs;             // the epochs total_steps takes (the last one may be short)
  int batch_size;
};

Plan plan_run(const Config& c, const examples::CommonFlags& flags) {
  const int64_t planned = flags.epochs * c.steps_per_epoch;
  const int64_t total_steps = flags.max_steps > 0 ? std::min<int64_t>(flags.max_steps, planned) : planned;
  return {planned, total_steps, std::min(c.warmup, planned),
          int((total_steps + c.steps_per_epoch - 1) / c.steps_per_epoch), flags.batch_size};
}

// Adam, or AdamW with --weight-decay > 0, unless --optimizer says otherwise.
OptimizerSpec optimizer_spec(const Config& c, double lr) {
  return c.optimizer.spec({.kind = c.weight_decay > 0 ? OptimizerKind::adamw : OptimizerKind::adam,
                           .lr = lr,
                           .weight_decay = c.weight_decay});
}

// Linear warm-up, then cosine decay to lr/10 (--schedule cosine) or the constant lr; null when
// the learning rate never changes.
std::unique_ptr<LRScheduler> make_schedule(Optimizer& opt, const Config& c, const Plan& plan, double lr) {
  if (c.schedule == "cosine")
    return std::make_unique<LRScheduler>(
        opt,
        LinearWarmup(plan.warmup, CosineAnnealingLR(std::max<int64_t>(plan.planned_steps - plan.warmup, 1), lr / 10)));
  if (plan.warmup > 0) return std::make_unique<LRScheduler>(opt, LinearWarmup(plan.warmup));
  return nullptr;
}

// The model with what updates it (`sched` may be null).
struct Learner {
  CharLSTM& model;
  PrecisionTrainer& trainer;
  LRScheduler* sched;
  dist::DataParallel* dp = nullptr;  // data parallel (Note [Data-parallel examples] in common.h)
};

void print_setup(const Config& c, const examples::CommonFlags& flags, const Text& text, const Learner& l,
                 const Plan& plan, Device device) {
  std::printf(
      "char_lstm: %s: %lld characters, vocabulary %lld, train %lld / validation %lld (%zu chunks of %lld x %lld)\n",
      c.data.c_str(), (long long)text.corpus.text().size(), (long long)text.corpus.vocab().size(),
      (long long)text.n_train, (long long)text.n_valid, text.val_batches.size(),
      (long long)text.val_batches.front().input.size(0), (long long)c.seq_len);
  std::printf("unigram entropy %.3f bpc; loaded in %.2f s\n", text.unigram, examples::seconds_since(text.t_load));
  std::printf("%s\n%lld parameters; %s lr %g, %s schedule, warm-up %lld, clip %g, dropout %g\n", l.model.str().c_str(),
              (long long)l.model.num_parameters(), l.trainer.optimizer().name(), flags.lr, c.schedule.c_str(),
              (long long)plan.warmup, c.clip, c.dropout);
  std::printf("device: %s\nprecision: %s\n", examples::device_description(device, flags.threads).c_str(),
              l.trainer.describe().c_str());
  std::printf("%d epochs x %lld steps, batch %d x %lld characters, %d threads%s\n", plan.epochs,
              (long long)c.steps_per_epoch, flags.batch_size, (long long)c.seq_len, flags.threads,
              c.smoke ? " (smoke)" : "");
  std::fflush(stdout);
}

// ---- one training step -----------------------------------------------------------------------

// Seconds spent in each part of the training steps that were timed. GPU kernels run
// asynchronously, so each part is timed to a synchronize at its end: on a GPU only the steps that
// log are timed (they synchronize anyway), on the CPU every step.
struct StepTimes {
  double forward = 0.0, backward = 0.0, update = 0.0;
  int64_t steps = 0;  // the steps timed
};

// One step on a batch of windows: forward in the compute dtype, backward seeded with the loss
// scale, then the trainer checks, unscales, clips and updates, and the schedule moves on. Returns
// the loss, where it was computed; nothing is read back (Note [Scaled step]) unless `timed`.
Tensor train_step(Learner& l, const data::TextBatch& batch, bool timed, StepTimes& times) {
  const Device device = l.trainer.device();
  const auto lap = [&](Clock::time_point since) {
    examples::synchronize(device);
    return examples::seconds_since(since);
  };
  const auto t_fwd = Clock::now();
  Tape tape;
  l.trainer.begin_step(tape);
  const Variable loss =
      sequence_loss(l.model.forward(batch.input, std::nullopt, l.trainer.compute_dtype()).logits, batch.target);
  if (timed) times.forward += lap(t_fwd);
  const auto t_bwd = Clock::now();
  l.trainer.backward(tape, loss);
  if (timed) times.backward += lap(t_bwd);
  const auto t_upd = Clock::now();
  l.trainer.step();  // decided where the gradients are; read when a step logs
  if (l.sched) l.sched->step();
  if (timed) times.update += lap(t_upd), ++times.steps;
  return loss.data();
}

// ---- the training loop -----------------------------------------------------------------------

// The progress line on stderr: redrawn twice a second on a terminal, a line every 15 s into a file.
class ProgressLine {
 public:
  // Steps per second count training time only (since `t0`, without `eval_secs`).
  void update(int epoch, const Plan& plan, int64_t s, int64_t steps_here, int64_t step, double train_bpc, double lr,
              Clock::time_point t0, double eval_secs) {
    const auto now = Clock::now();
    if (quiet || !(now - last_ > every_ || s == steps_here)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - t0).count() - eval_secs;
    const double rate = double(step) / std::max(secs, 1e-9);
    std::fprintf(stderr, "%sepoch %d/%d [%5lld/%5lld] train %.3f bpc  lr %.2e  %5.2f steps/s  ETA %4.0fs %s",
                 tty_ ? "\r" : "", epoch, plan.epochs, (long long)s, (long long)steps_here, train_bpc, lr, rate,
                 double(plan.total_steps - step) / rate, tty_ ? "" : "\n");
  }
  void end_epoch() {
    if (tty_ && !quiet) std::fputc('\n', stderr);
  }
  bool quiet = false;  // a data-parallel rank other than 0

 private:
  bool tty_ = isatty(fileno(stderr)) != 0;
  std::chrono::milliseconds every_{tty_ ? 500 : 15000};
  Clock::time_point last_ = Clock::now() - std::chrono::seconds(60);
};

// What the whole run has done so far.
struct RunState {
  Clock::time_point t0 = Clock::now();
  int64_t step = 0;
  double train_time = 0.0, eval_time = 0.0;
  StepTimes times;          // parts of train_time
  double epoch_secs = 0.0;  // the last epoch's training steps
  double last_train_bpc = 0.0, last_val_bpc = 0.0;
  double epoch_nats = 0.0;  // over the epoch in progress
  int64_t epoch_n = 0;
  double window_nats = 0.0;  // since the last step event
  int64_t window_n = 0;
  int64_t skipped_in_window = 0;    // steps the loss scaler skipped since the last step event
  examples::StepCounters counters;  // launches, host synchronizations and allocations per step
  ProgressLine progress;
};

// The run's progress under "progress." (Note [Resumable runs]): the step, the training windows'
// generator, and the running sums of the epoch (none when `epoch_done`: the next run starts the
// next epoch) and of the step event in progress.
void add_progress(TensorDict& ckpt, const RunState& run, const Generator& gen, bool epoch_done) {
  ckpt.set_meta("progress.step", std::to_string(run.step));
  examples::add_generator(ckpt, "progress.windows", gen);
  ckpt.set_meta("progress.epoch_nats", state_io::format(epoch_done ? 0.0 : run.epoch_nats));
  ckpt.set_meta("progress.epoch_n", std::to_string(epoch_done ? 0 : run.epoch_n));
  ckpt.set_meta("progress.window_nats", state_io::format(run.window_nats));
  ckpt.set_meta("progress.window_n", std::to_string(run.window_n));
  ckpt.set_meta("progress.skipped_in_window", std::to_string(run.skipped_in_window));
}

void load_progress(const TensorDict& ckpt, RunState& run, Generator& gen) {
  using examples::progress_double, examples::progress_int;
  run.step = progress_int(ckpt, "step");
  examples::load_generator(ckpt, "progress.windows", gen);
  run.epoch_nats = progress_double(ckpt, "epoch_nats");
  run.epoch_n = progress_int(ckpt, "epoch_n");
  run.window_nats = progress_double(ckpt, "window_nats");
  run.window_n = progress_int(ckpt, "window_n");
  run.skipped_in_window = progress_int(ckpt, "skipped_in_window");
  MT_CHECK(run.step >= 0 && run.epoch_n >= 0 && run.window_n >= 0, "--resume: the checkpoint's progress is negative");
}

// The model's parameters, generators, trainer and schedule (examples/checkpoint.h), the progress,
// and the vocabulary's bytes (the id -> byte map) as the i64 tensor "vocab".
TensorDict char_lstm_checkpoint(const Learner& l, const RunState& run, const Generator& gen,
                                const data::CharVocab& vocab, bool epoch_done) {
  TensorDict ckpt;
  examples::add_training_state(ckpt, "", l.model, l.trainer, l.sched);
  add_progress(ckpt, run, gen, epoch_done);
  std::vector<int64_t> bytes;
  for (unsigned char b : vocab.bytes()) bytes.push_back(int64_t(b));
  ckpt.add("vocab", from_vector(bytes, {int64_t(bytes.size())}));
  return ckpt;
}

// What a checkpoint must match to be resumed by this run.
examples::RunIdentity run_identity(const Learner& l, const Config& c, const examples::CommonFlags& flags,
                                   const Text& text) {
  examples::RunIdentity id = {{"program", "char_lstm"},
                              {"cell", c.cell},
                              {"model", l.model.str()},
                              {"batch_size", std::to_string(flags.batch_size)},
                              {"seq_len", std::to_string(c.seq_len)},
                              {"seed", std::to_string(flags.seed)},
                              {"training_characters", std::to_string(text.n_train)}};
  examples::add_precision_identity(id, l.trainer);
  return id;
}

// One epoch of steps on random training windows (from where the run stands, when it was resumed
// inside the epoch), with their checks, step events, progress line and --checkpoint-every saves;
// the epoch's mean training loss goes to run.last_train_bpc.
void train_epoch(Learner& l, const Text& text, Generator& gen, const Config& c, const Plan& plan, int epoch,
                 examples::Metrics& metrics, const examples::Checkpointer& checkpoint, const examples::RunIdentity& id,
                 RunState& run) {
  const auto t_epoch = Clock::now();
  const int64_t first = (epoch - 1) * c.steps_per_epoch;  // steps before this epoch
  const int64_t end = std::min(first + c.steps_per_epoch, plan.total_steps);
  const int64_t steps_here = end - first;
  double& epoch_nats = run.epoch_nats;
  int64_t& epoch_n = run.epoch_n;
  examples::StagedDraws windows(l.trainer.device(), [&] {  // Note [Draws staged on the device]
    data::TextBatch b = text.corpus.random_batch(data::TextSplit::train, plan.batch_size, c.seq_len, gen);
    return std::vector<Tensor>{b.input, b.target};
  });
  // The losses wait on the device until a step logs (Note [Readout block]); then they are
  // counted, in order, into the sums, with the steps the scaler skipped meanwhile.
  examples::LossLog losses(c.log_every, l.trainer.device());
  int64_t logged_up_to = run.step;             // the last step whose loss is counted
  int64_t skipped_seen = l.trainer.skipped();  // the scaler's count at that step
  const auto count_losses = [&] {
    std::vector<double> taken = losses.take();
    if (l.dp) l.dp->mean_over_ranks(taken);  // the global batch's loss, the same on every rank
    const int64_t skipped = l.trainer.skipped() - skipped_seen;
    skipped_seen = l.trainer.skipped();
    run.skipped_in_window += skipped;
    // A step the scaler skipped (inf/NaN gradients, as fp16 produces while a dynamic scale finds
    // its level) changed nothing; more non-finite losses than skipped steps mean a step with a
    // non-finite loss was applied (no loss scale to skip it, or a finite gradient): training
    // diverged. (A non-finite loss has non-finite gradients, which every skipping scaler skips.)
    int64_t nonfinite = 0;
    for (size_t i = 0; i < taken.size(); ++i) {
      const double nats = taken[i];
      if (!std::isfinite(nats)) {
        MT_CHECK(++nonfinite <= skipped, "the training loss became ", nats, " at step ", logged_up_to + int64_t(i) + 1,
                 " under ", l.trainer.describe(), " (try a smaller --lr or a --clip",
                 examples::diverged_hint(l.trainer));
        continue;
      }
      epoch_nats += nats;
      ++epoch_n;
      run.window_nats += nats;
      ++run.window_n;
    }
    logged_up_to += int64_t(taken.size());
  };
  while (run.step < end) {
    const int64_t s = ++run.step - first;
    const bool logs = run.step % c.log_every == 0 || run.step == plan.total_steps;
    const bool reads = logs || run.step == end;  // counts the losses: a step event, or the epoch's end
    const std::vector<Tensor> drawn = windows.next(checkpoint.steps_until_due(run.step, end));
    data::TextBatch batch{drawn[0], drawn[1]};
    run.counters.begin_step();
    if (l.dp) batch = {l.dp->shard_rows(batch.input), l.dp->shard_rows(batch.target)};  // this rank's windows
    const double lr = l.trainer.optimizer().lr();  // the learning rate this step's update uses
    const bool full = losses.add(train_step(l, batch, reads || !l.trainer.device().is_cuda(), run.times));
    metrics.write_telemetry(l.trainer);
    if (reads || full) count_losses();  // the one read of a logging step
    if (logs && run.window_n > 0) {
      const double nats = run.window_nats / double(run.window_n);
      metrics.write({{"event", "step"},
                     {"step", run.step},
                     {"epoch", epoch},
                     {"loss", nats},
                     {"bpc", nats / kLn2},
                     {"lr", lr},
                     {"grad_norm", l.trainer.last_grad_norm()},
                     {"scale", l.trainer.last_scale()},  // the scale this step's gradients carried
                     {"skipped", !l.trainer.last_applied()},
                     {"skipped_since_last", run.skipped_in_window}});
      run.window_nats = 0.0;
      run.window_n = 0;
      run.skipped_in_window = 0;
    }
    run.counters.end_step(reads || l.trainer.sampled());
    if (reads)
      run.progress.update(epoch, plan, s, steps_here, run.step,
                          epoch_nats / double(std::max<int64_t>(epoch_n, 1)) / kLn2, lr, run.t0, run.eval_time);
    if (checkpoint.due(run.step) && run.step < plan.total_steps) {
      count_losses();
      checkpoint.save(char_lstm_checkpoint(l, run, gen, text.corpus.vocab(), run.step == first + c.steps_per_epoch),
                      id);
    }
  }
  count_losses();
  run.progress.end_epoch();
  run.epoch_secs = examples::seconds_since(t_epoch);
  run.train_time += run.epoch_secs;
  run.last_train_bpc = epoch_nats / double(std::max<int64_t>(epoch_n, 1)) / kLn2;
  if (run.step == first + c.steps_per_epoch) epoch_nats = 0.0, epoch_n = 0;  // the next epoch starts afresh
}

// ---- evaluation ------------------------------------------------------------------------------

// The validation loss after an epoch (--eval-chars of it; all of it after the last epoch but
// with --smoke), on stdout and as an "eval" event.
void evaluate_epoch(Learner& l, const Text& text, const Config& c, const Plan& plan, int epoch,
                    examples::Metrics& metrics, RunState& run) {
  const bool whole = epoch == plan.epochs && !c.smoke;  // the final evaluation scores every character
  const auto t_eval = Clock::now();
  run.last_val_bpc =
      examples::evaluate_nats(l.model, text.val_batches, whole ? 0 : c.eval_chars, l.trainer.compute_dtype()) / kLn2;
  run.eval_time += examples::seconds_since(t_eval);
  std::printf("epoch %d/%d: train %.3f bpc, validation %.3f bpc%s (unigram %.3f), %.1f s + eval %.1f s\n", epoch,
              plan.epochs, run.last_train_bpc, run.last_val_bpc, whole ? " (all of it)" : "", text.unigram,
              run.epoch_secs, examples::seconds_since(t_eval));
  std::fflush(stdout);
  metrics.write({{"event", "eval"},
                 {"epoch", epoch},
                 {"step", run.step},
                 {"train_bpc", run.last_train_bpc},
                 {"val_bpc", run.last_val_bpc},
                 {"val_loss", run.last_val_bpc * kLn2},
                 {"unigram_bpc", text.unigram}});
}

// ---- checkpoint, sample and reports ----------------------------------------------------------

// Draws an index from softmax(logits / temperature) with one uniform number from `gen`
// (temperature 0: the most likely index).
int64_t sample_index(const Tensor& logits, double temperature, Generator& gen) {
  const std::vector<double> z = logits.to_vector();
  const auto best = int64_t(std::max_element(z.begin(), z.end()) - z.begin());
  if (temperature <= 0.0) return best;
  std::vector<double> p(z.size());
  double sum = 0.0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp((z[i] - z[size_t(best)]) / temperature);
  const double u = uniform({1}, 0.0, 1.0, gen, DType::f64).item() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < p.size(); ++i)
    if ((acc += p[i]) > u) return int64_t(i);
  return best;
}

// Feeds the prompt, then `length` sampled characters, one at a time with the carried state; the
// model runs in `dtype`.
std::string sample_text(CharLSTM& model, const data::CharVocab& vocab, const std::string& prompt, int64_t length,
                        double temperature, DType dtype, Generator& gen) {
  NoGrad no_grad;
  model.eval();
  const std::vector<int64_t> ids = vocab.encode(prompt);
  // All but the last prompt character in one call; then one step per character.
  std::optional<examples::CharState> state;
  if (ids.size() > 1) {
    const std::vector<int64_t> head(ids.begin(), ids.end() - 1);
    state = model.forward(from_vector(head, {1, int64_t(head.size())}), std::nullopt, dtype).state;
  }
  int64_t next = ids.back();
  std::vector<int64_t> out;
  out.reserve(size_t(length));
  for (int64_t i = 0; i < length; ++i) {
    CharLSTM::Out o = model.forward(from_vector(std::vector<int64_t>{next}, {1, 1}), state, dtype);
    state = o.state;
    next = sample_index(o.logits.data().reshape({-1}), temperature, gen);
    out.push_back(next);
  }
  model.train();
  return vocab.decode(out);
}

// --sample-len characters after the prompt, drawn with a generator seeded from --seed + 1.
void print_sample(CharLSTM& model, const data::CharVocab& vocab, const std::string& prompt, const Config& c,
                  uint64_t seed, DType dtype) {
  Generator sample_gen(seed + 1);
  const std::string text = sample_text(model, vocab, prompt, c.sample_len, c.temperature, dtype, sample_gen);
  std::printf("sample (temperature %g, seed %llu):\n----\n%s%s\n----\n", c.temperature, (unsigned long long)seed,
              prompt.c_str(), text.c_str());
}

// The "summary" event and the closing lines.
void report_run(const Learner& l, const RunState& run, double wall, double unigram, Device device,
                examples::Metrics& metrics) {
  const double step = double(run.step);
  const double timed = double(std::max<int64_t>(run.times.steps, 1));
  nlohmann::json summary = {{"event", "summary"},
                            {"device", device.str()},
                            {"steps", run.step},
                            {"final_train_bpc", run.last_train_bpc},
                            {"final_val_bpc", run.last_val_bpc},
                            {"unigram_bpc", unigram},
                            {"parameters", l.model.num_parameters()},
                            {"wall_s", wall},
                            {"train_s", run.train_time},
                            {"eval_s", run.eval_time},
                            {"steps_per_s", step / std::max(run.train_time, 1e-9)},
                            {"forward_ms", 1e3 * run.times.forward / timed},
                            {"backward_ms", 1e3 * run.times.backward / timed},
                            {"update_ms", 1e3 * run.times.update / timed}};
  examples::add_precision_summary(summary, l.trainer);
  run.counters.add_to(summary);
  metrics.write(summary);
  std::printf("%s\n", examples::precision_summary(l.trainer).c_str());
  std::printf("%lld steps in %.1f s (train %.1f s, %.2f steps/s; eval %.1f s)\n", (long long)run.step, wall,
              run.train_time, step / std::max(run.train_time, 1e-9), run.eval_time);
  std::printf("per timed step (%lld of them): forward %.0f ms, backward %.0f ms, clip + update %.0f ms\n",
              (long long)run.times.steps, 1e3 * run.times.forward / timed, 1e3 * run.times.backward / timed,
              1e3 * run.times.update / timed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kAbout};
  examples::CommonFlags flags;
  flags.epochs = 8;
  flags.batch_size = 32;
  flags.lr = 5e-3;
  flags.add_to(app);
  examples::PrecisionFlags precision;
  precision.add_to(app);
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  Config c;
  c.add_to(app);
  examples::Checkpointer checkpoint("char_lstm.safetensors");
  checkpoint.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<dist::DataParallel> dp;
  try {
    c.finish(app, flags);
    dp = examples::data_parallel(flags.batch_size, c.dist, "char_lstm");
    checkpoint.set_ranks(dp->rank(), dp->size());
    const Device device = device_flag.resolve();
    examples::check_output_dir(c.out_dir);
    checkpoint.finish(c.out_dir);
    set_num_threads(flags.threads);
    const std::string prompt = unescape(c.prompt);
    MT_CHECK(!prompt.empty(), "--prompt must not be empty");

    const Text text = load_text(c, prompt);
    Generator gen(flags.seed);  // the initial weights, then the training windows
    CharLSTM model(text.corpus.vocab().size(), model_size(c), gen);
    model.set_dropout_seed(flags.seed ^ 0x5eedd407ull);
    dp->broadcast(model);  // rank 0's initial state on every rank (nothing with one process)
    model.to(device);      // before the trainer: its masters and optimizer state follow the parameters
    PrecisionTrainer trainer(model, optimizer_spec(c, flags.lr), precision.options(flags.seed, c.clip));
    if (dp->distributed()) trainer.set_data_parallel(dp);
    const Plan plan = plan_run(c, flags);
    const std::unique_ptr<LRScheduler> sched = make_schedule(trainer.optimizer(), c, plan, flags.lr);
    Learner learner{model, trainer, sched.get(), dp->distributed() ? dp.get() : nullptr};
    print_setup(c, flags, text, learner, plan, device);

    const examples::RunIdentity id = run_identity(learner, c, flags, text);
    RunState run;
    run.progress.quiet = !dp->is_root();
    if (const std::optional<TensorDict> saved = checkpoint.resume_state(id)) {
      examples::load_training_state(*saved, "", model, trainer, sched.get());
      load_progress(*saved, run, gen);
      std::printf("resumed from %s at step %lld\n", checkpoint.path().c_str(), (long long)run.step);
    }
    checkpoint.check_room(char_lstm_checkpoint(learner, run, gen, text.corpus.vocab(), false));

    examples::Metrics metrics(dp->is_root() ? flags.metrics : std::string(), checkpoint.resuming());
    const int first_epoch = int(std::min(run.step, plan.total_steps - 1) / c.steps_per_epoch) + 1;
    for (int epoch = first_epoch; epoch <= plan.epochs; ++epoch) {
      train_epoch(learner, text, gen, c, plan, epoch, metrics, checkpoint, id, run);
      evaluate_epoch(learner, text, c, plan, epoch, metrics, run);
    }
    const double wall = examples::seconds_since(run.t0);
    std::printf("validation %.2f bpc vs unigram entropy %.2f bpc (train %.2f bpc over the last epoch)\n",
                run.last_val_bpc, text.unigram, run.last_train_bpc);

    checkpoint.save(char_lstm_checkpoint(learner, run, gen, text.corpus.vocab(), run.step % c.steps_per_epoch == 0),
                    id);
    std::printf("checkpoint: %s\n", checkpoint.path().c_str());
    if (c.sample_len > 0) print_sample(model, text.corpus.vocab(), prompt, c, flags.seed, trainer.compute_dtype());
    report_run(learner, run, wall, text.unigram, device, metrics);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nchar_lstm: %s\n", e.what());
    if (dp && dp->distributed()) dist::abort_all(1);  // the other ranks may wait in a collective
    return 1;
  }
  return 0;
}
