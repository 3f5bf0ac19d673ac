// The LSTM layer's recurrence (lstm_sequence, lstm_sequence_backward; Note [LSTM layer
// recurrence] in tensor/cpu/lstm.cpp): the CPU kernel against the same recurrence written with
// the step ops on the scalar paths, bit for bit, in f32, f16 and bf16, both time layouts, strided
// operands, on every GEMM and conversion path and with 1 and 2 threads; its messages on bad input.
#include "support/catch.h"
#include <omp.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "mixtape.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

namespace {

// The recurrence with the step ops, as the layer node ran it before the kernel.
LstmSequence step_ops_forward(const Tensor& proj, int64_t time_dim, const Tensor& w, const Tensor& b, const Tensor& h0,
                              const Tensor& c0) {
  const int64_t T = proj.size(time_dim);
  std::vector<Tensor> hs{h0}, cs{c0}, acts;
  for (int64_t t = 0; t < T; ++t) {
    LstmCellSaved s = lstm_cell_saving(add(proj.select(time_dim, t), linear(hs.back(), w, b)), cs.back());
    hs.push_back(s.h);
    cs.push_back(s.c);
    acts.push_back(s.acts);
  }
  return {stack(hs, 0), stack(cs, 0), stack(acts, 0)};
}

LstmSequenceGrads step_ops_backward(const LstmSequence& s, const Tensor& w, const Tensor& dout, int64_t time_dim,
                                    Tensor dh, Tensor dc, bool need_dh0) {
  const int64_t T = s.acts.size(0);
  std::vector<Tensor> dgs(static_cast<size_t>(T));
  for (int64_t t = T - 1; t >= 0; --t) {
    LstmCellGrads g =
        lstm_cell_backward_saved(s.acts.select(0, t), s.cs.select(0, t), dc, add(dout.select(time_dim, t), dh));
    dc = g.d_c_prev;
    if (t > 0 || need_dh0) dh = linear_backward_input(g.d_gates, w);
    dgs[size_t(t)] = g.d_gates;
  }
  return {stack(dgs, time_dim), need_dh0 ? dh : Tensor(), dc};
}

}  // namespace

TEST_CASE("lstm_sequence: the CPU kernel computes the step ops' bits, forward and backward", "[lstm]") {
  const int saved_threads = omp_get_max_threads();
  Generator gen(5);
  int compared = 0;
  struct Size {
    int64_t T, B, H;
  };
  // B 19: two threads take 8 and 11 rows (ragged GEMM tiles); H 24: 96 gate columns, a ragged
  // panel on every path.
  for (const Size& z : {Size{5, 3, 5}, Size{4, 19, 24}})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int64_t time_dim : {0, 1})
        for (bool bias : {true, false}) {
          const int64_t T = z.T, B = z.B, H = z.H;
          // proj and dout strided: the time-major case reads a transposed view.
          const Tensor proj = time_dim == 0 ? uniform({B, T, 4 * H}, -2.0, 2.0, gen, dt).transpose(0, 1)
                                            : uniform({B, T, 4 * H}, -2.0, 2.0, gen, dt);
          const Tensor dout = time_dim == 0 ? uniform({T, B, H}, -1.0, 1.0, gen, dt)
                                            : uniform({T, B, H}, -1.0, 1.0, gen, dt).transpose(0, 1);
          const Tensor w = uniform({4 * H, H}, -0.5, 0.5, gen, dt);
          const Tensor b = bias ? uniform({4 * H}, -0.5, 0.5, gen, dt) : Tensor();
          const Tensor h0 = uniform({B, H}, -1.0, 1.0, gen, dt), c0 = uniform({B, H}, -1.0, 1.0, gen, dt);
          const Tensor dh = uniform({B, H}, -1.0, 1.0, gen, dt), dc = uniform({H, B}, -1.0, 1.0, gen, dt).t();
          LstmSequence want;
          LstmSequenceGrads want_g[2];  // without and with dh0
          {
            const test::GemmPathScope gemm_reference("scalar");
            const test::ConversionPathScope conversion_reference("scalar");
            want = step_ops_forward(proj, time_dim, w, b, h0, c0);
            for (bool need_dh0 : {false, true})
              want_g[need_dh0] = step_ops_backward(want, w, dout, time_dim, dh, dc, need_dh0);
          }
          for (bool need_dh0 : {true, false})
            for (const std::string& gemm : cpu::gemm_paths())
              for (const std::string& conversion : cpu::conversion_paths())
                for (int threads : {1, 2}) {
                  INFO(dtype_name(dt) << " T B H " << T << " " << B << " " << H << ", time_dim " << time_dim
                                      << (bias ? ", bias" : ", no bias") << ", need_dh0 " << need_dh0 << ", GEMM path "
                                      << gemm << ", conversion path " << conversion << ", " << threads << " threads");
                  const test::GemmPathScope gemm_scope(gemm);
                  const test::ConversionPathScope conversion_scope(conversion);
                  omp_set_num_threads(threads);
                  const LstmSequence got = lstm_sequence(proj, time_dim, w, b, h0, c0, true);
                  CHECK(test::same_bytes(got.hs, want.hs));
                  CHECK(test::same_bytes(got.cs, want.cs));
                  CHECK(test::same_bytes(got.acts, want.acts));
                  const LstmSequenceGrads g = lstm_sequence_backward(got, w, dout, time_dim, dh, dc, need_dh0);
                  CHECK(test::same_bytes(g.dg, want_g[need_dh0].dg));
                  CHECK(test::same_bytes(g.dc, want_g[need_dh0].dc));
                  CHECK(g.dh.defined() == need_dh0);
                  if (need_dh0) CHECK(test::same_bytes(g.dh, want_g[need_dh0].dh));
                  ++compared;
                }
        }
  omp_set_num_threads(saved_threads);
  CHECK(compared >= 2 * 3 * 2 * 2 * 2 * 2);
}

