// The LSTM and GRU cells on the GPU against the CPU kernels (tensor/cpu/lstm.cpp), forward and
// backward.
//
// Tolerance (Note [LSTM cell numerics on the GPU] in cuda/lstm.cu): the arithmetic is the CPU's,
// operation for operation; only exp inside sigmoid (glibc expf on the CPU, a correctly rounded
// double exp here) and the double exp inside tanh can differ, by at most an ulp of fp32 in the
// activation. Through the cell's few products that is a handful of fp32 ulps, so f32 allows
// 8 ulps plus 1e-6 absolute (terms of size ~1 cancel in dc + dh * ...), 16-bit outputs allow
// one flipped rounding (2 ulps of the format). Beyond the
// tolerance, at least 95% of the f32 and 16-bit elements must be bit-identical: a kernel that
// computed, say, an FMA where the CPU rounds twice would fail that. The GRU cell has the same
// arithmetic (one tanh and two sigmoids per element) and the same tolerance.
#include "tests/cuda/cuda_test.h"

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

void require_lstm_close(const Tensor& got, const Tensor& want, const std::string& what) {
  const DType dt = want.dtype();
  require_close(got, want, what, dt == DType::f32 ? 8.0 : 2.0, 1e-6);
  const double same = fraction_identical(got, want);
  INFO(what << ": " << same * 100.0 << "% bit-identical");
  CHECK(same >= 0.95);
}

}  // namespace

TEST_CASE("cuda lstm_cell forward and backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 40;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const auto& [B, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {33, 17}, {5, 257}, {64, 128}})
      for (bool strided : {false, true}) {
        ++seed;
        const std::string what = std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
                                 " " + layout_name(strided);
        // Pre-activations over [-6, 6]: saturated and linear regions of sigmoid and tanh.
        const Tensor gates = random({B, 4 * H}, dt, seed, -6.0, 6.0);
        const Tensor c_prev = random({B, H}, dt, seed + 1, -3.0, 3.0);
        const Tensor dc = random({B, H}, dt, seed + 2), dh = random({B, H}, dt, seed + 3);

        const LstmCellResult<Tensor> want = lstm_cell(gates, c_prev);
        const LstmCellResult<Tensor> got = lstm_cell(gpu_input(gates, strided), gpu_input(c_prev, strided));
        require_lstm_close(got.c, want.c, what + ": c");
        require_lstm_close(got.h, want.h, what + ": h");

        const LstmCellGrads gw = lstm_cell_backward(gates, c_prev, dc, dh);
        const LstmCellGrads gg = lstm_cell_backward(gpu_input(gates, strided), gpu_input(c_prev, strided),
                                                    gpu_input(dc, strided), gpu_input(dh, strided));
        require_lstm_close(gg.d_gates, gw.d_gates, what + ": d_gates");
        require_lstm_close(gg.d_c_prev, gw.d_c_prev, what + ": d_c_prev");
      }
}

TEST_CASE("cuda lstm_cell reads the gate chunks of a wider matrix", "[cuda]") {
  MT_REQUIRE_GPU();
  // gates as a column slice of a [B, 4H + 3] matrix (row stride 4H + 3), as a fused projection
  // with extra columns would hand it over.
  const int64_t B = 9, H = 13;
  const Tensor wide = random({B, 4 * H + 3}, DType::f32, 77, -4.0, 4.0);
  const Tensor c_prev = random({B, H}, DType::f32, 78);
  const Tensor gates_cpu = wide.narrow(1, 2, 4 * H);
  const Tensor gates_gpu = on_gpu(wide).narrow(1, 2, 4 * H);
  const LstmCellResult<Tensor> want = lstm_cell(gates_cpu, c_prev);
  const LstmCellResult<Tensor> got = lstm_cell(gates_gpu, on_gpu(c_prev));
  require_lstm_close(got.c, want.c, "narrowed gates: c");
  require_lstm_close(got.h, want.h, "narrowed gates: h");
}

