// train/loop.h: the training loop. What it trains equals a hand-written loop, a run saved and
// resumed equals one uninterrupted run bit for bit, the hooks see each step once and in order,
// and divergence and bad checkpoints are refused with messages that say where.
#include "support/catch.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

// A regression onto a fixed random target: 48 rows, batches of 8 (6 steps an epoch).
struct Setup {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<PrecisionTrainer> trainer;
  std::unique_ptr<LRScheduler> sched;
  std::unique_ptr<data::DataLoader> loader;
  Generator noise{17};  // drawn per step: an input offset, as a GAN's noise or a text's windows

  explicit Setup(const char* precision = "bf16", const char* loss_scale = "none") {
    Generator gen(3);
    auto hidden = std::make_shared<nn::Linear>(4, 16, true, gen);
    auto out = std::make_shared<nn::Linear>(16, 2, true, gen);
    model = std::make_shared<nn::Sequential>(hidden, std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Dropout>(0.25, uint64_t(5)), out);
    PrecisionOptions p;
    p.precision = nn::precision_from_name(precision);
    p.loss_scale = parse_loss_scale(loss_scale);
    trainer = std::make_unique<PrecisionTrainer>(*model, OptimizerSpec{.kind = OptimizerKind::adamw, .lr = 1e-2}, p);
    sched = std::make_unique<LRScheduler>(trainer->optimizer(), CosineAnnealingLR(12));
    Generator data_gen(9);
    const Tensor x = normal({48, 4}, 0.0, 1.0, data_gen), y = normal({48, 2}, 0.0, 1.0, data_gen);
    loader = std::make_unique<data::DataLoader>(data::TensorDataset({x, y}),
                                                data::LoaderOptions{.batch_size = 8, .shuffle = true, .seed = 4});
  }

  Variable loss(const Tensor& x, const Tensor& y, const Tensor& offset) {
    const Variable pred = (*model)(Variable(trainer->input(x + offset)));
    return mse_loss(nn::fp32_input(OpId::mse_loss, pred), Variable(y));
  }

  std::vector<Tensor> parameters() const {
    std::vector<Tensor> ps;
    for (const auto& [name, t] : model->state_dict()) ps.push_back(t.clone());
    return ps;
  }
};

// What the hooks saw.
struct Seen {
  std::vector<int64_t> tallied, events;
  std::vector<double> losses;
  std::vector<std::pair<int, bool>> epochs;
};

// A loop over `s` for 2 epochs, stopping at max_steps, with every hook recording into `seen`.
train::TrainLoop make_loop(Setup& s, Seen& seen, int64_t max_steps, int64_t log_every = 4) {
  train::TrainLoop loop(
      {.epochs = 2, .steps_per_epoch = 6, .max_steps = max_steps, .log_every = log_every, .progress = false},
      {{.model = s.model.get(), .trainer = s.trainer.get(), .sched = s.sched.get(), .loss_column = 0}});
  loop.add_loader(*s.loader);
  loop.add_draws("noise", s.noise, [&s] { return std::vector<Tensor>{normal({8, 4}, 0.0, 0.1, s.noise)}; });
  loop.objective = [&s](const train::TrainLoop::Batch& b, const train::StepInfo&) -> train::Objective {
    return {s.loss(b[0], b[1], b[2]), {}};
  };
  loop.tally = [&seen](const double* v, int64_t step) {
    seen.tallied.push_back(step);
    seen.losses.push_back(*v);
  };
  loop.step_event = [&seen](const train::StepInfo& info) -> std::optional<nlohmann::json> {
    seen.events.push_back(info.step);
    return nlohmann::json{{"event", "step"}, {"step", info.step}};
  };
  loop.epoch_end = [&seen](int epoch, bool complete) { seen.epochs.emplace_back(epoch, complete); };
  return loop;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mixtape_test_loop_" + name)).string();
}

}  // namespace

TEST_CASE("train: the loop trains what a hand-written loop trains, bit for bit", "[train]") {
  Setup by_loop, by_hand;
  Seen seen;
  train::Metrics metrics;
  train::TrainLoop loop = make_loop(by_loop, seen, 0);
  loop.resume(nullptr, {});
  loop.run(metrics);
  CHECK(loop.steps() == 12);

  std::vector<double> losses;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    by_hand.loader->start_epoch(epoch, 0);
    while (std::optional<data::Batch> b = by_hand.loader->next()) {
      const Tensor offset = normal({8, 4}, 0.0, 0.1, by_hand.noise);
      Tape tape;
      by_hand.trainer->begin_step(tape);
      const Variable loss = by_hand.loss((*b)[0], (*b)[1], offset);
      by_hand.trainer->backward(tape, loss);
      by_hand.trainer->step();
      by_hand.sched->step();
      losses.push_back(loss.item());
    }
  }
  CHECK(seen.losses == losses);
  const std::vector<Tensor> a = by_loop.parameters(), b = by_hand.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].to_vector() == b[i].to_vector());
}

