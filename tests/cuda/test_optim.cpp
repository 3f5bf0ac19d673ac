// Fused optimizer updates on the GPU against the CPU kernels (tensor/cpu/optim.cpp), several
// steps in a row: every parameter and state element must be bit-identical after every step
// (Note [Bit-identical updates] in cuda/optim.cu), including the 16-bit rules with nearest,
// stochastic (same Philox words) and Kahan rounding.
#include "tests/cuda/cuda_test.h"

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

// Ragged sizes, 1-D and 2-D (the strided layout of a 2-D tensor is transposed in memory).
const std::vector<Shape>& param_shapes() {
  static const std::vector<Shape> shapes = {{1}, {7}, {3, 11}, {257}, {10, 100}, {33, 17}};
  return shapes;
}

void require_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  require_bit_identical(host_view(gpu), cpu, what);
}

}  // namespace

TEST_CASE("cuda sgd_update is bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  struct Hyper {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Hyper> hypers = {{0.0, 0.0, 0.0, false},  {0.0, 0.0, 1e-2, false}, {0.9, 0.0, 0.0, false},
                                     {0.9, 0.1, 5e-4, false}, {0.9, 0.0, 1e-2, true},  {0.5, 0.0, 0.0, true}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32})
    for (const Shape& s : param_shapes())
      for (const Hyper& h : hypers)
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, dt, seed);
          // A buffer with junk in it: step 1 must ignore its old contents.
          Tensor b_c = random(s, dt, seed + 1);
          Tensor p_g = gpu_input(p_c, strided), b_g = gpu_input(b_c, strided);
          Tensor none_c, none_g;
          Tensor& bc = h.momentum != 0.0 ? b_c : none_c;
          Tensor& bg = h.momentum != 0.0 ? b_g : none_g;
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
            sgd_update_(p_c, g, bc, 0.05, h.momentum, h.dampening, h.weight_decay, h.nesterov, step);
            sgd_update_(p_g, gpu_input(g, strided), bg, 0.05, h.momentum, h.dampening, h.weight_decay, h.nesterov,
                        step);
            const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                     " momentum " + std::to_string(h.momentum) + " dampening " +
                                     std::to_string(h.dampening) + " wd " + std::to_string(h.weight_decay) +
                                     (h.nesterov ? " nesterov" : "") + " step " + std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            if (h.momentum != 0.0) require_same(b_g, b_c, what + ": momentum buffer");
          }
        }
}

TEST_CASE("cuda adam_update and adamw are bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  struct Hyper {
    double beta1, beta2, weight_decay;
    bool decoupled;
  };
  // beta1 = 0.3 makes 1 - beta1 >= 0.5: the other branch of the lerp.
  const std::vector<Hyper> hypers = {{0.9, 0.999, 0.0, false}, {0.9, 0.999, 1e-2, false}, {0.9, 0.99, 0.0, true},
                                     {0.9, 0.999, 1e-1, true}, {0.3, 0.9, 1e-2, false},   {0.3, 0.9, 1e-2, true}};
  uint64_t seed = 2000;
  for (DType dt : {DType::f32})
    for (const Shape& s : param_shapes())
      for (const Hyper& h : hypers)
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, dt, seed), m_c = zeros(s, dt), v_c = zeros(s, dt);
          Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
            adam_update_(p_c, g, m_c, v_c, 1e-2, h.beta1, h.beta2, 1e-8, h.weight_decay, h.decoupled, step);
            adam_update_(p_g, gpu_input(g, strided), m_g, v_g, 1e-2, h.beta1, h.beta2, 1e-8, h.weight_decay,
                         h.decoupled, step);
            const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                     (h.decoupled ? " adamw" : " adam") + " beta1 " + std::to_string(h.beta1) + " wd " +
                                     std::to_string(h.weight_decay) + " step " + std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            require_same(m_g, m_c, what + ": exp_avg");
            require_same(v_g, v_c, what + ": exp_avg_sq");
          }
        }
}

