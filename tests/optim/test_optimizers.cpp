// SGD, Adam, AdamW, RMSprop and Adagrad against values computed from the torch.optim formulas, in
// f64.
//
// Every case starts from p0 = [1, -2, 0.5] and applies the gradients G[0], G[1], G[2]. The
// rows of RMSprop, Adagrad and amsgrad are torch.optim's own (torch 2, float64 tensors,
// foreach=False, printed with repr); the others were evaluated in double precision from
// (PyTorch's definitions):
//   SGD:   d = g + wd p;  buf = d (step 1) | mom buf + (1 - damp) d;  d = nesterov ? d + mom buf : buf;
//          p -= lr d
//   Adam:  g += wd p (Adam) | p *= 1 - lr wd (AdamW);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include "support/catch.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "mixtape.h"
#include "optim/optim.h"

using namespace mixtape;

namespace {

const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const std::vector<std::vector<double>> kG = {{0.1, -0.2, 0.3}, {-0.05, 0.4, 0.2}, {0.3, 0.1, -0.1}};

Variable make_param(DType dt = DType::f64, const std::vector<double>& v = kP0) {
  return Variable(from_vector(v, {int64_t(v.size())}, dt), true, "p");
}

void set_grad(Variable& p, const std::vector<double>& g, float scale = 1.0f, DType dt = DType::f64) {
  std::vector<double> s(g);
  for (double& x : s) x *= scale;
  p.set_grad(ScaledGrad{from_vector(s, {int64_t(s.size())}, dt), scale});
}

void check_close(const Tensor& t, const std::vector<double>& want, double tol = 1e-14) {
  const std::vector<double> got = t.to_vector();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

// Runs the three steps of kG and checks each row.
void run_and_check(Optimizer& opt, Variable& p, const std::vector<std::vector<double>>& rows) {
  for (size_t t = 0; t < rows.size(); ++t) {
    INFO("step " << t + 1);
    set_grad(p, kG[t]);
    opt.step();
    check_close(p.data(), rows[t]);
  }
}

}  // namespace

TEST_CASE("SGD without momentum is p -= lr * (g + wd * p)", "[optim]") {
  Variable p = make_param();
  SGD opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(p, kG[0]);
  opt.step();
  // [1 - 0.1 (0.1 + 0.5), -2 - 0.1 (-0.2 - 1), 0.5 - 0.1 (0.3 + 0.25)]
  check_close(p.data(), {0.94, -1.88, 0.445});
  CHECK(opt.step_count(0) == 1);
}

TEST_CASE("SGD with momentum, dampening and weight decay follows torch.optim.SGD", "[optim]") {
  Variable p = make_param();
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  // Step 1 copies d into the buffer (no dampening), later steps damp.
  run_and_check(opt, p,
                {{0.98899999999999999, -1.978, 0.46950000000000003},
                 {0.98270990000000003, -1.9924198, 0.42362745000000002},
                 {0.94916437109000007, -2.0126044421799998, 0.39096089029500003}});
}

TEST_CASE("SGD with Nesterov momentum follows torch.optim.SGD", "[optim]") {
  Variable p = make_param();
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  run_and_check(opt, p,
                {{0.97909999999999997, -1.9581999999999999, 0.44205},
                 {0.97782970999999996, -2.0126594199999999, 0.37850510500000001},
                 {0.91420976255099995, -2.0426112251019997, 0.35799338480050003}});
  CHECK_THROWS_WITH(SGD({make_param()}, {.lr = 0.1, .nesterov = true}),
                    Catch::Contains("Nesterov momentum needs momentum > 0"));
  CHECK_THROWS_WITH(SGD({make_param()}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("dampening 0"));
}

TEST_CASE("Adam follows torch.optim.Adam, with and without L2 weight decay", "[optim]") {
  SECTION("weight decay 0.1 folded into the gradient") {
    Variable p = make_param();
    Adam opt({p}, {.lr = 0.01, .weight_decay = 0.1});
    run_and_check(opt, p,
                  {{0.99000000050000003, -1.99000000025, 0.49000000028571428},
                   {0.98172048074348517, -1.9873559274772667, 0.48022590098290857},
                   {0.97310736418073973, -1.9839830349213079, 0.47349335008868154}});
  }
  SECTION("other betas and a large eps") {
    Variable p = make_param();
    Adam opt({p}, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3});
    run_and_check(opt, p,
                  {{0.99009900990099009, -1.9900497512437811, 0.49003322259136212},
                   {0.98798391472597646, -1.9941881985184959, 0.4803850128321745},
                   {0.9811190798481827, -1.9987339105527981, 0.47547778761566217}});
  }
}

TEST_CASE("AdamW decays the weights directly, which differs from Adam's L2 penalty", "[optim]") {
  Variable p = make_param();
  AdamW opt({p}, {.lr = 0.01, .weight_decay = 0.1});
  CHECK(std::string(opt.name()) == "AdamW");
  run_and_check(opt, p,
                {{0.98900000099999985, -1.9880000005, 0.4895000003333333},
                 {0.98534763093933908, -1.9896730356541039, 0.47930697943267697},
                 {0.97765727801930657, -1.9918398744602297, 0.47330875374136588}});
  // The same settings through Adam land elsewhere (first row of the Adam case above).
  Variable q = make_param();
  Adam adam({q}, {.lr = 0.01, .weight_decay = 0.1});
  set_grad(q, kG[0]);
  adam.step();
  CHECK(std::abs(q.data().flat_get(0) - 0.98900000099999985) > 1e-4);
  // AdamW's default weight decay is PyTorch's 1e-2; Adam's is 0.
  CHECK(AdamW({make_param()}).weight_decay() == 0.01);
  CHECK(Adam({make_param()}).weight_decay() == 0.0);
}

TEST_CASE("Adam and AdamW with amsgrad follow torch.optim", "[optim]") {
  SECTION("Adam, default betas") {
    Variable p = make_param();
    Adam opt({p}, {.lr = 0.01, .amsgrad = true});
    run_and_check(opt, p,
                  {{0.9900000009999999, -1.9900000005, 0.4900000003333333},
                   {0.9873366309403391, -1.9936610356546038, 0.4802964794330103},
                   {0.980631625651246, -1.9978175474963837, 0.47477756072113186}});
  }
  SECTION("Adam, beta2 0.5 (exp_avg_sq falls, so the maximum matters), L2 decay") {
    Variable p = make_param();
    Adam opt({p}, {.lr = 0.01, .beta2 = 0.5, .weight_decay = 0.1, .amsgrad = true});
    run_and_check(opt, p,
                  {{0.9900000004999999, -1.99000000025, 0.4900000002857143},
                   {0.982619301593818, -1.987437705136587, 0.47964438538857196},
                   {0.9754601547791977, -1.9844863285138585, 0.473310002563105}});
  }
  SECTION("AdamW, beta2 0.5") {
    Variable p = make_param();
    AdamW opt({p}, {.lr = 0.01, .beta2 = 0.5, .weight_decay = 0.1, .amsgrad = true});
    run_and_check(opt, p,
                  {{0.9890000009999999, -1.9880000005, 0.4895000003333333},
                   {0.9854325910592281, -1.989354554593054, 0.47891172724433245},
                   {0.979090384100186, -1.990793901964943, 0.47317711049992617}});
    // Without amsgrad the second step already differs (torch: 0.9850337097097933 for element 0).
    Variable q = make_param();
    AdamW plain({q}, {.lr = 0.01, .beta2 = 0.5, .weight_decay = 0.1});
    for (size_t t = 0; t < 2; ++t) {
      set_grad(q, kG[t]);
      plain.step();
    }
    check_close(q.data(), {0.9850337097097933, -1.989354554593054, 0.4786189485670088});
  }
}

TEST_CASE("RMSprop follows torch.optim.RMSprop", "[optim]") {
  SECTION("defaults") {
    Variable p = make_param();
    RMSprop opt({p}, {.lr = 0.01});
    run_and_check(opt, p,
                  {{0.9000000999999, -1.900000049999975, 0.40000003333332224},
                   {0.9449013851840493, -1.9895323261670683, 0.34433701482604706},
                   {0.851094600216988, -2.0114796739776826, 0.37127475082644074}});
  }
  SECTION("alpha, eps, weight decay and momentum") {
    Variable p = make_param();
    RMSprop opt({p}, {.lr = 0.01, .alpha = 0.9, .eps = 1e-3, .weight_decay = 0.1, .momentum = 0.8});
    run_and_check(opt, p,
                  {{0.9688694407585058, -1.968625262477221, 0.4686603793476507},
                   {0.9364994951276796, -1.9583409107030372, 0.4248641105486003},
                   {0.8822017579311716, -1.9429421398850109, 0.3943753597547477}});
  }
  SECTION("centered, with momentum and weight decay") {
    Variable p = make_param();
    RMSprop opt({p}, {.lr = 0.01, .alpha = 0.9, .weight_decay = 0.05, .momentum = 0.5, .centered = true});
    run_and_check(opt, p,
                  {{0.9666666740740725, -1.96666667037037, 0.46666667008546975},
                   {0.9503877651486543, -1.9730083936835154, 0.4294693581585591},
                   {0.9101393104513958, -1.9762877559497818, 0.4179879109934016}});
  }
  SECTION("centered, alpha 0.6 (the lerp's other branch)") {
    Variable p = make_param();
    RMSprop opt({p}, {.lr = 0.01, .alpha = 0.6, .centered = true});
    run_and_check(opt, p,
                  {{0.9795875896434727, -1.9795875875601399, 0.47958758686569564},
                   {0.9881827652180882, -1.995775684610958, 0.4629762008907591},
                   {0.9684263498442112, -2.0009979076745386, 0.4694394509788324}});
  }
}

TEST_CASE("Adagrad follows torch.optim.Adagrad", "[optim]") {
  SECTION("defaults") {
    Variable p = make_param();
    Adagrad opt({p}, {.lr = 0.1});
    run_and_check(opt, p,
                  {{0.9000000000999999, -1.90000000005, 0.40000000003333336},
                   {0.9447213596099957, -1.9894427191299915, 0.34452998042619504},
                   {0.8510171025061004, -2.011264508148829, 0.3712561046102946}});
  }
  SECTION("lr decay, weight decay, initial accumulator and eps") {
    Variable p = make_param();
    Adagrad opt({p}, {.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.1, .initial_accumulator_value = 0.2, .eps = 1e-3});
    run_and_check(opt, p,
                  {{0.9592583345300075, -1.9334442595673877, 0.4384767729192929},
                   {0.9530485229508385, -1.95512018763191, 0.4122155272857935},
                   {0.9217827969280911, -1.9476901107300884, 0.4169418559680331}});
    // The accumulator started at 0.2: 0.2 + the three squared (decayed) gradients.
    const std::vector<double> sum = opt.state_dict().at("state.0.sum").to_vector();
    CHECK(sum[0] > 0.2);
  }
}

TEST_CASE("a gradient with scale 1024 gives the same update as the unscaled one", "[optim]") {
  const std::vector<double> p0 = {0.3, -1.7, 2.5, 1e-3};
  const std::vector<std::vector<double>> grads = {{0.011, -0.3, 1.7, -2e-5}, {0.2, 0.05, -0.9, 3e-4}};
  auto run = [&](auto make_opt, float scale) {
    Variable p = make_param(DType::f32, p0);
    auto opt = make_opt(p);
    for (const auto& g : grads) {
      set_grad(p, g, scale, DType::f32);
      opt.step();
    }
    return p.data().to_vector();
  };
  auto sgd = [](Variable p) { return SGD({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}); };
  auto adamw = [](Variable p) { return AdamW({p}, {.lr = 1e-2}); };
  // Scaling by a power of two and back is exact, so the updates agree bit for bit.
  CHECK(run(sgd, 1024.0f) == run(sgd, 1.0f));
  CHECK(run(adamw, 1024.0f) == run(adamw, 1.0f));
  CHECK(run(adamw, 1.0f) != std::vector<double>(p0.begin(), p0.end()));
}

TEST_CASE("f16 and bf16 gradients are unscaled into fp32 for fp32 parameters", "[optim]") {
  for (DType gd : {DType::f16, DType::bf16}) {
    Variable p = make_param(DType::f32);
    Variable q = make_param(DType::f32);
    // 0.375 and -0.25 and 0.5 are exact in both formats; scale 2^12.
    set_grad(p, {0.375, -0.25, 0.5}, 4096.0f, gd);
    set_grad(q, {0.375, -0.25, 0.5}, 1.0f, DType::f32);
    SGD a({p}, {.lr = 0.5}), b({q}, {.lr = 0.5});
    a.step();
    b.step();
    CHECK(p.data().to_vector() == q.data().to_vector());
    check_close(p.data(), {0.8125, -1.875, 0.25}, 0.0);
  }
}

TEST_CASE("parameters without a gradient are left alone", "[optim]") {
  Variable a = make_param(), b = make_param();
  Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, kG[0]);
  opt.step();
  check_close(b.data(), kP0, 0.0);
  CHECK(opt.step_count(0) == 1);
  CHECK(opt.step_count(1) == 0);
  CHECK(opt.state_dict().contains("state.0.exp_avg"));
  CHECK_FALSE(opt.state_dict().contains("state.1.exp_avg"));
  // zero_grad drops the gradients: the next step changes nothing.
  opt.zero_grad();
  CHECK_FALSE(a.grad().has_value());
  const std::vector<double> before = a.data().to_vector();
  opt.step();
  CHECK(a.data().to_vector() == before);
  CHECK(opt.step_count(0) == 1);
}

