// Op cases for the fused LSTM and GRU cells (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

// B = 2, H = 3: gates [2, 12] with values in [-1.5, 1.5] (every activation away from saturation).
std::vector<Tensor> cell_inputs(DType dt) {
  return {rand_input({2, 12}, dt, 201, -1.5, 1.5), rand_noncontig({2, 3}, dt, 202)};
}

// concat gives c and h independent random seed gradients.
MT_OP_CASE(OpCase{"lstm_cell, both outputs used", cell_inputs, [](const V& v) {
                    auto [c, h] = lstm_cell(v[0], v[1]);
                    return concat({c, h}, 1);
                  }});

// c is dropped: the tape zero-fills dc.
MT_OP_CASE(OpCase{"lstm_cell, only h used",
                  [](DType dt) {
  // non-contiguous gates: the kernel reads through strides
  return std::vector<Tensor>{rand_noncontig({2, 12}, dt, 211, -1.5, 1.5), rand_input({2, 3}, dt, 212)};
                  },
                  [](const V& v) { return lstm_cell(v[0], v[1]).h; }});

// Three unrolled steps: gates_t = gx[t] + [h, h, h, h] * u (an elementwise stand-in for the
// recurrent GEMM), c and h feed the next step; the output stacks h_1..h_3.
// Inputs: gx [3, 2, 8] (T, B, 4H with H = 2), u [8], h0 [2, 2], c0 [2, 2].
MT_OP_CASE(OpCase{"lstm_cell unrolled over 3 steps",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 2, 8}, dt, 221), rand_input({8}, dt, 222), rand_input({2, 2}, dt, 223),
                             rand_input({2, 2}, dt, 224)};
                  },
                  [](const V& v) {
  Variable h = v[2], c = v[3];
  std::vector<Variable> hs;
  for (int64_t t = 0; t < 3; ++t) {
    Variable gates = select(v[0], 0, t) + concat({h, h, h, h}, 1) * v[1];
    auto step = lstm_cell(gates, c);
    c = step.c;
    h = step.h;
    hs.push_back(h);
  }
  return stack(hs, 0) + c;  // [3, 2, 2]; the last c is used as well
},
           /*tol16=*/8.0});

// The fused layer (Note [LSTM layer node]): T = 3 steps, B = 2, H = 2, every output used.
// Inputs: proj [B, T, 4H] (batch first), w_hh [4H, H], b_hh [4H], h0 [B, H], c0 [B, H].
MT_OP_CASE(OpCase{"lstm_layer batch first, all outputs used",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 3, 8}, dt, 231), rand_input({8, 2}, dt, 232), rand_input({8}, dt, 233),
                             rand_input({2, 2}, dt, 234), rand_noncontig({2, 2}, dt, 235)};
                  },
                  [](const V& v) {
  LstmLayerResult r = lstm_layer(v[0], v[1], v[2], v[3], v[4], 1);
  return concat({reshape(r.out, {2, 6}), r.h, r.c}, 1);  // [2, 10]
},
           /*tol16=*/8.0});

// Time major, a non-contiguous projection, no recurrent bias, only the sequence output used
// (the tape zero-fills dh_n and dc_n).
MT_OP_CASE(OpCase{"lstm_layer time major, no bias, out only",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 2, 8}, dt, 241), rand_input({8, 2}, dt, 242),
                             rand_input({2, 2}, dt, 243), rand_input({2, 2}, dt, 244)};
                  },
                  [](const V& v) { return lstm_layer(v[0], v[1], Variable(), v[2], v[3], 0).out; },
                  /*tol16=*/8.0});

// GRU cell, B = 2, H = 3: gx and gh [2, 9] (r | z | n) with values in [-1.5, 1.5]; gh
// non-contiguous; every input gets a gradient.
MT_OP_CASE(OpCase{"gru_cell",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({2, 9}, dt, 251, -1.5, 1.5), rand_noncontig({2, 9}, dt, 252, -1.5, 1.5),
                             rand_input({2, 3}, dt, 253)};
                  },
                  [](const V& v) { return gru_cell(v[0], v[1], v[2]); }});

// Three steps of a GRU layer as nn::GRU records it: gx_t a slice of one projection [T, B, 3H],
// gh_t = linear(h, W_hh, b_hh), h feeding both the next GEMM and the next cell (T = 3, B = 2,
// H = 2). Inputs: gx [3, 2, 6], W_hh [6, 2] (non-contiguous), b_hh [6], h0 [2, 2].
MT_OP_CASE(OpCase{"gru_cell unrolled over 3 steps with the recurrent GEMM",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 2, 6}, dt, 261), rand_noncontig({6, 2}, dt, 262), rand_input({6}, dt, 263),
                             rand_input({2, 2}, dt, 264)};
                  },
                  [](const V& v) {
  Variable h = v[3];
  std::vector<Variable> hs;
  for (int64_t t = 0; t < 3; ++t) {
    h = gru_cell(select(v[0], 0, t), linear(h, v[1], v[2]), h);
    hs.push_back(h);
  }
  return stack(hs, 0);  // [3, 2, 2]
},
           /*tol16=*/8.0});

}  // namespace
