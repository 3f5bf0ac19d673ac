// char_lstm: a character-level language model, Embedding -> 2-layer LSTM -> Linear, trained
// on the fortunes corpus (Debian package fortunes) or any text file or folder.
//
//   ./char_lstm                                   # default run: ~5-10 min on 2 cores
//   ./char_lstm --smoke                           # tiny model, 60 steps, a few seconds (CI)
//   ./char_lstm --data book.txt --hidden 512 --epochs 20 --temperature 0.6 --prompt "Q:"
//   ./char_lstm --precision fp16 --loss-scale backoff     # mixed precision (optim/trainer.h)
//   ./char_lstm --precision bf16-pure --update-rounding kahan
//
// Training draws random windows of --seq-len characters (every position is a prediction:
// input[t] -> target[t] = the next character); each window starts from a zero state. Validation
// reads the held-out tail of the corpus as --eval-batch parallel streams and carries the LSTM
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

#include "common.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

constexpr double kLn2 = 0.69314718055994530942;

struct Config {
  std::string data = data::kFortunesDir;
  std::string out_dir = ".";
  int64_t hidden = 256;
  int64_t embed = 64;
  int64_t layers = 2;
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
};

// Embedding(V, E) -> LSTM(E, H, layers, batch_first) -> Linear(H, V).
class CharLSTM : public nn::Module {
 public:
  CharLSTM(int64_t vocab, const Config& c, Generator& gen) : Module("CharLSTM") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, c.embed, gen));
    lstm = register_module(
        "lstm", std::make_shared<nn::LSTM>(
                    nn::LSTMOptions{.input_size = c.embed, .hidden_size = c.hidden, .num_layers = c.layers,
                                    .batch_first = true, .dropout = c.dropout},
                    gen));
    head = register_module("head", std::make_shared<nn::Linear>(c.hidden, vocab, true, gen));
  }

  struct Out {
    Variable logits;  // [B, T, V]
    nn::LSTMState state;
  };
  // ids i64 [B, T] on any device (copied to the model's); the embedding rows come in `dtype` and
  // everything after follows them.
  Out forward(const Tensor& ids, const std::optional<nn::LSTMState>& state = std::nullopt, DType dtype = DType::f32) {
    nn::LSTMOutput o = (*lstm)((*embed)(ids.to(embed->weight.device()), dtype), state);
    return {(*head)(o.output), o.state};
  }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> head;
};

// Mean cross-entropy in nats over all B*T positions: logits [B, T, V] in any dtype, targets
// i64 [B, T]; the loss is computed in fp32 (Note [The fp32 allow-list]).
Variable sequence_loss(const Variable& logits, const Tensor& targets, Reduction reduction = Reduction::mean) {
  const int64_t V = logits.size(2);
  return cross_entropy(nn::fp32_input(OpId::cross_entropy, reshape(logits, {-1, V})),
                       targets.to(logits.device()).reshape({-1}), reduction);
}

// Validation cross-entropy in nats per character over `batches` (carrying the state along each
// stream), stopping once `max_chars` targets are scored (0: all). The model runs in `dtype`.
double evaluate(CharLSTM& model, const std::vector<data::TextBatch>& batches, int64_t max_chars, DType dtype) {
  NoGrad no_grad;
  model.eval();
  std::optional<nn::LSTMState> state;
  double nats = 0.0;
  int64_t count = 0;
  for (const data::TextBatch& b : batches) {
    if (max_chars > 0 && count >= max_chars) break;
    CharLSTM::Out out = model.forward(b.input, state, dtype);
    nats += sequence_loss(out.logits, b.target, Reduction::sum).item();
    count += b.target.numel();
    state = out.state;
  }
  model.train();
  return nats / double(std::max<int64_t>(count, 1));
}

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
  std::optional<nn::LSTMState> state;
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