TEST_CASE("parameter groups have their own learning rate and weight decay", "[optim]") {
  Variable a = make_param(), b = make_param();
  SGD opt({a}, {.lr = 0.1});
  CHECK(opt.add_param_group({b}, {.lr = 0.01, .weight_decay = 1.0}) == 1);
  CHECK(opt.num_params() == 2);
  set_grad(a, {1.0, 1.0, 1.0});
  set_grad(b, {1.0, 1.0, 1.0});
  opt.step();
  check_close(a.data(), {0.9, -2.1, 0.4});
  check_close(b.data(), {1.0 - 0.01 * 2.0, -2.0 - 0.01 * (1.0 - 2.0), 0.5 - 0.01 * 1.5});
  opt.set_lr(1, 0.5);
  CHECK(opt.lr(0) == 0.1);
  CHECK(opt.lr(1) == 0.5);
  opt.set_lr(0.2);
  CHECK(opt.lr(1) == 0.2);
  CHECK_THROWS_WITH(opt.add_param_group({a}), Catch::Contains("more than one group"));
  CHECK_THROWS_WITH(opt.lr(2), Catch::Contains("no parameter group 2"));
  CHECK_THROWS_WITH(opt.set_lr(-1.0), Catch::Contains("learning rate"));
  CHECK_THROWS_WITH(SGD({}, {}), Catch::Contains("at least one parameter"));
}