TEST_CASE("cuda adam_update with amsgrad is bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 2500;
  for (const Shape& s : param_shapes())
    for (bool decoupled : {false, true})
      for (bool strided : {false, true}) {
        ++seed;
        const DType dt = DType::f32;
        Tensor p_c = random(s, dt, seed), m_c = zeros(s, dt), v_c = zeros(s, dt), x_c = zeros(s, dt);
        Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
        Tensor x_g = gpu_input(x_c, strided);
        for (int64_t step = 1; step <= 5; ++step) {
          // Gradients that shrink from step to step: exp_avg_sq falls (beta2 0.5) and the maximum holds.
          const double range = 1.0 / double(step * step);
          const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -range, range);
          adam_update_(p_c, g, m_c, v_c, 1e-2, 0.9, 0.5, 1e-8, 1e-2, decoupled, step, nullptr, &x_c);
          adam_update_(p_g, gpu_input(g, strided), m_g, v_g, 1e-2, 0.9, 0.5, 1e-8, 1e-2, decoupled, step, nullptr,
                       &x_g);
          const std::string what = shape_str(s) + " " + layout_name(strided) + (decoupled ? " adamw" : " adam") +
                                   " amsgrad step " + std::to_string(step);
          require_same(p_g, p_c, what + ": param");
          require_same(m_g, m_c, what + ": exp_avg");
          require_same(v_g, v_c, what + ": exp_avg_sq");
          require_same(x_g, x_c, what + ": max_exp_avg_sq");
        }
        CHECK(on_cpu(x_g).to_vector() != on_cpu(v_g).to_vector());  // the maximum is not the last v
      }
}

TEST_CASE("cuda rmsprop_update is bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  struct Hyper {
    double alpha, weight_decay, momentum;
    bool centered;
  };
  // alpha 0.3 makes 1 - alpha >= 0.5: the other branch of the centered lerp.
  const std::vector<Hyper> hypers = {{0.99, 0.0, 0.0, false}, {0.9, 1e-2, 0.0, false}, {0.99, 0.0, 0.9, false},
                                     {0.9, 1e-2, 0.0, true},  {0.99, 0.0, 0.5, true},  {0.3, 1e-2, 0.9, true}};
  uint64_t seed = 3000;
  for (const Shape& s : param_shapes())
    for (const Hyper& h : hypers)
      for (bool strided : {false, true}) {
        ++seed;
        const DType dt = DType::f32;
        Tensor p_c = random(s, dt, seed), sq_c = zeros(s, dt), ga_c = zeros(s, dt), b_c = zeros(s, dt);
        Tensor p_g = gpu_input(p_c, strided), sq_g = gpu_input(sq_c, strided), ga_g = gpu_input(ga_c, strided);
        Tensor b_g = gpu_input(b_c, strided);
        Tensor none_c, none_g;
        Tensor& gac = h.centered ? ga_c : none_c;
        Tensor& gag = h.centered ? ga_g : none_g;
        Tensor& bc = h.momentum > 0.0 ? b_c : none_c;
        Tensor& bg = h.momentum > 0.0 ? b_g : none_g;
        for (int64_t step = 1; step <= 4; ++step) {
          const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
          rmsprop_update_(p_c, g, sq_c, gac, bc, 1e-2, h.alpha, 1e-8, h.weight_decay, h.momentum, h.centered);
          rmsprop_update_(p_g, gpu_input(g, strided), sq_g, gag, bg, 1e-2, h.alpha, 1e-8, h.weight_decay, h.momentum,
                          h.centered);
          const std::string what = shape_str(s) + " " + layout_name(strided) + " alpha " + std::to_string(h.alpha) +
                                   " momentum " + std::to_string(h.momentum) + (h.centered ? " centered" : "") +
                                   " step " + std::to_string(step);
          require_same(p_g, p_c, what + ": param");
          require_same(sq_g, sq_c, what + ": square_avg");
          if (h.centered) require_same(ga_g, ga_c, what + ": grad_avg");
          if (h.momentum > 0.0) require_same(b_g, b_c, what + ": momentum buffer");
        }
      }
}