// Model parameters under "model.", the trainer (optimizer and loss scaler) under "trainer.", the
// schedule under "sched.", and the vocabulary's bytes (the id -> byte map) as the i64 tensor
// "vocab".
void save_checkpoint(const std::string& path, const CharLSTM& model, const PrecisionTrainer& trainer,
                     const LRScheduler* sched, const data::CharVocab& vocab, const Config& c) {
  TensorDict ckpt;
  for (const auto& [name, t] : model.state_dict()) ckpt.add("model." + name, t);
  ckpt.merge("trainer.", trainer.state_dict());
  if (sched) ckpt.merge("sched.", sched->state_dict());
  std::vector<int64_t> bytes;
  for (unsigned char b : vocab.bytes()) bytes.push_back(int64_t(b));
  ckpt.add("vocab", from_vector(bytes, {int64_t(bytes.size())}));
  ckpt.set_meta("model", "CharLSTM");
  ckpt.set_meta("hidden", std::to_string(c.hidden));
  ckpt.set_meta("embed", std::to_string(c.embed));
  ckpt.set_meta("layers", std::to_string(c.layers));
  save_safetensors(path, ckpt);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train a character-level LSTM language model (Embedding -> LSTM -> Linear) on the fortunes corpus\n"
      "or any text, report train/validation bits per character against the corpus's unigram entropy,\n"
      "and sample a passage.\n\n"
      "An epoch is --steps-per-epoch steps on random windows of --seq-len characters. The defaults\n"
      "(hidden 256, 2 layers, batch 32, seq-len 100, 8 epochs x 100 steps, Adam lr 5e-3 with 20 warm-up\n"
      "steps and cosine decay to lr/10, clip 1.0, no dropout) take about 5-10 minutes on 2 cores and\n"
      "reach about 2.8 bits per character on validation, against a unigram entropy of 4.8 on fortunes;\n"
      "more epochs keep improving it (add --dropout 0.2 for runs that see the corpus several times).\n"
      "--precision, --loss-scale and --update-rounding pick the precision policy (default fp32).\n"
      "--smoke trains a tiny model for 60 steps (a few seconds) for CI."};
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
  app.add_option("--data", c.data, "text file, or folder of text files (read non-recursively)")->capture_default_str();
  app.add_option("--out-dir", c.out_dir, "folder for the checkpoint char_lstm.safetensors")->capture_default_str();
  app.add_option("--hidden", c.hidden, "LSTM hidden size")->check(CLI::Range(1, 1 << 14))->capture_default_str();
  app.add_option("--embed", c.embed, "embedding size")->check(CLI::Range(1, 1 << 14))->capture_default_str();
  app.add_option("--layers", c.layers, "LSTM layers")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "characters per training window and validation chunk")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--dropout", c.dropout, "dropout between LSTM layers")->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--clip", c.clip, "clip gradients to this global L2 norm (0: off)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "decoupled weight decay; > 0 switches Adam to AdamW")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--schedule", c.schedule, "learning-rate schedule after warm-up: cosine (to lr/10) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  app.add_option("--warmup", c.warmup, "linear warm-up steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--steps-per-epoch", c.steps_per_epoch, "training steps per epoch")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  app.add_option("--log-every", c.log_every, "write a step event every N steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
  app.add_option("--val-fraction", c.val_fraction, "held-out tail of the corpus for validation")
      ->check(CLI::Range(0.001, 0.5))->capture_default_str();
  app.add_option("--eval-batch", c.eval_batch, "parallel validation streams")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--eval-chars", c.eval_chars,
                 "validation characters scored after each epoch (0: all); the final evaluation scores all but with --smoke")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--temperature", c.temperature, "sampling temperature (0: always the most likely character)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--sample-len", c.sample_len, "characters to sample at the end (0: none)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--prompt", c.prompt, "text the sample starts from (\\n and \\t escapes understood)")
      ->capture_default_str();
  app.add_flag("--smoke", c.smoke, "tiny fixed configuration for CI: 60 steps of a 128-unit model (a few seconds)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (c.smoke) {
      c.hidden = 128;
      c.embed = 32;
      c.seq_len = 32;
      c.dropout = 0.0;
      c.steps_per_epoch = 30;
      if (app.count("--log-every") == 0) c.log_every = 3;  // an explicit flag wins
      c.warmup = 0;
      c.schedule = "constant";
      c.eval_chars = 8192;
      c.sample_len = 80;
      flags.epochs = 2;
      flags.batch_size = 32;
      flags.lr = 1e-2;
    }
    const Device device = device_flag.resolve();
    set_num_threads(flags.threads);
    const std::string prompt = unescape(c.prompt);
    MT_CHECK(!prompt.empty(), "--prompt must not be empty");

    const auto t_load = std::chrono::steady_clock::now();
    const data::TextCorpus corpus = data::TextCorpus::from_path(c.data, c.val_fraction);
    const data::CharVocab& vocab = corpus.vocab();
    for (unsigned char ch : prompt)
      MT_CHECK(vocab.contains(ch), "--prompt: the character with byte value ", int(ch),
               " does not occur in the corpus '", c.data, "'");
    const int64_t V = vocab.size();
    const int64_t n_train = int64_t(corpus.ids(data::TextSplit::train).size());
    const int64_t n_valid = int64_t(corpus.ids(data::TextSplit::validation).size());
    MT_CHECK(n_train > c.seq_len, "the training split has ", n_train, " characters, too few for --seq-len ",
             c.seq_len, " (use a larger corpus or a smaller --seq-len)");
    MT_CHECK(n_valid >= 2, "the validation split has ", n_valid, " characters, too few to score (raise --val-fraction)");
    const std::vector<data::TextBatch> val_batches =
        corpus.eval_batches(data::TextSplit::validation, std::min<int64_t>(c.eval_batch, n_valid - 1), c.seq_len);
    const double unigram = corpus.unigram_entropy_bits();

    Generator gen(flags.seed);
    CharLSTM model(V, c, gen);
    model.lstm->set_dropout_seed(flags.seed ^ 0x5eedd407ull);
    model.to(device);  // before the trainer: its masters and optimizer state follow the parameters
    PrecisionTrainer trainer(model,
                             {.kind = c.weight_decay > 0 ? OptimizerKind::adamw : OptimizerKind::adam,
                              .lr = flags.lr, .weight_decay = c.weight_decay},
                             precision.options(flags.seed, c.clip));
    Optimizer& opt = trainer.optimizer();
    const DType compute = trainer.compute_dtype();
    const int64_t total_steps =
        flags.max_steps > 0 ? std::min<int64_t>(flags.max_steps, flags.epochs * c.steps_per_epoch)
                            : flags.epochs * c.steps_per_epoch;
    std::unique_ptr<LRScheduler> sched;
    const int64_t warmup = std::min(c.warmup, total_steps);
    if (c.schedule == "cosine")
      sched = std::make_unique<LRScheduler>(
          opt, LinearWarmup(warmup, CosineAnnealingLR(std::max<int64_t>(total_steps - warmup, 1), flags.lr / 10)));
    else if (warmup > 0)
      sched = std::make_unique<LRScheduler>(opt, LinearWarmup(warmup));

    std::printf("char_lstm: %s: %lld characters, vocabulary %lld, train %lld / validation %lld (%zu chunks of %lld x %lld)\n",
                c.data.c_str(), (long long)corpus.text().size(), (long long)V, (long long)n_train,
                (long long)n_valid, val_batches.size(), (long long)val_batches.front().input.size(0),
                (long long)c.seq_len);
    std::printf("unigram entropy %.3f bpc; loaded in %.2f s\n", unigram, examples::seconds_since(t_load));
    std::printf("%s\n%lld parameters; %s lr %g, %s schedule, warm-up %lld, clip %g, dropout %g\n",
                model.str().c_str(), (long long)model.num_parameters(), opt.name(), flags.lr, c.schedule.c_str(),
                (long long)warmup, c.clip, c.dropout);
    std::printf("device: %s\nprecision: %s\n", examples::device_description(device, flags.threads).c_str(),
                trainer.describe().c_str());
    const int epochs = int((total_steps + c.steps_per_epoch - 1) / c.steps_per_epoch);
    std::printf("%d epochs x %lld steps, batch %d x %lld characters, %d threads%s\n", epochs,
                (long long)c.steps_per_epoch, flags.batch_size, (long long)c.seq_len, flags.threads,
                c.smoke ? " (smoke)" : "");
    std::fflush(stdout);

    examples::Metrics metrics(flags.metrics);
    const auto t0 = std::chrono::steady_clock::now();
    double train_time = 0.0, eval_time = 0.0;
    double forward_s = 0.0, backward_s = 0.0, update_s = 0.0;  // parts of train_time
    int64_t step = 0;
    double last_train_bpc = 0.0, last_val_bpc = 0.0;
    double window_nats = 0.0;  // since the last step event
    int64_t window_n = 0;
    int64_t skipped_in_window = 0;  // steps the loss scaler skipped since the last step event
    // The progress line: redrawn twice a second on a terminal, a line every 15 s into a file.
    const bool tty = isatty(fileno(stderr)) != 0;
    const auto progress_every = tty ? std::chrono::milliseconds(500) : std::chrono::milliseconds(15000);
    auto last_print = std::chrono::steady_clock::now() - std::chrono::seconds(60);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      const auto t_epoch = std::chrono::steady_clock::now();
      double epoch_nats = 0.0;
      int64_t epoch_n = 0;
      const int64_t steps_here = std::min(c.steps_per_epoch, total_steps - step);
      for (int64_t s = 1; s <= steps_here; ++s) {
        ++step;
        const data::TextBatch batch =
            corpus.random_batch(data::TextSplit::train, flags.batch_size, c.seq_len, gen);
        double loss_nats = 0.0;
        {
          const auto t_fwd = std::chrono::steady_clock::now();
          Tape tape;
          trainer.begin_step(tape);
          const Variable loss = sequence_loss(model.forward(batch.input, std::nullopt, compute).logits, batch.target);
          examples::synchronize(device);  // GPU kernels run asynchronously: time each phase to its end
          const auto t_bwd = std::chrono::steady_clock::now();
          trainer.backward(tape, loss);
          loss_nats = loss.item();  // waits for the backward pass
          forward_s += std::chrono::duration<double>(t_bwd - t_fwd).count();
          backward_s += examples::seconds_since(t_bwd);
        }
        const auto t_upd = std::chrono::steady_clock::now();
        const float scale = trainer.scale();  // the scale this step's gradients carry
        const double lr = opt.lr();
        const bool applied = trainer.step();
        if (sched) sched->step();
        examples::synchronize(device);
        update_s += examples::seconds_since(t_upd);
        metrics.write_telemetry(trainer);
        // A step the scaler skipped (inf/NaN gradients, as fp16 produces while a dynamic scale
        // finds its level) changed nothing; a non-finite loss whose step was applied (no loss
        // scale to skip it, or a finite gradient) means training diverged.
        MT_CHECK(std::isfinite(loss_nats) || !applied, "the training loss became ", loss_nats, " at step ", step,
                 " under ", trainer.describe(), " (try a smaller --lr or a --clip",
                 nn::is_16bit(trainer.precision()) && trainer.options().loss_scale.kind == LossScaleSpec::Kind::none
                     ? ", or a dynamic --loss-scale such as backoff)"
                     : ")");
        skipped_in_window += !applied;

        if (std::isfinite(loss_nats)) {
          epoch_nats += loss_nats;
          ++epoch_n;
          window_nats += loss_nats;
          ++window_n;
        }
        if ((step % c.log_every == 0 || step == total_steps) && window_n > 0) {
          const double nats = window_nats / double(window_n);
          metrics.write({{"event", "step"}, {"step", step}, {"epoch", epoch}, {"loss", nats},
                         {"bpc", nats / kLn2}, {"lr", lr}, {"grad_norm", trainer.last_grad_norm()},
                         {"scale", scale}, {"skipped", !applied}, {"skipped_since_last", skipped_in_window}});
          window_nats = 0.0;
          window_n = 0;
          skipped_in_window = 0;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now - last_print > progress_every || s == steps_here) {
          last_print = now;
          const double secs = std::chrono::duration<double>(now - t0).count() - eval_time;
          const double rate = double(step) / std::max(secs, 1e-9);
          std::fprintf(stderr, "%sepoch %d/%d [%5lld/%5lld] train %.3f bpc  lr %.2e  %5.2f steps/s  ETA %4.0fs %s",
                       tty ? "\r" : "", epoch, epochs, (long long)s, (long long)steps_here,
                       epoch_nats / double(std::max<int64_t>(epoch_n, 1)) / kLn2, lr, rate,
                       double(total_steps - step) / rate, tty ? "" : "\n");
        }
      }
      if (tty) std::fputc('\n', stderr);
      train_time += examples::seconds_since(t_epoch);

      const bool whole = epoch == epochs && !c.smoke;  // the final evaluation scores every character
      const auto t_eval = std::chrono::steady_clock::now();
      last_train_bpc = epoch_nats / double(std::max<int64_t>(epoch_n, 1)) / kLn2;
      last_val_bpc = evaluate(model, val_batches, whole ? 0 : c.eval_chars, compute) / kLn2;
      eval_time += examples::seconds_since(t_eval);
      std::printf("epoch %d/%d: train %.3f bpc, validation %.3f bpc%s (unigram %.3f), %.1f s + eval %.1f s\n",
                  epoch, epochs, last_train_bpc, last_val_bpc, whole ? " (all of it)" : "", unigram,
                  examples::seconds_since(t_epoch) - examples::seconds_since(t_eval),
                  examples::seconds_since(t_eval));
      std::fflush(stdout);
      metrics.write({{"event", "eval"}, {"epoch", epoch}, {"step", step}, {"train_bpc", last_train_bpc},
                     {"val_bpc", last_val_bpc}, {"val_loss", last_val_bpc * kLn2}, {"unigram_bpc", unigram}});
    }
    const double wall = examples::seconds_since(t0);

    std::printf("validation %.2f bpc vs unigram entropy %.2f bpc (train %.2f bpc over the last epoch)\n",
                last_val_bpc, unigram, last_train_bpc);

    std::filesystem::create_directories(c.out_dir);
    const std::string ckpt = (std::filesystem::path(c.out_dir) / "char_lstm.safetensors").string();
    save_checkpoint(ckpt, model, trainer, sched.get(), vocab, c);
    std::printf("checkpoint: %s\n", ckpt.c_str());

    if (c.sample_len > 0) {
      Generator sample_gen(flags.seed + 1);
      const std::string text = sample_text(model, vocab, prompt, c.sample_len, c.temperature, compute, sample_gen);
      std::printf("sample (temperature %g, seed %llu):\n----\n%s%s\n----\n", c.temperature,
                  (unsigned long long)flags.seed, prompt.c_str(), text.c_str());
    }

    nlohmann::json summary = {{"event", "summary"}, {"device", device.str()}, {"steps", step},
                              {"final_train_bpc", last_train_bpc},
                              {"final_val_bpc", last_val_bpc}, {"unigram_bpc", unigram},
                              {"parameters", model.num_parameters()}, {"wall_s", wall}, {"train_s", train_time},
                              {"eval_s", eval_time}, {"steps_per_s", double(step) / std::max(train_time, 1e-9)},
                              {"forward_ms", 1e3 * forward_s / double(step)},
                              {"backward_ms", 1e3 * backward_s / double(step)},
                              {"update_ms", 1e3 * update_s / double(step)}};
    examples::add_precision_summary(summary, trainer);
    metrics.write(summary);
    std::printf("%s\n", examples::precision_summary(trainer).c_str());
    std::printf("%lld steps in %.1f s (train %.1f s, %.2f steps/s; eval %.1f s)\n", (long long)step, wall, train_time,
                double(step) / std::max(train_time, 1e-9), eval_time);
    std::printf("per step: forward %.0f ms, backward %.0f ms, clip + update %.0f ms, the rest %.0f ms\n",
                1e3 * forward_s / double(step), 1e3 * backward_s / double(step), 1e3 * update_s / double(step),
                1e3 * (train_time - forward_s - backward_s - update_s) / double(step));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nchar_lstm: %s\n", e.what());
    return 1;
  }
  return 0;
}