TEST_CASE("lstm_sequence: the forward without saving gives the same states", "[lstm]") {
  Generator gen(6);
  const Tensor proj = uniform({7, 3, 16}, -2.0, 2.0, gen), w = uniform({16, 4}, -0.5, 0.5, gen);
  const Tensor h0 = zeros({3, 4}), c0 = uniform({3, 4}, -1.0, 1.0, gen);
  const LstmSequence saved = lstm_sequence(proj, 0, w, Tensor(), h0, c0, true);
  const LstmSequence plain = lstm_sequence(proj, 0, w, Tensor(), h0, c0, false);
  CHECK(!plain.acts.defined());
  CHECK(test::same_bytes(plain.hs, saved.hs));
  CHECK(test::same_bytes(plain.cs, saved.cs));
  CHECK_THROWS_WITH(lstm_sequence_backward(plain, w, zeros({7, 3, 4}), 0, h0, c0, true),
                    Contains("lstm_sequence backward: the sequence was run without saving its activations"));
}

TEST_CASE("lstm_sequence names the op and the shapes on bad input", "[lstm][errors]") {
  const Tensor proj = zeros({5, 2, 12}), w = zeros({12, 3}), h = zeros({2, 3});
  CHECK_THROWS_WITH(lstm_sequence(proj, 0, zeros({12, 4}), Tensor(), h, h, true),
                    Contains("lstm_sequence: expected proj [., ., 4H] and w [4H, H]") && Contains("f32[12, 4]"));
  CHECK_THROWS_WITH(lstm_sequence(proj, 0, w, Tensor(), zeros({3, 3}), h, true),
                    Contains("the initial states must be [2, 3]") && Contains("f32[3, 3]"));
  CHECK_THROWS_WITH(lstm_sequence(proj, 0, w, zeros({8}), h, h, true), Contains("b must be [12]"));
  CHECK_THROWS_WITH(lstm_sequence(proj, 2, w, Tensor(), h, h, true), Contains("time_dim must be 0 or 1, got 2"));
  CHECK_THROWS_WITH(lstm_sequence(proj, 0, w.to(DType::bf16), Tensor(), h, h, true), Contains("lstm_sequence"));
  const LstmSequence s = lstm_sequence(proj, 0, w, Tensor(), h, h, true);
  CHECK_THROWS_WITH(lstm_sequence_backward(s, w, zeros({2, 5, 3}), 0, h, h, true),
                    Contains("expected dout [5, 2, 3]") && Contains("f32[2, 5, 3]"));
}