TEST_CASE("train: each step is tallied once and in order, events on logging steps, epochs reported", "[train]") {
  Setup s;
  Seen seen;
  train::Metrics metrics;
  train::TrainLoop loop = make_loop(s, seen, 9);  // stops inside the second epoch
  loop.resume(nullptr, {});
  loop.run(metrics);
  CHECK(loop.steps() == 9);
  CHECK(loop.epochs_in_run() == 2);
  CHECK(seen.tallied == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(seen.events == std::vector<int64_t>{4, 8});
  CHECK(seen.epochs == std::vector<std::pair<int, bool>>{{1, true}, {2, false}});
}

TEST_CASE("train: a run saved and resumed ends where one uninterrupted run ends, bit for bit", "[train]") {
  const std::string path = temp_path("resume.safetensors");
  std::filesystem::remove(path);
  const train::RunIdentity id = {{"program", "test_loop"}};
  Setup whole;
  Seen seen_whole;
  train::Metrics metrics;
  {
    train::TrainLoop loop = make_loop(whole, seen_whole, 0);
    loop.resume(nullptr, id);
    loop.run(metrics);
  }
  for (const int64_t k : {4, 6, 12}) {  // inside an epoch, at its end, at the run's end
    CAPTURE(k);
    std::filesystem::remove(path);
    const train::Checkpointer checkpoint(path, 0, true);
    Setup first;
    Seen seen_first;
    train::TrainLoop part1 = make_loop(first, seen_first, k);
    part1.resume(&checkpoint, id);
    part1.run(metrics);

    Setup second;  // a fresh process: the same construction, then the checkpoint
    Seen seen_second;
    train::TrainLoop part2 = make_loop(second, seen_second, 0);
    part2.resume(&checkpoint, id);
    CHECK(part2.steps() == k);
    part2.run(metrics);
    CHECK(part2.steps() == 12);
    std::vector<double> losses = seen_first.losses;
    losses.insert(losses.end(), seen_second.losses.begin(), seen_second.losses.end());
    CHECK(losses == seen_whole.losses);
    const std::vector<Tensor> a = whole.parameters(), b = second.parameters();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].to_vector() == b[i].to_vector());
    CHECK(second.noise.offset() == whole.noise.offset());
  }
  std::filesystem::remove(path);
}

// A running sum a program keeps over an epoch, saved with the checkpoint (as the examples' sums).
void keep_sum(train::TrainLoop& loop, double& sum, Seen& seen) {
  loop.tally = [&sum](const double* v, int64_t) { sum += *v; };
  loop.epoch_end = [&sum, &seen](int epoch, bool complete) {
    seen.epochs.emplace_back(epoch, complete);
    if (complete) sum = 0.0;
  };
  loop.save_state = [&sum](TensorDict& ckpt, bool epoch_done) {
    ckpt.set_meta("progress.sum", state_io::format(epoch_done ? 0.0 : sum));
  };
  loop.load_state = [&sum](const TensorDict& ckpt) { sum = train::progress_double(ckpt, "sum"); };
}

TEST_CASE("train: resuming a finished run trains nothing, reports its last epoch again and saves the same state",
          "[train]") {
  const std::string path = temp_path("finished.safetensors");
  const train::RunIdentity id = {{"program", "test_loop"}};
  const train::Checkpointer checkpoint(path, 0, true);
  train::Metrics metrics;
  for (const int64_t stop : {9, 12}) {  // inside the second epoch, and at its end
    CAPTURE(stop);
    std::filesystem::remove(path);
    Setup first;
    Seen seen_first;
    double sum = 0.0;
    train::TrainLoop part1 = make_loop(first, seen_first, stop);
    keep_sum(part1, sum, seen_first);
    part1.resume(&checkpoint, id);
    part1.run(metrics);
    const TensorDict saved = load_safetensors(path);
    CHECK((saved.meta("progress.sum") == "0") == (stop == 12));

    Setup again;
    Seen seen_again;
    double sum_again = 0.0;
    train::TrainLoop part2 = make_loop(again, seen_again, stop);
    keep_sum(part2, sum_again, seen_again);
    CHECK(part2.resume(&checkpoint, id));
    part2.run(metrics);
    CHECK(seen_again.losses.empty());
    CHECK(seen_again.epochs == std::vector<std::pair<int, bool>>{{2, stop == 12}});
    CHECK(load_safetensors(path).metadata == saved.metadata);
  }
  std::filesystem::remove(path);
}

