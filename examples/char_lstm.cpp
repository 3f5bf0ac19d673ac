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
#include <memory>
#include <optional>
#include <string>
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
// (Note [Resumable runs] in train/checkpoint.h).
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
};

void print_setup(const Config& c, const examples::CommonFlags& flags, const Text& text, const Learner& l,
                 const Plan& plan, Device device) {
  std::printf(
      "char_lstm: %s: %lld characters, vocabulary %lld, train %lld / validation %lld (%zu chunks of %lld x %lld)\n",
      c.data.c_str(), (long long)text.corpus.text().size(), (long long)text.corpus.vocab().size(),
      (long long)text.n_train, (long long)text.n_valid, text.val_batches.size(),
      (long long)text.val_batches.front().input.size(0), (long long)c.seq_len);
  std::printf("unigram entropy %.3f bpc; loaded in %.2f s\n", text.unigram, train::seconds_since(text.t_load));
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

// ---- the training loop -----------------------------------------------------------------------

// What the reports sum, saved with the checkpoint under "progress.": the epoch's losses, those
// since the last step event, and the steps the loss scaler skipped since then.
struct Sums {
  double epoch_nats = 0.0;  // over the epoch in progress
  int64_t epoch_n = 0;
  double window_nats = 0.0;  // since the last step event
  int64_t window_n = 0;
  int64_t skipped_at_event = 0;  // the scaler's skipped steps at the last step event
  double last_train_bpc = 0.0, last_val_bpc = 0.0;
  double eval_time = 0.0;
};

// What a checkpoint must match to be resumed by this run.
train::RunIdentity run_identity(const Learner& l, const Config& c, const examples::CommonFlags& flags,
                                const Text& text) {
  train::RunIdentity id = {{"program", "char_lstm"},
                           {"cell", c.cell},
                           {"model", l.model.str()},
                           {"batch_size", std::to_string(flags.batch_size)},
                           {"seq_len", std::to_string(c.seq_len)},
                           {"seed", std::to_string(flags.seed)},
                           {"training_characters", std::to_string(text.n_train)}};
  train::add_precision_identity(id, l.trainer);
  return id;
}

// One step on a batch of windows: forward in the compute dtype; the loop runs backward seeded
// with the loss scale, and the trainer checks, unscales, clips and updates.
train::Objective window_loss(Learner& l, const train::TrainLoop::Batch& batch) {
  return {sequence_loss(l.model.forward(batch[0], std::nullopt, l.trainer.compute_dtype()).logits, batch[1]), {}};
}

// The step event: the mean loss since the last one (none when no loss since was finite).
std::optional<nlohmann::json> step_event(const Learner& l, const train::StepInfo& s, Sums& sums) {
  if (sums.window_n == 0) return std::nullopt;
  const double nats = sums.window_nats / double(sums.window_n);
  nlohmann::json event = {{"event", "step"},
                          {"step", s.step},
                          {"epoch", s.epoch},
                          {"loss", nats},
                          {"bpc", nats / kLn2},
                          {"lr", s.lr},
                          {"grad_norm", l.trainer.last_grad_norm()},
                          {"scale", l.trainer.last_scale()},  // the scale this step's gradients carried
                          {"skipped", !l.trainer.last_applied()},
                          {"skipped_since_last", l.trainer.skipped() - sums.skipped_at_event}};
  sums.window_nats = 0.0;
  sums.window_n = 0;
  sums.skipped_at_event = l.trainer.skipped();
  return event;
}

// The sums under "progress." (none of the epoch's when `epoch_done`: the next run starts the next
// epoch), and the vocabulary's bytes (the id -> byte map) as the i64 tensor "vocab".
void save_sums(TensorDict& ckpt, const Sums& sums, const Learner& l, const data::CharVocab& vocab, bool epoch_done) {
  ckpt.set_meta("progress.epoch_nats", state_io::format(epoch_done ? 0.0 : sums.epoch_nats));
  ckpt.set_meta("progress.epoch_n", std::to_string(epoch_done ? 0 : sums.epoch_n));
  ckpt.set_meta("progress.window_nats", state_io::format(sums.window_nats));
  ckpt.set_meta("progress.window_n", std::to_string(sums.window_n));
  ckpt.set_meta("progress.skipped_in_window", std::to_string(l.trainer.skipped() - sums.skipped_at_event));
  std::vector<int64_t> bytes;
  for (unsigned char b : vocab.bytes()) bytes.push_back(int64_t(b));
  ckpt.add("vocab", from_vector(bytes, {int64_t(bytes.size())}));
}

void load_sums(const TensorDict& ckpt, Sums& sums, const Learner& l) {
  using train::progress_double, train::progress_int;
  sums.epoch_nats = progress_double(ckpt, "epoch_nats");
  sums.epoch_n = progress_int(ckpt, "epoch_n");
  sums.window_nats = progress_double(ckpt, "window_nats");
  sums.window_n = progress_int(ckpt, "window_n");
  const int64_t skipped = progress_int(ckpt, "skipped_in_window");
  MT_CHECK(sums.epoch_n >= 0 && sums.window_n >= 0 && skipped >= 0, "--resume: the checkpoint's progress is negative");
  sums.skipped_at_event = l.trainer.skipped() - skipped;
}

// ---- evaluation ------------------------------------------------------------------------------

// The validation loss after an epoch (--eval-chars of it; all of it after the last epoch but
// with --smoke), on stdout and as an "eval" event.
void evaluate_epoch(Learner& l, const Text& text, const Config& c, const train::TrainLoop& loop, int epoch,
                    train::Metrics& metrics, Sums& sums) {
  const bool whole = epoch == loop.epochs_in_run() && !c.smoke;  // the final evaluation scores every character
  const auto t_eval = Clock::now();
  sums.last_val_bpc =
      examples::evaluate_nats(l.model, text.val_batches, whole ? 0 : c.eval_chars, l.trainer.compute_dtype()) / kLn2;
  sums.eval_time += train::seconds_since(t_eval);
  std::printf("epoch %d/%d: train %.3f bpc, validation %.3f bpc%s (unigram %.3f), %.1f s + eval %.1f s\n", epoch,
              loop.epochs_in_run(), sums.last_train_bpc, sums.last_val_bpc, whole ? " (all of it)" : "", text.unigram,
              loop.epoch_seconds(), train::seconds_since(t_eval));
  std::fflush(stdout);
  metrics.write({{"event", "eval"},
                 {"epoch", epoch},
                 {"step", loop.steps()},
                 {"train_bpc", sums.last_train_bpc},
                 {"val_bpc", sums.last_val_bpc},
                 {"val_loss", sums.last_val_bpc * kLn2},
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
void report_run(const Learner& l, const train::TrainLoop& loop, const Sums& sums, double wall, double unigram,
                Device device, train::Metrics& metrics) {
  const double step = double(loop.steps()), train_time = loop.train_seconds();
  const train::StepTimes& times = loop.times();
  const double timed = double(std::max<int64_t>(times.steps, 1));
  nlohmann::json summary = {{"event", "summary"},
                            {"device", device.str()},
                            {"steps", loop.steps()},
                            {"final_train_bpc", sums.last_train_bpc},
                            {"final_val_bpc", sums.last_val_bpc},
                            {"unigram_bpc", unigram},
                            {"parameters", l.model.num_parameters()},
                            {"wall_s", wall},
                            {"train_s", train_time},
                            {"eval_s", sums.eval_time},
                            {"steps_per_s", step / std::max(train_time, 1e-9)},
                            {"forward_ms", 1e3 * times.forward / timed},
                            {"backward_ms", 1e3 * times.backward / timed},
                            {"update_ms", 1e3 * times.update / timed}};
  train::add_precision_summary(summary, l.trainer);
  loop.counters().add_to(summary);
  metrics.write(summary);
  std::printf("%s\n", train::precision_summary(l.trainer).c_str());
  std::printf("%lld steps in %.1f s (train %.1f s, %.2f steps/s; eval %.1f s)\n", (long long)loop.steps(), wall,
              train_time, step / std::max(train_time, 1e-9), sums.eval_time);
  std::printf("per timed step (%lld of them): forward %.0f ms, backward %.0f ms, clip + update %.0f ms\n",
              (long long)times.steps, 1e3 * times.forward / timed, 1e3 * times.backward / timed,
              1e3 * times.update / timed);
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
  examples::CheckpointFlags checkpoint_flags("char_lstm.safetensors");
  checkpoint_flags.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<dist::DataParallel> dp;
  try {
    c.finish(app, flags);
    dp = examples::data_parallel(flags.batch_size, c.dist, "char_lstm");
    const Device device = device_flag.resolve();
    examples::check_output_dir(c.out_dir);
    const train::Checkpointer checkpoint = checkpoint_flags.finish(c.out_dir, dp->rank(), dp->size());
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
    Learner learner{model, trainer, sched.get()};
    print_setup(c, flags, text, learner, plan, device);

    const train::RunIdentity id = run_identity(learner, c, flags, text);
    train::Metrics metrics(dp->is_root() ? flags.metrics : std::string(), checkpoint.resuming());

    // The loop (train/loop.h): random windows drawn from `gen` each step, the loss of each, the
    // sums the step and eval events report, an evaluation after each epoch.
    train::TrainLoop loop({.epochs = flags.epochs,
                           .steps_per_epoch = c.steps_per_epoch,
                           .max_steps = flags.max_steps,
                           .log_every = c.log_every,
                           .log_last_step = true,
                           .dp = dp->distributed() ? dp : nullptr},
                          {{.model = &model, .trainer = &trainer, .sched = sched.get(), .loss_column = 0}});
    loop.add_draws("windows", gen, [&] {
      data::TextBatch b = text.corpus.random_batch(data::TextSplit::train, flags.batch_size, c.seq_len, gen);
      return std::vector<Tensor>{b.input, b.target};
    });
    loop.objective = [&](const train::TrainLoop::Batch& b, const train::StepInfo&) { return window_loss(learner, b); };
    Sums sums;
    loop.tally = [&](const double* nats, int64_t) {
      if (!std::isfinite(*nats)) return;  // a step the scaler skipped (the loop checked that it was)
      sums.epoch_nats += *nats, ++sums.epoch_n;
      sums.window_nats += *nats, ++sums.window_n;
    };
    loop.step_event = [&](const train::StepInfo& s) { return step_event(learner, s, sums); };
    loop.progress_loss = [&] { return sums.epoch_nats / double(std::max<int64_t>(sums.epoch_n, 1)) / kLn2; };
    loop.epoch_end = [&](int epoch, bool complete) {
      sums.last_train_bpc = sums.epoch_nats / double(std::max<int64_t>(sums.epoch_n, 1)) / kLn2;
      if (complete) sums.epoch_nats = 0.0, sums.epoch_n = 0;  // the next epoch starts afresh
      evaluate_epoch(learner, text, c, loop, epoch, metrics, sums);
    };
    loop.save_state = [&](TensorDict& ckpt, bool epoch_done) {
      save_sums(ckpt, sums, learner, text.corpus.vocab(), epoch_done);
    };
    loop.load_state = [&](const TensorDict& ckpt) { load_sums(ckpt, sums, learner); };
    if (loop.resume(&checkpoint, id))
      std::printf("resumed from %s at step %lld\n", checkpoint.path().c_str(), (long long)loop.steps());
    const auto t0 = Clock::now();
    loop.run(metrics);
    const double wall = train::seconds_since(t0);
    std::printf("validation %.2f bpc vs unigram entropy %.2f bpc (train %.2f bpc over the last epoch)\n",
                sums.last_val_bpc, text.unigram, sums.last_train_bpc);
    std::printf("checkpoint: %s\n", checkpoint.path().c_str());
    if (c.sample_len > 0) print_sample(model, text.corpus.vocab(), prompt, c, flags.seed, trainer.compute_dtype());
    report_run(learner, loop, sums, wall, text.unigram, device, metrics);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nchar_lstm: %s\n", e.what());
    if (dp && dp->distributed()) dist::abort_all(1);  // the other ranks may wait in a collective
    return 1;
  }
  return 0;
}