TEST_CASE("optimizer state dicts resume training exactly", "[optim]") {
  const std::vector<double> p0 = {0.3, -1.7, 2.5};
  auto run = [&](Optimizer& opt, Variable& p, size_t from, size_t to) {
    for (size_t t = from; t < to; ++t) {
      set_grad(p, kG[t], 1.0f, DType::f32);
      opt.step();
    }
  };
  auto check_resume = [&](auto make_opt) {
    Variable p = make_param(DType::f32, p0);
    auto ref = make_opt(p);
    run(ref, p, 0, 2);
    // Save through a safetensors file under a prefix, as a checkpoint does.
    const std::string path = (std::filesystem::temp_directory_path() / "mixtape_optim_state.safetensors").string();
    TensorDict ckpt;
    ckpt.merge("model.", TensorDict{{{"p", p.data()}}, {}});
    ckpt.merge("optim.", ref.state_dict());
    save_safetensors(path, ckpt);

    const TensorDict loaded = load_safetensors(path);
    std::remove(path.c_str());
    Variable q = make_param(DType::f32, loaded.at("model.p").to_vector());
    auto resumed = make_opt(q);
    resumed.set_lr(123.0);  // overwritten by the load
    resumed.load_state_dict(loaded.sub("optim."));
    CHECK(resumed.lr() == ref.lr());
    CHECK(resumed.step_count(0) == 2);
    run(ref, p, 2, 3);
    run(resumed, q, 2, 3);
    CHECK(q.data().to_vector() == p.data().to_vector());
    // In memory, and the loaded state is a copy: stepping one does not move the other.
    Variable r = make_param(DType::f32, q.data().to_vector());
    auto twin = make_opt(r);
    twin.load_state_dict(resumed.state_dict());
    run(twin, r, 0, 1);
    run(resumed, q, 0, 1);
    CHECK(q.data().to_vector() == r.data().to_vector());
  };
  check_resume([](Variable p) { return SGD({p}, {.lr = 0.05, .momentum = 0.9, .nesterov = true}); });
  check_resume([](Variable p) { return Adam({p}, {.lr = 0.01, .beta1 = 0.8, .weight_decay = 0.1}); });
  check_resume([](Variable p) { return AdamW({p}, {.lr = 0.01}); });
  check_resume([](Variable p) { return AdamW({p}, {.lr = 0.01, .beta2 = 0.5, .amsgrad = true}); });
  check_resume([](Variable p) { return RMSprop({p}, {.lr = 0.01, .alpha = 0.9, .momentum = 0.5, .centered = true}); });
  check_resume([](Variable p) { return RMSprop({p}, {.lr = 0.01}); });
  check_resume([](Variable p) { return Adagrad({p}, {.lr = 0.1, .lr_decay = 0.5, .initial_accumulator_value = 0.2}); });
}

