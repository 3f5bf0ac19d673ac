// cpu_gemm: the own CPU GEMM (tensor/cpu/gemm.h) on the GEMMs the examples run, per vector path
// and operand type, beside OpenBLAS's sgemm on the same f32 operands in the same run.
//
// Each row is one shape the cnn, char_lstm or dcgan step hands to the GEMM (batch 64), in the
// layout it uses (A^T and B^T are the transposed operands of the backward passes). Figures are
// GFLOP/s (2 M N K per call), the best of --reps calls on one thread. bf16 rows use the bf16 dot
// products (vdpbf16ps where the CPU has it, emulated with FMAs elsewhere); f16 rows widen the
// operands to f32 while packing them.
//
//   ./build/bench/cpu_gemm                 # every path this CPU supports
//   ./build/bench/cpu_gemm --paths avx512bf16 --json
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tensor/core/half.h"
#include "tensor/cpu/gemm.h"

using namespace mixtape;

namespace {

double best_of(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct GemmShape {
  const char* name;
  int64_t M, N, K;
  bool trans_a, trans_b;
};

// The examples' GEMMs at batch 64 (conv through im2col: Note [im2col layout] in tensor/cpu/conv.cpp).
const GemmShape kShapes[] = {
    {"cnn conv2 forward    W col", 64, 64 * 196, 288, false, false},
    {"cnn conv2 input grad W^T G", 288, 64 * 196, 64, true, false},
    {"cnn conv2 weight grad G col^T", 64, 288, 64 * 196, false, true},
    {"cnn fc1 forward      x W^T", 64, 128, 3136, false, true},
    {"cnn fc1 input grad   dY W", 64, 3136, 128, false, false},
    {"cnn fc1 weight grad  dY^T x", 128, 3136, 64, true, false},
    {"char_lstm gates      h W^T", 32, 1024, 256, false, true},
    {"dcgan D conv2 forward W col", 64, 64 * 64, 512, false, false},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The own CPU GEMM per vector path against OpenBLAS sgemm, one thread"};
  std::string paths_flag;
  int reps = 5;
  bool json = false;
  app.add_option("--paths", paths_flag, "comma-separated GEMM paths (default: every path this CPU supports)");
  app.add_option("--reps", reps, "calls per figure; the best counts")->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "one JSON object per row instead of the table");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> paths = cpu::gemm_paths();
  if (!paths_flag.empty()) {
    paths.clear();
    for (size_t s = 0, e; s <= paths_flag.size(); s = e + 1) {
      e = paths_flag.find(',', s);
      if (e == std::string::npos) e = paths_flag.size();
      paths.push_back(paths_flag.substr(s, e - s));
    }
  }
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  if (!json) std::printf("%-32s %9s %-11s %9s %9s %9s\n", "GEMM (M x N x K)", "sgemm", "path", "f32", "f16", "bf16");
  for (const GemmShape& s : kShapes) {
    const size_t na = size_t(s.M * s.K), nb = size_t(s.K * s.N);
    std::vector<float> a(na), b(nb), c(size_t(s.M * s.N));
    std::vector<half> ah(na), bh(nb);
    std::vector<mixtape::bfloat16> ab(na), bb(nb);  // (cblas.h has a bfloat16 of its own)
    for (size_t i = 0; i < na; ++i) ah[i] = half(a[i] = uni(rng)), ab[i] = mixtape::bfloat16(a[i]);
    for (size_t i = 0; i < nb; ++i) bh[i] = half(b[i] = uni(rng)), bb[i] = mixtape::bfloat16(b[i]);
    const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
    const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
    auto op_a = [&](DType d, const void* p) {
      return s.trans_a ? cpu::GemmOperand{d, p, 1, s.M} : cpu::GemmOperand{d, p, s.K, 1};
    };
    auto op_b = [&](DType d, const void* p) {
      return s.trans_b ? cpu::GemmOperand{d, p, 1, s.K} : cpu::GemmOperand{d, p, s.N, 1};
    };
    const double blas = gflop / best_of(reps, [&] {
                          cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                                      s.trans_b ? CblasTrans : CblasNoTrans, int(s.M), int(s.N), int(s.K), 1.0f,
                                      a.data(), int(lda), b.data(), int(ldb), 0.0f, c.data(), int(s.N));
                        });
    const std::string saved = cpu::gemm_path();
    for (const std::string& path : paths) {
      cpu::set_gemm_path(path);
      auto rate = [&](cpu::GemmArith arith, DType d, const void* pa, const void* pb) {
        return gflop /
               best_of(reps, [&] { cpu::gemm(arith, s.M, s.N, s.K, op_a(d, pa), op_b(d, pb), false, c.data(), s.N); });
      };
      const double f32 = rate(cpu::GemmArith::fma_f32, DType::f32, a.data(), b.data());
      const double f16 = rate(cpu::GemmArith::fma_f32, DType::f16, ah.data(), bh.data());
      const double bf16 = rate(cpu::GemmArith::dot_bf16, DType::bf16, ab.data(), bb.data());
      const std::string shape = std::string(s.name) + " (" + std::to_string(s.M) + " x " + std::to_string(s.N) + " x " +
                                std::to_string(s.K) + ")";
      if (json)
        std::printf("%s\n", nlohmann::json{{"gemm", shape},
                                           {"path", path},
                                           {"sgemm_gflops", blas},
                                           {"f32_gflops", f32},
                                           {"f16_gflops", f16},
                                           {"bf16_gflops", bf16}}
                                .dump()
                                .c_str());
      else std::printf("%-32s %9.1f %-11s %9.1f %9.1f %9.1f\n", s.name, blas, path.c_str(), f32, f16, bf16);
    }
    cpu::set_gemm_path(saved);
  }
  return 0;
}
