// convert: f32 <-> f16/bf16 conversion bandwidth of a large tensor, per vector path
// (tensor/cpu/convert.h), against a plain copy of the same tensor measured in the same run.
//
// Bandwidth is bytes read plus bytes written per second (f32 -> f16 moves 6 bytes an element, a
// f32 copy 8). Each figure is the best of --reps runs on one thread, over --mib MiB of f32 (far
// past the caches, so memory is what is measured).
//
//   ./build/bench/convert                 # every path this CPU supports
//   ./build/bench/convert --json
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tensor/core/half.h"
#include "tensor/cpu/convert.h"

using namespace mixtape;

namespace {

// The best time of `reps` runs of f, in seconds.
double best_of(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"f32 <-> f16/bf16 conversion bandwidth per vector path, against a copy."};
  int64_t mib = 128;
  int reps = 5;
  bool json = false;
  app.add_option("--mib", mib, "size of the f32 tensor in MiB")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--reps", reps, "runs per figure (the best is kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object per row");
  CLI11_PARSE(app, argc, argv);

  const int64_t n = mib * 1024 * 1024 / 4;
  std::vector<float> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
  std::vector<half> h(static_cast<size_t>(n));
  std::vector<bfloat16> b(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : src) v = normal(rng);
  for (int64_t i = 0; i < n; ++i) {  // touch every page once before timing
    h[size_t(i)] = half::from_bits(0);
    b[size_t(i)] = bfloat16::from_bits(0);
    dst[size_t(i)] = 0.0f;
  }

  const double copy_s = best_of(reps, [&] { std::memcpy(dst.data(), src.data(), size_t(n) * 4); });
  const double copy_gbs = double(n) * 8 / copy_s / 1e9;
  if (!json) {
    std::printf("%lld elements (%lld MiB of f32), one thread, best of %d\n", (long long)n, (long long)mib, reps);
    std::printf("copy f32 -> f32 (memcpy): %.2f GB/s\n\n", copy_gbs);
    std::printf("%-8s %-22s %10s %12s\n", "path", "conversion", "GB/s", "% of copy");
  } else {
    std::printf("%s\n", nlohmann::json{{"conversion", "copy f32"}, {"gb_per_s", copy_gbs}}.dump().c_str());
  }

  struct Case {
    const char* name;
    int bytes;  // read + written per element
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      {"f16 -> f32", 6, [&] { cpu::load_n(h.data(), dst.data(), n); }},
      {"bf16 -> f32", 6, [&] { cpu::load_n(b.data(), dst.data(), n); }},
      {"f32 -> f16 nearest", 6, [&] { cpu::store_n(src.data(), h.data(), n); }},
      {"f32 -> bf16 nearest", 6, [&] { cpu::store_n(src.data(), b.data(), n); }},
      {"f32 -> f16 stochastic", 6, [&] { cpu::store_stochastic_n(src.data(), h.data(), n, 7, 0); }},
      {"f32 -> bf16 stochastic", 6, [&] { cpu::store_stochastic_n(src.data(), b.data(), n, 7, 0); }},
  };
  const std::string saved = cpu::conversion_path();
  for (const std::string& path : cpu::conversion_paths()) {
    cpu::set_conversion_path(path);
    for (const Case& c : cases) {
      const double s = best_of(reps, c.run);
      const double gbs = double(n) * c.bytes / s / 1e9;
      if (json)
        std::printf("%s\n",
                    nlohmann::json{
                        {"path", path}, {"conversion", c.name}, {"gb_per_s", gbs}, {"fraction_of_copy", gbs / copy_gbs}}
                        .dump()
                        .c_str());
      else std::printf("%-8s %-22s %10.2f %11.0f%%\n", path.c_str(), c.name, gbs, 100.0 * gbs / copy_gbs);
    }
  }
  cpu::set_conversion_path(saved);
  return 0;
}