TEST_CASE("cuda lstm_cell saves the CPU's activations and its backward from them matches the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 90;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const auto& [B, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {33, 17}, {64, 128}}) {
      ++seed;
      const std::string what = std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " H=" + std::to_string(H);
      const Tensor gates = random({B, 4 * H}, dt, seed, -6.0, 6.0);
      const Tensor c_prev = random({B, H}, dt, seed + 1, -3.0, 3.0);
      const Tensor dc = random({B, H}, dt, seed + 2), dh = random({B, H}, dt, seed + 3);
      const LstmCellSaved want = lstm_cell_saving(gates, c_prev);
      const LstmCellSaved got = lstm_cell_saving(gpu_input(gates, true), gpu_input(c_prev, true));
      require_lstm_close(got.c, want.c, what + ": c");
      require_lstm_close(got.h, want.h, what + ": h");
      require_lstm_close(got.acts, want.acts, what + ": saved activations");
      // The backward from the CPU's saved activations on both devices: the same arithmetic.
      const LstmCellGrads gw = lstm_cell_backward_saved(want.acts, c_prev, dc, dh);
      const LstmCellGrads gg = lstm_cell_backward_saved(on_gpu(want.acts), gpu_input(c_prev, true), gpu_input(dc, true),
                                                        gpu_input(dh, false));
      require_close(gg.d_gates, gw.d_gates, what + ": d_gates", 0.0, 0.0);
      require_close(gg.d_c_prev, gw.d_c_prev, what + ": d_c_prev", 0.0, 0.0);
    }
}

TEST_CASE("cuda gru_cell forward and backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 140;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const auto& [B, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {33, 17}, {5, 257}, {64, 128}})
      for (bool strided : {false, true}) {
        ++seed;
        const std::string what = std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
                                 " " + layout_name(strided);
        // Pre-activations over [-4, 4] each (sums over [-8, 8]): saturated and linear regions.
        const Tensor gx = random({B, 3 * H}, dt, seed, -4.0, 4.0);
        const Tensor gh = random({B, 3 * H}, dt, seed + 1, -4.0, 4.0);
        const Tensor h_prev = random({B, H}, dt, seed + 2);
        const Tensor dh = random({B, H}, dt, seed + 3);

        const Tensor want = gru_cell(gx, gh, h_prev);
        const Tensor got = gru_cell(gpu_input(gx, strided), gpu_input(gh, strided), gpu_input(h_prev, strided));
        require_lstm_close(got, want, what + ": h");

        const GruCellGrads gw = gru_cell_backward(gx, gh, h_prev, dh);
        const GruCellGrads gg = gru_cell_backward(gpu_input(gx, strided), gpu_input(gh, !strided),
                                                  gpu_input(h_prev, strided), gpu_input(dh, strided));
        require_lstm_close(gg.d_gx, gw.d_gx, what + ": d_gx");
        require_lstm_close(gg.d_gh, gw.d_gh, what + ": d_gh");
        require_lstm_close(gg.d_h_prev, gw.d_h_prev, what + ": d_h_prev");
      }
}

TEST_CASE("cuda gru_cell reads the chunks of a wider projection", "[cuda]") {
  MT_REQUIRE_GPU();
  // gx as a column slice of a [B, 3H + 5] matrix (row stride 3H + 5).
  const int64_t B = 9, H = 13;
  const Tensor wide = random({B, 3 * H + 5}, DType::f32, 177, -4.0, 4.0);
  const Tensor gh = random({B, 3 * H}, DType::f32, 178, -4.0, 4.0);
  const Tensor h_prev = random({B, H}, DType::f32, 179);
  const Tensor want = gru_cell(wide.narrow(1, 3, 3 * H), gh, h_prev);
  const Tensor got = gru_cell(on_gpu(wide).narrow(1, 3, 3 * H), on_gpu(gh), on_gpu(h_prev));
  require_lstm_close(got, want, "narrowed gx: h");
}
