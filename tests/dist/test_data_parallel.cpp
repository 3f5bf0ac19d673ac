// dist/ in one process: the single-process communicator, the unchanged single-process path, the
// vote of gradient scaling (Note [Scales agreed across processes]) against a stand-in for the
// other ranks, and the errors. Several processes: tests/dist/mpi_data_parallel.cpp (label mpi).
#include "support/catch.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator gen(seed);
  auto hidden = std::make_shared<nn::Linear>(8, 32, true, gen);
  auto out = std::make_shared<nn::Linear>(32, 4, true, gen);
  return std::make_shared<nn::Sequential>(hidden, std::make_shared<nn::ReLU>(), out);
}

std::vector<double> train_steps(bool with_dp, const char* precision, const char* loss_scale) {
  auto model = make_mlp(3);
  PrecisionOptions p;
  p.precision = nn::precision_from_name(precision);
  p.loss_scale = parse_loss_scale(loss_scale);
  PrecisionTrainer tr(*model, {.kind = OptimizerKind::adamw, .lr = 1e-2}, p);
  auto dp = std::make_shared<dist::DataParallel>(std::make_shared<dist::SingleProcess>());
  if (with_dp) {
    dp->broadcast(*model);
    tr.set_data_parallel(dp);
  }
  Generator gen(8);
  for (int s = 0; s < 6; ++s) {
    const Tensor x = dp->shard_rows(normal({16, 8}, 0.0, 1.0, gen));
    const Tensor y = dp->shard_rows(from_vector(std::vector<int64_t>(16, s % 4), {16}));
    Tape tape;
    tr.begin_step(tape);
    const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, (*model)(Variable(tr.input(x)))), y);
    tr.backward(tape, loss);
    tr.step();
  }
  std::vector<double> all;
  for (const Variable& v : model->parameters()) {
    const std::vector<double> d = v.data().to_vector();
    all.insert(all.end(), d.begin(), d.end());
  }
  return all;
}

// Stands in for the other ranks: every vote is raised to at least `others`.
struct OtherRanks : ScaleAgreement {
  std::vector<double> others;
  int calls = 0;
  void max_over_processes(std::span<double> votes) override {
    ++calls;
    for (size_t i = 0; i < votes.size() && i < others.size(); ++i) votes[i] = std::max(votes[i], others[i]);
  }
};

}  // namespace

TEST_CASE("dist: one process is the single-process path, bit for bit", "[dist]") {
  for (const char* precision : {"fp32", "fp16", "bf16-pure"})
    for (const char* scale : {"backoff", "gradient"}) {
      CAPTURE(precision, scale);
      CHECK(train_steps(true, precision, scale) == train_steps(false, precision, scale));
    }
}

TEST_CASE("dist: the single process communicator and world()", "[dist]") {
  dist::SingleProcess one;
  CHECK(one.rank() == 0);
  CHECK(one.size() == 1);
  float v[2] = {1.5f, 2.0f};
  one.all_reduce_sum(v, 2, DType::f32);
  CHECK(v[0] == 1.5f);
  if (!dist::launched_by_mpirun()) CHECK(dist::world()->size() == 1);
  if (!dist::built_with_mpi()) CHECK_THROWS_WITH(dist::mpi_world(), Catch::Contains("built without MPI"));
  dist::DataParallel dp(std::make_shared<dist::SingleProcess>());
  CHECK(dp.shard_size(64) == 64);
  CHECK_FALSE(dp.distributed());
  CHECK(dp.identical(make_mlp(1)->parameters()));
}

TEST_CASE("dist: gradient scaling takes the largest bound and the smallest cap of all ranks", "[dist]") {
  // dY ~ 2^-20 with N = 64: this rank alone wants a beta above 1 (underflow), capped by nothing.
  Generator gen(2);
  const Tensor dy = (normal({16, 64}, 0.0, 1.0, gen) * std::ldexp(1.0, -20)).to(DType::f16);
  const Tensor w = normal({64, 32}, 0.0, 0.1, gen).to(DType::f16);
  const ScaledGrad sg{dy, 1.0f};
  const GemmGradQuery q{OpId::linear, &sg, &w, 64};
  GradientScalingRule alone;
  const float own = alone.gemm_beta(q);
  REQUIRE(own > 1.0f);
  const int k_own = int(std::log2(own));

  SECTION("another rank needs more: its bound wins") {
    OtherRanks others;
    others.others = {double(k_own + 3), -1e9, 0.0, 0.0};
    GradientScalingRule rule;
    rule.set_agreement(&others);
    CHECK(rule.gemm_beta(q) == std::ldexp(1.0f, k_own + 3));
    CHECK(others.calls == 1);
  }
  SECTION("another rank would overflow: its cap wins") {
    OtherRanks others;
    others.others = {-1e9, -double(k_own - 2), 0.0, 0.0};
    GradientScalingRule rule;
    rule.set_agreement(&others);
    CHECK(rule.gemm_beta(q) == std::ldexp(1.0f, k_own - 2));
    CHECK(rule.records().back().capped);
  }
  SECTION("another rank saw an inf: beta 1 everywhere") {
    OtherRanks others;
    others.others = {-1e9, -1e9, 1.0, 0.0};
    GradientScalingRule rule;
    rule.set_agreement(&others);
    CHECK(rule.gemm_beta(q) == 1.0f);
  }
  SECTION("nobody else votes: the rank's own choice") {
    OtherRanks others;
    GradientScalingRule rule;
    rule.set_agreement(&others);
    CHECK(rule.gemm_beta(q) == own);
  }
}

TEST_CASE("dist: bad input says what is wrong", "[dist]") {
  dist::DataParallel dp(std::make_shared<dist::SingleProcess>());
  CHECK_THROWS_WITH(dp.shard_size(0), Catch::Contains("does not split"));
  CHECK_THROWS_WITH(dist::DataParallel(nullptr), Catch::Contains("no communicator"));
  // A collective's timeout (Note [Collectives that cannot hang]): PyTorch's CPU default, and a
  // positive number of seconds.
  CHECK(dp.comm().timeout() == 1800.0);
  for (const double bad : {0.0, -1.0, std::nan(""), 1e8})
    CHECK_THROWS_WITH(dp.comm().set_timeout(bad), Catch::Contains("timeout is more than 0"));
  dp.comm().set_timeout(2.5);
  CHECK(dp.comm().timeout() == 2.5);
}