TEST_CASE("cuda adagrad_update is bit-identical to the CPU over several steps", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 3500;
  for (const Shape& s : param_shapes())
    for (double lr_decay : {0.0, 0.1})
      for (double wd : {0.0, 1e-2})
        for (bool strided : {false, true}) {
          ++seed;
          const DType dt = DType::f32;
          Tensor p_c = random(s, dt, seed), s_c = full(s, 0.1, dt);
          Tensor p_g = gpu_input(p_c, strided), s_g = gpu_input(s_c, strided);
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = random(s, dt, seed * 100 + uint64_t(step), -0.5, 0.5);
            adagrad_update_(p_c, g, s_c, 1e-2, lr_decay, 1e-10, wd, step);
            adagrad_update_(p_g, gpu_input(g, strided), s_g, 1e-2, lr_decay, 1e-10, wd, step);
            const std::string what = shape_str(s) + " " + layout_name(strided) + " lr_decay " +
                                     std::to_string(lr_decay) + " wd " + std::to_string(wd) + " step " +
                                     std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            require_same(s_g, s_c, what + ": sum");
          }
        }
}

TEST_CASE("cuda master updates write the 16-bit copy bit-identical to the CPU", "[cuda]") {
  // Note [Fused master copy]: the fp32 master and its rounded copy, both devices, one pass each.
  MT_REQUIRE_GPU();
  uint64_t seed = 3000;
  for (DType low : {DType::f16, DType::bf16})
    for (const Shape& s : param_shapes())
      for (int rule = 0; rule < 3; ++rule)  // sgd, sgd + Nesterov momentum, adamw
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, DType::f32, seed), m_c = zeros(s, DType::f32), v_c = zeros(s, DType::f32);
          Tensor q_c = p_c.to(low);
          Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
          Tensor q_g = gpu_input(q_c, strided);
          for (int64_t step = 1; step <= 3; ++step) {
            const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -0.5, 0.5);
            const Tensor g_g = gpu_input(g, strided);
            if (rule < 2) {
              sgd_update_(p_c, g, m_c, 0.05, 0.9, 0.0, 1e-2, rule == 1, step, &q_c);
              sgd_update_(p_g, g_g, m_g, 0.05, 0.9, 0.0, 1e-2, rule == 1, step, &q_g);
            } else {
              adam_update_(p_c, g, m_c, v_c, 1e-2, 0.9, 0.999, 1e-8, 1e-2, true, step, &q_c);
              adam_update_(p_g, g_g, m_g, v_g, 1e-2, 0.9, 0.999, 1e-8, 1e-2, true, step, &q_g);
            }
            const std::string what = std::string(dtype_name(low)) + " copy " + shape_str(s) + " " +
                                     layout_name(strided) + " rule " + std::to_string(rule) + " step " +
                                     std::to_string(step);
            require_same(p_g, p_c, what + ": master");
            require_same(q_g, q_c, what + ": rounded copy");
            require_bit_identical(q_c, p_c.to(low), what + ": CPU copy equals the rounded master");
          }
        }
}

namespace {

enum class Rule { nearest, stochastic, kahan };

const char* rule_name(Rule r) {
  return r == Rule::nearest ? "nearest" : r == Rule::stochastic ? "stochastic" : "kahan";
}

}  // namespace