TEST_CASE("the state dicts of RMSprop, Adagrad and amsgrad hold every buffer by PyTorch's names", "[optim]") {
  Variable p = make_param();
  RMSprop rms({p}, {.lr = 0.01, .momentum = 0.9, .centered = true});
  set_grad(p, kG[0]);
  rms.step();
  const TensorDict r = rms.state_dict();
  CHECK(r.meta("optimizer") == "RMSprop");
  CHECK(r.meta("state.0.step") == "1");
  CHECK(r.meta("centered") == "true");
  for (const char* b : {"state.0.square_avg", "state.0.momentum_buffer", "state.0.grad_avg"})
    CHECK(r.at(b).shape() == Shape{3});
  // The hyper-parameters come with the state, as SGD's momentum does: a plain RMSprop becomes a
  // centered one with momentum, and its next step is the saved optimizer's.
  Variable q = make_param();
  RMSprop plain({q}, {.lr = 0.01});
  plain.load_state_dict(r);
  CHECK(plain.options().centered);
  CHECK(plain.options().momentum == 0.9);

  Variable a = make_param();
  Adam ams({a}, {.lr = 0.01, .amsgrad = true});
  set_grad(a, kG[0]);
  ams.step();
  const TensorDict d = ams.state_dict();
  CHECK(d.meta("amsgrad") == "true");
  // max(0, v) = v after one step
  CHECK(d.at("state.0.max_exp_avg_sq").to_vector() == d.at("state.0.exp_avg_sq").to_vector());
  TensorDict old = d;  // saved before amsgrad existed: no "amsgrad" entry, no maximum
  old.metadata.erase("amsgrad");
  Adam other({make_param()}, {.lr = 0.01});
  CHECK_THROWS_WITH(other.load_state_dict(old), Catch::Contains("unexpected tensor 'state.0.max_exp_avg_sq'"));

  Variable g = make_param();
  Adagrad ada({g}, {.lr = 0.1, .initial_accumulator_value = 0.5});
  set_grad(g, kG[0]);
  ada.step();
  const std::vector<double> sum = ada.state_dict().at("state.0.sum").to_vector();
  CHECK(sum == std::vector<double>{0.5 + 0.1 * 0.1, 0.5 + 0.2 * 0.2, 0.5 + 0.3 * 0.3});
}