TEST_CASE("train: a checkpoint whose position does not fit the run is refused", "[train]") {
  const std::string path = temp_path("position.safetensors");
  const train::RunIdentity id = {{"program", "test_loop"}};
  Setup s;
  Seen seen;
  train::TrainLoop loop = make_loop(s, seen, 0);
  TensorDict ckpt = loop.checkpoint(false);
  ckpt.set_meta("progress.step", "3");
  ckpt.set_meta("progress.batch", "5");  // step 3 is batch 3 of epoch 1
  train::Checkpointer(path, 0, true).save(ckpt, id);
  const train::Checkpointer checkpoint(path, 0, true);
  CHECK_THROWS_WITH(loop.resume(&checkpoint, id),
                    Catch::Contains("position (step 3, epoch 1, batch 5) does not fit this run's 6 batches per epoch"));
  std::filesystem::remove(path);
}

TEST_CASE("train: a checkpoint holding a tensor no part of the run reads is refused, naming it", "[train]") {
  const std::string path = temp_path("unread.safetensors");
  const train::RunIdentity id = {{"program", "test_loop"}};
  Setup s;
  Seen seen;
  train::TrainLoop loop = make_loop(s, seen, 0);
  loop.save_state = [](TensorDict& ckpt, bool) { ckpt.add("vocab", zeros({3}, DType::i64)); };  // the program's own
  const TensorDict good = loop.checkpoint(false);
  TensorDict bad = good;
  bad.add("traeirn.fp8.site0.grad", zeros({4}));  // a misspelled prefix: nobody would read it
  const train::Checkpointer checkpoint(path, 0, true);
  checkpoint.save(bad, id);
  CHECK_THROWS_WITH(loop.resume(&checkpoint, id),
                    Catch::Contains("holds the tensor 'traeirn.fp8.site0.grad' f32[4], which no part of this run "
                                    "reads (it reads model.*, rng.*, trainer.*, sched.*, vocab)"));
  checkpoint.save(good, id);
  CHECK(loop.resume(&checkpoint, id));
  std::filesystem::remove(path);
}

TEST_CASE("train: a non-finite loss that no loss scaler skipped stops the run, naming the step", "[train]") {
  Setup s("fp32", "none");
  Seen seen;
  train::Metrics metrics;
  train::TrainLoop loop = make_loop(s, seen, 0);
  loop.objective = [&s](const train::TrainLoop::Batch& b, const train::StepInfo& info) -> train::Objective {
    const Variable loss = s.loss(b[0], b[1], b[2]);
    return {info.step == 3 ? loss * std::nan("") : loss, {}};
  };
  loop.resume(nullptr, {});
  CHECK_THROWS_WITH(loop.run(metrics), Catch::Contains("the training loss became nan at step 3"));
}

TEST_CASE("train: a step the loss scaler skipped is not divergence", "[train]") {
  Setup s("fp16", "backoff");
  Seen seen;
  train::Metrics metrics;
  train::TrainLoop loop = make_loop(s, seen, 0);
  loop.objective = [&s](const train::TrainLoop::Batch& b, const train::StepInfo& info) -> train::Objective {
    const Variable loss = s.loss(b[0], b[1], b[2]);
    return {info.step == 3 ? loss * INFINITY : loss, {}};  // inf gradients: the scaler skips the step
  };
  loop.resume(nullptr, {});
  loop.run(metrics);
  CHECK(s.trainer->skipped() == 1);
  CHECK(std::isinf(seen.losses[2]));
}

TEST_CASE("train: a loop without a step, or with both forms, says so", "[train]") {
  Setup s;
  Seen seen;
  train::Metrics metrics;
  train::TrainLoop loop = make_loop(s, seen, 0);
  loop.step = [](const train::TrainLoop::Batch&, const train::StepInfo&) { return std::vector<Tensor>{}; };
  CHECK_THROWS_WITH(loop.run(metrics), Catch::Contains("either an objective or a step"));
  CHECK_THROWS_WITH(
      train::TrainLoop({.epochs = 1, .steps_per_epoch = 0}, {{.model = s.model.get(), .trainer = s.trainer.get()}}),
      Catch::Contains("make no run"));
}