TEST_CASE("cuda sgd16_update is bit-identical to the CPU in all three rounding modes", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 4000;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (double momentum : {0.0, 0.9})
          for (bool strided : {false, true}) {
            ++seed;
            const double wd = seed % 2 ? 1e-2 : 0.0;
            // Weights around 1 and updates of ~1e-3: below the 16-bit ulp, where the rules differ.
            Tensor p_c = random(s, dt, seed, 0.5, 2.0), m_c = zeros(s, dt), k_c = zeros(s, dt);
            Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), k_g = gpu_input(k_c, strided);
            Tensor none_c, none_g;
            Tensor& mc = momentum != 0.0 ? m_c : none_c;
            Tensor& mg = momentum != 0.0 ? m_g : none_g;
            Tensor& kc = rule == Rule::kahan ? k_c : none_c;
            Tensor& kg = rule == Rule::kahan ? k_g : none_g;
            const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
            uint64_t offset = 12345;
            for (int step = 1; step <= 5; ++step) {
              const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -1.0, 1.0);
              sgd16_update_(p_c, g, mc, kc, 1e-3, momentum, wd, rounding, seed, offset);
              sgd16_update_(p_g, gpu_input(g, strided), mg, kg, 1e-3, momentum, wd, rounding, seed, offset);
              offset += uint64_t(numel_of(s));
              const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                       " " + rule_name(rule) + " momentum " + std::to_string(momentum) + " wd " +
                                       std::to_string(wd) + " step " + std::to_string(step);
              require_same(p_g, p_c, what + ": param");
              if (momentum != 0.0) require_same(m_g, m_c, what + ": momentum buffer");
              if (rule == Rule::kahan) require_same(k_g, k_c, what + ": Kahan compensation");
            }
          }
}

TEST_CASE("cuda adamw16_update is bit-identical to the CPU in all three rounding modes", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 6000;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (double wd : {0.0, 1e-2})
          for (bool strided : {false, true}) {
            ++seed;
            Tensor p_c = random(s, dt, seed, 0.5, 2.0), m_c = zeros(s, dt), v_c = zeros(s, dt), k_c = zeros(s, dt);
            Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
            Tensor k_g = gpu_input(k_c, strided);
            Tensor none_c, none_g;
            Tensor& kc = rule == Rule::kahan ? k_c : none_c;
            Tensor& kg = rule == Rule::kahan ? k_g : none_g;
            const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
            uint64_t offset = uint64_t(1) << 33;  // counters past 32 bits
            for (int64_t step = 1; step <= 5; ++step) {
              const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -1.0, 1.0);
              adamw16_update_(p_c, g, m_c, v_c, kc, 1e-3, 0.9, 0.999, 1e-8, wd, step, rounding, seed, offset);
              adamw16_update_(p_g, gpu_input(g, strided), m_g, v_g, kg, 1e-3, 0.9, 0.999, 1e-8, wd, step, rounding,
                              seed, offset);
              offset += uint64_t(numel_of(s));
              const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                       " " + rule_name(rule) + " wd " + std::to_string(wd) + " step " +
                                       std::to_string(step);
              require_same(p_g, p_c, what + ": param");
              require_same(m_g, m_c, what + ": exp_avg");
              require_same(v_g, v_c, what + ": exp_avg_sq");
              if (rule == Rule::kahan) require_same(k_g, k_c, what + ": Kahan compensation");
            }
          }
}

TEST_CASE("cuda adamw16_update with amsgrad is bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 6500;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (bool strided : {false, true}) {
          ++seed;
          Tensor p_c = random(s, dt, seed, 0.5, 2.0), m_c = zeros(s, dt), v_c = zeros(s, dt), x_c = zeros(s, dt);
          Tensor k_c = zeros(s, dt);
          Tensor p_g = gpu_input(p_c, strided), m_g = gpu_input(m_c, strided), v_g = gpu_input(v_c, strided);
          Tensor x_g = gpu_input(x_c, strided), k_g = gpu_input(k_c, strided);
          Tensor none_c, none_g;
          Tensor& kc = rule == Rule::kahan ? k_c : none_c;
          Tensor& kg = rule == Rule::kahan ? k_g : none_g;
          const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
          uint64_t offset = 777;
          for (int64_t step = 1; step <= 5; ++step) {
            const double range = 1.0 / double(step * step);
            const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -range, range);
            adamw16_update_(p_c, g, m_c, v_c, kc, 1e-3, 0.9, 0.5, 1e-8, 1e-2, step, rounding, seed, offset, &x_c);
            adamw16_update_(p_g, gpu_input(g, strided), m_g, v_g, kg, 1e-3, 0.9, 0.5, 1e-8, 1e-2, step, rounding, seed,
                            offset, &x_g);
            offset += uint64_t(numel_of(s));
            const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                     " " + rule_name(rule) + " amsgrad step " + std::to_string(step);
            require_same(p_g, p_c, what + ": param");
            require_same(m_g, m_c, what + ": exp_avg");
            require_same(v_g, v_c, what + ": exp_avg_sq");
            require_same(x_g, x_c, what + ": max_exp_avg_sq");
            if (rule == Rule::kahan) require_same(k_g, k_c, what + ": Kahan compensation");
          }
        }
}