TEST_CASE("optimizer load_state_dict rejects state from elsewhere", "[optim]") {
  Variable p = make_param();
  Adam adam({p}, {.lr = 0.1});
  set_grad(p, kG[0]);
  adam.step();
  const TensorDict saved = adam.state_dict();
  CHECK(saved.meta("optimizer") == "Adam");
  CHECK(saved.meta("state.0.step") == "1");
  CHECK(saved.meta("param_groups.0.lr") == "0.1");

  Variable q = make_param();
  SGD sgd({q}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state_dict(saved), Catch::Contains("saved by optimizer 'Adam'"));

  Variable big(zeros({4}, DType::f64), true);
  Adam other({big}, {.lr = 0.1});
  CHECK_THROWS_WITH(other.load_state_dict(saved), Catch::Contains("state.0.exp_avg") && Catch::Contains("[4]"));
  CHECK(other.step_count(0) == 0);  // nothing changed

  TensorDict missing = saved;
  missing.tensors.pop_back();
  Adam third({make_param()}, {.lr = 0.1});
  CHECK_THROWS_WITH(third.load_state_dict(missing), Catch::Contains("missing tensor 'state.0.exp_avg_sq'"));
  TensorDict extra = saved;
  extra.add("state.0.bogus", zeros({3}, DType::f64));
  CHECK_THROWS_WITH(third.load_state_dict(extra), Catch::Contains("unexpected tensor 'state.0.bogus'"));
  TensorDict bad = saved;
  bad.set_meta("beta1", "0.9x");
  CHECK_THROWS_WITH(third.load_state_dict(bad), Catch::Contains("'beta1' = '0.9x' is not a number"));
  TensorDict stray = saved;
  stray.set_meta("state.7.step", "1");
  CHECK_THROWS_WITH(third.load_state_dict(stray), Catch::Contains("'state.*' metadata entries"));
  Adam two_groups({make_param()}, {.lr = 0.1});
  two_groups.add_param_group({make_param()});
  CHECK_THROWS_WITH(two_groups.load_state_dict(saved), Catch::Contains("1 parameter groups"));
}

