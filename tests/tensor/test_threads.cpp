// Note [Deterministic threads] (tensor/cpu/parallel.h) and Note [Deterministic GEMM]
// (tensor/cpu/gemm_blocks.h): a few training steps of a CNN give the same weights, bit for bit,
// with 1 and with 2 threads, in every precision policy, and on every vector path of the GEMM
// and the conversions (Note [Own GEMM], Note [Vector conversions]). The model is sized so that every split
// path runs: elementwise and batch-norm kernels above the grain, GEMMs split by columns and by K.
// Also: the host caching allocator makes no new allocations once a step has run.
#include "support/catch.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mixtape.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"

using namespace mixtape;

namespace {

std::shared_ptr<nn::Sequential> make_model(Generator& gen) {
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(32),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(32 * 7 * 7, 64, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.3, gen), std::make_shared<nn::Linear>(64, 10, true, gen));
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> b(size_t(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

// Every parameter and buffer of the model after `steps` steps with `threads` threads, and the
// losses on the way.
struct Result {
  std::vector<std::vector<uint8_t>> tensors;
  std::vector<double> losses;
};

const OptimizerSpec kAdamW{.kind = OptimizerKind::adamw, .lr = 1e-3, .weight_decay = 1e-4};

Result train_steps(int threads, const char* precision, const char* loss_scale, int steps,
                   UpdateRounding rounding = UpdateRounding::stochastic, const OptimizerSpec& spec = kAdamW) {
  set_num_threads(threads);
  Generator gen(3);
  auto model = make_model(gen);
  PrecisionOptions opt;
  opt.precision = nn::precision_from_name(precision);
  opt.loss_scale = parse_loss_scale(loss_scale);
  opt.seed = 11;
  opt.rounding = rounding;
  PrecisionTrainer trainer(*model, spec, opt);
  Generator data_gen(5);
  const Tensor x = normal({64, 1, 28, 28}, 0.0, 1.0, data_gen);
  std::vector<int64_t> labels(64);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i * 7 % 10);
  const Tensor y = from_vector(labels, {64});
  Result r;
  for (int s = 0; s < steps; ++s) {
    Tape tape;
    trainer.begin_step(tape);
    const Variable logits = (*model)(Variable(trainer.input(x)));
    const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), y);
    r.losses.push_back(loss.item());
    trainer.backward(tape, loss);
    trainer.step();
  }
  for (const Variable& p : model->parameters()) r.tensors.push_back(bytes_of(p.data()));
  for (const auto& [name, b] : model->named_buffers()) r.tensors.push_back(bytes_of(b));
  return r;
}

struct RestoreThreads {
  int n = num_threads();
  ~RestoreThreads() { set_num_threads(n); }
};

}  // namespace

TEST_CASE("training gives the same bits with 1 and 2 threads", "[threads]") {
  RestoreThreads restore;
  struct Policy {
    const char* precision;
    const char* loss_scale;
    UpdateRounding rounding = UpdateRounding::stochastic;
    OptimizerSpec spec = kAdamW;
  };
  // The optimizer updates split over the threads too (the 16-bit ones with a Philox word or a
  // Kahan compensation per element), every rule with every buffer it can keep.
  const OptimizerSpec rmsprop{
      .kind = OptimizerKind::rmsprop, .lr = 1e-3, .weight_decay = 1e-4, .momentum = 0.9, .centered = true};
  const OptimizerSpec adagrad{.kind = OptimizerKind::adagrad,
                              .lr = 1e-2,
                              .weight_decay = 1e-4,
                              .lr_decay = 0.1,
                              .initial_accumulator_value = 0.1};
  const OptimizerSpec amsgrad{.kind = OptimizerKind::adamw, .lr = 1e-3, .weight_decay = 1e-4, .amsgrad = true};
  const Policy policies[] = {{"fp32", "none"},
                             {"bf16", "none"},
                             {"fp16", "backoff"},
                             {"bf16-pure", "none"},
                             {"bf16-pure", "none", UpdateRounding::kahan},
                             {"bf16-pure", "none", UpdateRounding::nearest},
                             {"fp32", "none", UpdateRounding::stochastic, rmsprop},
                             {"bf16", "none", UpdateRounding::stochastic, adagrad},
                             {"fp16", "backoff", UpdateRounding::stochastic, amsgrad},
                             {"bf16-pure", "none", UpdateRounding::stochastic, rmsprop},
                             {"bf16-pure", "none", UpdateRounding::kahan, rmsprop},
                             {"bf16-pure", "none", UpdateRounding::stochastic, adagrad},
                             {"bf16-pure", "none", UpdateRounding::kahan, adagrad},
                             {"bf16-pure", "none", UpdateRounding::stochastic, amsgrad}};
  for (const Policy& p : policies) {
    INFO(p.precision << " loss scale " << p.loss_scale << " rounding " << int(p.rounding) << " "
                     << optimizer_kind_name(p.spec.kind) << (p.spec.amsgrad ? " amsgrad" : ""));
    const Result one = train_steps(1, p.precision, p.loss_scale, 3, p.rounding, p.spec);
    const Result two = train_steps(2, p.precision, p.loss_scale, 3, p.rounding, p.spec);
    CHECK(one.losses == two.losses);
    REQUIRE(one.tensors.size() == two.tensors.size());
    size_t differ = 0;
    for (size_t i = 0; i < one.tensors.size(); ++i) differ += one.tensors[i] != two.tensors[i];
    CHECK(differ == 0);
  }
}

TEST_CASE("training gives the same bits on every vector path", "[threads]") {
  const std::string saved_gemm = cpu::gemm_path(), saved_convert = cpu::conversion_path();
  const std::vector<std::string> gemm_paths = cpu::gemm_paths(), convert_paths = cpu::conversion_paths();
  for (const char* precision : {"fp32", "bf16", "fp16", "bf16-pure"}) {
    cpu::set_gemm_path("scalar");
    cpu::set_conversion_path("scalar");
    const Result reference = train_steps(2, precision, "none", 2);
    for (size_t i = 1; i < gemm_paths.size(); ++i) {
      // Each GEMM path with the widest conversion path it can pair with (avx512bf16 with avx512).
      cpu::set_gemm_path(gemm_paths[i]);
      cpu::set_conversion_path(convert_paths[std::min(i, convert_paths.size() - 1)]);
      INFO(precision << " on GEMM path " << cpu::gemm_path() << ", conversion path " << cpu::conversion_path());
      const Result r = train_steps(2, precision, "none", 2);
      CHECK(r.losses == reference.losses);
      CHECK(r.tensors == reference.tensors);
    }
  }
  cpu::set_gemm_path(saved_gemm);
  cpu::set_conversion_path(saved_convert);
  WARN("vector paths compared with the scalar reference: " << gemm_paths.size() - 1 << " GEMM paths");
}

TEST_CASE("steady-state training allocates no new host buffers after its first step", "[threads]") {
  train_steps(2, "bf16", "none", 2);  // warm the cache with this model's sizes
  const AllocatorStats before = host_allocator_stats();
  train_steps(2, "bf16", "none", 2);
  const AllocatorStats after = host_allocator_stats();
  CHECK(after.requests > before.requests);
  CHECK(after.real_allocs == before.real_allocs);
}