TEST_CASE("cuda rmsprop16_update and adagrad16_update are bit-identical to the CPU in all three rounding modes",
          "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 7000;
  for (DType dt : {DType::bf16, DType::f16})
    for (const Shape& s : param_shapes())
      for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan})
        for (int variant = 0; variant < 3; ++variant)
          for (bool strided : {false, true}) {
            ++seed;
            // variant 0: plain RMSprop and Adagrad; 1: momentum and weight decay; 2: centered, momentum.
            const bool centered = variant == 2;
            const double momentum = variant == 0 ? 0.0 : 0.9, wd = variant == 1 ? 1e-2 : 0.0;
            Tensor p_c = random(s, dt, seed, 0.5, 2.0), sq_c = zeros(s, dt), ga_c = zeros(s, dt), b_c = zeros(s, dt);
            Tensor k_c = zeros(s, dt), q_c = random(s, dt, seed + 7, 0.5, 2.0), sum_c = full(s, 0.1, dt);
            Tensor k2_c = zeros(s, dt);
            Tensor p_g = gpu_input(p_c, strided), sq_g = gpu_input(sq_c, strided), ga_g = gpu_input(ga_c, strided);
            Tensor b_g = gpu_input(b_c, strided), k_g = gpu_input(k_c, strided), q_g = gpu_input(q_c, strided);
            Tensor sum_g = gpu_input(sum_c, strided), k2_g = gpu_input(k2_c, strided);
            Tensor none_c, none_g;
            Tensor& gac = centered ? ga_c : none_c;
            Tensor& gag = centered ? ga_g : none_g;
            Tensor& bc = momentum > 0.0 ? b_c : none_c;
            Tensor& bg = momentum > 0.0 ? b_g : none_g;
            const bool kahan = rule == Rule::kahan;
            Tensor none_k1, none_k2, none_k3, none_k4;
            Tensor& kc = kahan ? k_c : none_k1;
            Tensor& kg = kahan ? k_g : none_k2;
            Tensor& k2c = kahan ? k2_c : none_k3;
            Tensor& k2g = kahan ? k2_g : none_k4;
            const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
            uint64_t offset = 99;
            for (int64_t step = 1; step <= 5; ++step) {
              const Tensor g = random(s, DType::f32, seed * 100 + uint64_t(step), -1.0, 1.0);
              const Tensor g_g = gpu_input(g, strided);
              rmsprop16_update_(p_c, g, sq_c, gac, bc, kc, 1e-3, 0.99, 1e-8, wd, momentum, centered, rounding, seed,
                                offset);
              rmsprop16_update_(p_g, g_g, sq_g, gag, bg, kg, 1e-3, 0.99, 1e-8, wd, momentum, centered, rounding, seed,
                                offset);
              adagrad16_update_(q_c, g, sum_c, k2c, 1e-3, 0.1, 1e-10, wd, step, rounding, seed + 1, offset);
              adagrad16_update_(q_g, g_g, sum_g, k2g, 1e-3, 0.1, 1e-10, wd, step, rounding, seed + 1, offset);
              offset += uint64_t(numel_of(s));
              const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " " + layout_name(strided) +
                                       " " + rule_name(rule) + " variant " + std::to_string(variant) + " step " +
                                       std::to_string(step);
              require_same(p_g, p_c, what + ": rmsprop param");
              require_same(sq_g, sq_c, what + ": square_avg");
              if (centered) require_same(ga_g, ga_c, what + ": grad_avg");
              if (momentum > 0.0) require_same(b_g, b_c, what + ": momentum buffer");
              if (kahan) require_same(k_g, k_c, what + ": rmsprop Kahan compensation");
              require_same(q_g, q_c, what + ": adagrad param");
              require_same(sum_g, sum_c, what + ": sum");
              if (kahan) require_same(k2_g, k2_c, what + ": adagrad Kahan compensation");
            }
          }
}