TEST_CASE("optimizer load_state_dict checks the dtype of every state tensor", "[optim]") {
  Variable p = make_param(DType::f64);
  Adam adam({p}, {.lr = 0.1});
  set_grad(p, kG[0]);
  adam.step();
  const TensorDict saved = adam.state_dict();  // f64 moments

  Variable q = make_param(DType::f32);
  Adam other({q}, {.lr = 0.1});
  CHECK_THROWS_WITH(other.load_state_dict(saved),
                    Catch::Contains("'state.0.exp_avg'") && Catch::Contains("f64") && Catch::Contains("f32"));
  CHECK(other.step_count(0) == 0);  // nothing changed
  // A step still works from the old (empty) state.
  set_grad(q, kG[0], 1.0f, DType::f32);
  other.step();
  CHECK(other.step_count(0) == 1);
}

TEST_CASE("optimizers validate their hyper-parameters and parameters", "[optim]") {
  CHECK_THROWS_WITH(Adam({make_param()}, {.beta1 = 1.0}), Catch::Contains("beta1 must be in [0, 1)"));
  CHECK_THROWS_WITH(Adam({make_param()}, {.eps = -1.0}), Catch::Contains("eps"));
  CHECK_THROWS_WITH(SGD({make_param()}, {.lr = std::nan("")}), Catch::Contains("learning rate"));
  CHECK_THROWS_WITH(AdamW({make_param()}, {.weight_decay = -0.1}), Catch::Contains("AdamW: weight decay"));
  CHECK_THROWS_WITH(RMSprop({make_param()}, {.alpha = 1.0}),
                    Catch::Contains("RMSprop: alpha must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(RMSprop({make_param()}, {.alpha = -0.5}), Catch::Contains("alpha"));
  CHECK_THROWS_WITH(RMSprop({make_param()}, {.lr = -1.0}), Catch::Contains("RMSprop: learning rate"));
  CHECK_THROWS_WITH(RMSprop({make_param()}, {.eps = -1.0}), Catch::Contains("RMSprop: eps"));
  CHECK_THROWS_WITH(RMSprop({make_param()}, {.momentum = -0.1}), Catch::Contains("RMSprop: momentum"));
  CHECK_THROWS_WITH(Adagrad({make_param()}, {.lr_decay = -1.0}), Catch::Contains("Adagrad: lr_decay"));
  CHECK_THROWS_WITH(Adagrad({make_param()}, {.initial_accumulator_value = -1.0}),
                    Catch::Contains("Adagrad: initial_accumulator_value must be finite and >= 0, got -1"));
  CHECK_THROWS_WITH(Adagrad({make_param()}, {.eps = std::nan("")}), Catch::Contains("Adagrad: eps"));
  CHECK_THROWS_WITH(Adagrad({make_param()}, {.weight_decay = -1.0}), Catch::Contains("Adagrad: weight decay"));
  Variable p = make_param();
  CHECK_THROWS_WITH(SGD({p, p}, {}), Catch::Contains("twice"));
  // A gradient of the wrong dtype for the parameter is reported by the update kernel.
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(ScaledGrad{zeros({3}, DType::f32), 1.0f});
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("sgd_update_") && Catch::Contains("must be f64"));
}