TEST_CASE("cuda 16-bit updates: the rounding modes really differ", "[cuda]") {
  MT_REQUIRE_GPU();
  // Guards the bit-identity tests above against a kernel that ignored the rule: with updates far
  // below the bf16 ulp of the weights, nearest rounding leaves every weight unchanged while
  // stochastic rounding and Kahan move some.
  const Shape s = {1000};
  const Tensor p0 = random(s, DType::bf16, 9, 1.0, 2.0);
  const Tensor g = random(s, DType::f32, 10, 0.5, 1.0);
  std::vector<Tensor> results;
  for (Rule rule : {Rule::nearest, Rule::stochastic, Rule::kahan}) {
    Tensor p = on_gpu(p0), k = on_gpu(zeros(s, DType::bf16)), none;
    Tensor& kr = rule == Rule::kahan ? k : none;
    const Rounding rounding = rule == Rule::stochastic ? Rounding::stochastic : Rounding::nearest;
    for (int step = 0; step < 8; ++step)
      sgd16_update_(p, on_gpu(g), none, kr, 1e-3, 0.0, 0.0, rounding, 5, uint64_t(step) * 1000);
    results.push_back(on_cpu(p));
  }
  CHECK(fraction_identical(results[0], p0) == 1.0);  // each step's |u| <= 1e-3 < ulp/2 = 2^-8: never moves
  CHECK(fraction_identical(results[1], p0) < 0.9);
  CHECK(fraction_identical(results[2], p0) < 0.9);
}

// ---- the device-side step (Note [Scaled step] in optim/scaled_step.cpp) -------------------------

namespace {

// The loss scaler's device state (formulas::StepF, StepI) with scale S and tracker t.
struct StepState {
  Tensor f, i;
  StepState(float scale, int64_t tracker) {
    std::vector<float> fv(formulas::kStepF, 0.0f);
    fv[formulas::kScale] = scale;
    fv[formulas::kClip] = 1.0f;
    std::vector<int64_t> iv(formulas::kStepI, 0);
    iv[formulas::kTracker] = tracker;
    f = on_gpu(from_vector(fv, {formulas::kStepF}));
    i = on_gpu(from_vector(iv, {formulas::kStepI}));
  }
  double at(int k) const { return on_cpu(f).to_vector()[size_t(k)]; }
  int64_t count(int k) const { return on_cpu(i).values<int64_t>()[size_t(k)]; }
};

}  // namespace

TEST_CASE("cuda unscale_and_decide: the host's unscale, check, rule and clip factor in two launches", "[cuda]") {
  MT_REQUIRE_GPU();
  // 37 gradients (two launches of the multi-tensor kernel), ragged sizes, one spanning several
  // chunks, f32 and f16, each with its own power-of-two scale on top of the loss scale S.
  std::vector<Shape> shapes;
  for (int k = 0; k < 36; ++k) shapes.push_back({int64_t(1 + 37 * k)});
  shapes.push_back({3, 20011});
  const formulas::LossScaleRule backoff{.kind = formulas::LossScaleRule::Kind::backoff, .growth_interval = 2};
  enum class Plant { none, inf, nan, overflow };
  for (Plant plant : {Plant::none, Plant::inf, Plant::nan, Plant::overflow})
    for (double max_norm : {0.0, 0.5, 1e9}) {
      const float S = 1024.0f;
      std::vector<Tensor> cpu, gpu_grads;
      std::vector<float> scales;
      for (size_t k = 0; k < shapes.size(); ++k) {
        const DType dt = k % 3 == 0 ? DType::f16 : DType::f32;
        Tensor g = random(shapes[k], dt, 100 + k, -4.0, 4.0);
        if (k == 5 && plant != Plant::none) {
          const double v = plant == Plant::inf ? INFINITY : plant == Plant::nan ? NAN : 3e38;
          g = g.to(DType::f32);  // f32: 3e38 is finite here and overflows when divided by a scale below 1
          g.flat_set(3, v);
        }
        const float alpha = k == 5 && plant == Plant::overflow ? 0.25f / S : float(1 << (k % 4));
        cpu.push_back(g);
        gpu_grads.push_back(on_gpu(g));
        scales.push_back(alpha);
      }
      StepState st(S, 1);
      const std::vector<Tensor> out = unscale_and_decide_(gpu_grads, scales, st.f, st.i, backoff, max_norm);
      // The reference: ScaledGrad::unscaled, the host check, clip.h's norm, the host rule.
      std::vector<Tensor> ref;
      bool found_inf = false;
      for (size_t k = 0; k < cpu.size(); ++k) {
        ref.push_back(ScaledGrad{cpu[k], scales[k] * S}.unscaled());
        for (double v : ref.back().to_vector()) found_inf = found_inf || !std::isfinite(v);
      }
      for (size_t k = 0; k < cpu.size(); ++k)
        require_bit_identical(on_cpu(out[k]), ref[k], "unscaled gradient " + std::to_string(k));
      BackoffLossScaler host({.init_scale = S, .growth_interval = 2});
      host.load_state_dict([&] {
        TensorDict d = host.state_dict();
        d.set_meta("growth_tracker", "1");
        return d;
      }());
      const bool applied = host.update(GradCheck{.found_inf = found_inf});
      INFO("plant " << int(plant) << ", max_norm " << max_norm);
      CHECK(st.at(formulas::kFoundInf) == (found_inf ? 1.0 : 0.0));
      CHECK(found_inf == (plant != Plant::none));
      CHECK(st.at(formulas::kApplied) == (applied ? 1.0 : 0.0));
      CHECK(st.at(formulas::kScale) == host.scale());  // grown after 2 clean steps, halved on an overflow
      CHECK(st.at(formulas::kScaleUsed) == S);
      CHECK(st.count(formulas::kTracker) == host.growth_tracker());
      CHECK(st.count(formulas::kSteps) == 1);
      CHECK(st.count(formulas::kSkipped) == (applied ? 0 : 1));
      const double norm = applied ? grad_norm(ref) : 0.0;
      CHECK(std::fabs(st.at(formulas::kGradNorm) - norm) <= 1e-6 * norm);
      const double coef = applied && max_norm > 0 ? formulas::clip_coefficient(norm, max_norm) : 1.0;
      CHECK(std::fabs(st.at(formulas::kClip) - coef) <= 1e-6 * coef);
      if (max_norm == 0.5 && applied) CHECK(st.at(formulas::kClip) < 1.0);
    }
}

TEST_CASE("cuda multi_adam_update: adam_update_ of every tensor in one launch, skipped on the device's word",
          "[cuda]") {
  MT_REQUIRE_GPU();
  // 35 parameters (two launches), ragged, one over several chunks; rounded copies on some.
  std::vector<Shape> shapes;
  for (int k = 0; k < 34; ++k) shapes.push_back({int64_t(1 + 53 * k)});
  shapes.push_back({2, 20011});
  for (bool decoupled : {false, true}) {
    const size_t n = shapes.size();
    std::vector<Tensor> p_c, m_c, v_c, q_c, p_g, m_g, v_g, q_g;
    std::vector<double> lrs, wds;
    std::vector<int64_t> rows;
    for (size_t k = 0; k < n; ++k) {
      p_c.push_back(random(shapes[k], DType::f32, 500 + k));
      m_c.push_back(zeros(shapes[k]));
      v_c.push_back(zeros(shapes[k]));
      const DType qt = k % 3 == 0 ? DType::f16 : k % 3 == 1 ? DType::bf16 : DType::f32;
      q_c.push_back(qt == DType::f32 ? Tensor() : p_c[k].to(qt));
      p_g.push_back(on_gpu(p_c[k]));
      m_g.push_back(on_gpu(m_c[k]));
      v_g.push_back(on_gpu(v_c[k]));
      q_g.push_back(q_c[k].defined() ? on_gpu(q_c[k]) : Tensor());
      lrs.push_back(k % 2 ? 1e-3 : 3e-2);  // two groups' settings
      wds.push_back(k % 2 ? 0.0 : 1e-2);
      rows.push_back(int64_t(n - 1 - k));  // any row of `steps`
    }
    std::vector<int64_t> step0(n, 0);
    for (size_t k = 0; k < n; ++k) step0[size_t(rows[k])] = int64_t(k % 4);  // different counts per parameter
    Tensor steps = on_gpu(from_vector(step0, {int64_t(n)}));
    std::vector<int64_t> count = step0;
    for (const auto& [applied, clip] : {std::pair{1.0f, 1.0f}, std::pair{1.0f, 0.25f}, std::pair{0.0f, 0.5f}}) {
      StepState control(1.0f, 0);
      std::vector<float> fv(formulas::kStepF, 0.0f);
      fv[formulas::kApplied] = applied;
      fv[formulas::kClip] = clip;
      control.f = on_gpu(from_vector(fv, {formulas::kStepF}));
      std::vector<Tensor> g_c, g_g;
      for (size_t k = 0; k < n; ++k) {
        g_c.push_back(random(shapes[k], DType::f32, 900 + k + size_t(clip * 100), -0.5, 0.5));
        g_g.push_back(on_gpu(g_c[k]));
      }
      multi_adam_update_(p_g, g_g, m_g, v_g, q_g, lrs, wds, 0.9, 0.999, 1e-8, decoupled, steps, rows, control.f);
      for (size_t k = 0; k < n; ++k) {
        if (applied == 0.0f) continue;  // the reference does nothing either
        const int64_t row = rows[k];
        const Tensor g = clip == 1.0f ? g_c[k] : g_c[k] * double(clip);  // the host's `coef * g`
        Tensor* q = q_c[k].defined() ? &q_c[k] : nullptr;
        adam_update_(p_c[k], g, m_c[k], v_c[k], lrs[k], 0.9, 0.999, 1e-8, wds[k], decoupled, count[size_t(row)] + 1, q);
        ++count[size_t(row)];
      }
      for (size_t k = 0; k < n; ++k) {
        const std::string what = std::string(decoupled ? "AdamW" : "Adam") + " parameter " + std::to_string(k) +
                                 (applied == 0.0f ? " (skipped step)" : "") + " clip " + std::to_string(clip);
        // The bias corrections come from the device's pow (CUDA's, within an ulp of the C
        // library's): 4 ulps of fp32; on the emulated device the same bits.
        require_close(p_g[k], p_c[k], what + ": param", 4.0);
        require_close(m_g[k], m_c[k], what + ": exp_avg", 4.0);
        require_close(v_g[k], v_c[k], what + ": exp_avg_sq", 4.0);
        if (q_c[k].defined()) require_close(q_g[k], q_c[k], what + ": rounded copy", 1.0);
      }
      CHECK(on_cpu(steps).values<int64_t>() == count);  // advanced on applied steps only
    }
    CHECK(on_cpu(steps).values<int64_t>() != step0);  // the applied steps moved the counts
  }
}
