// Every differentiable op, once. The f64 gradient-check suite (tests/autograd/test_op_cases.cpp,
// over the cases registered in tests/autograd/cases_*.cpp) fails unless it exercises each of
// these, so a new op starts here.
//   MT_OP(id, "name")
#pragma once

#include <cstddef>
#include <cstdint>

// clang-format off
#define MT_DIFFERENTIABLE_OPS(MT_OP)                                                     \
  /* elementwise (autograd/functions/elementwise.cpp) */                               \
  MT_OP(add, "add") MT_OP(sub, "sub") MT_OP(mul, "mul") MT_OP(div, "div")               \
  MT_OP(neg, "neg") MT_OP(add_scalar, "add_scalar") MT_OP(mul_scalar, "mul_scalar")    \
  MT_OP(div_scalar, "div_scalar") MT_OP(rsub_scalar, "rsub_scalar")                    \
  MT_OP(rdiv_scalar, "rdiv_scalar") MT_OP(exp, "exp") MT_OP(log, "log")                \
  MT_OP(sqrt, "sqrt") MT_OP(pow, "pow") MT_OP(abs, "abs") MT_OP(clamp, "clamp")         \
  MT_OP(relu, "relu") MT_OP(leaky_relu, "leaky_relu") MT_OP(sigmoid, "sigmoid")         \
  MT_OP(tanh, "tanh") MT_OP(gelu, "gelu") MT_OP(gelu_tanh, "gelu_tanh")                 \
  MT_OP(silu, "silu") MT_OP(elu, "elu") MT_OP(softplus, "softplus")                     \
  MT_OP(hardtanh, "hardtanh")                                                          \
  /* reductions (autograd/functions/reduce.cpp) */                                     \
  MT_OP(sum, "sum") MT_OP(mean, "mean") MT_OP(max, "max") MT_OP(amax, "amax")           \
  /* views and layout (autograd/functions/view.cpp) */                                 \
  MT_OP(reshape, "reshape") MT_OP(transpose, "transpose") MT_OP(permute, "permute")     \
  MT_OP(slice, "slice") MT_OP(expand, "expand") MT_OP(contiguous, "contiguous")         \
  /* shape ops and casts (autograd/functions/shape.cpp) */                             \
  MT_OP(concat, "concat") MT_OP(split, "split") MT_OP(stack, "stack")                   \
  MT_OP(cast, "cast")                                                                  \
  /* GEMM-like (autograd/functions/linalg.cpp, conv.cpp) */                            \
  MT_OP(matmul, "matmul") MT_OP(bmm, "bmm") MT_OP(linear, "linear")                     \
  MT_OP(conv2d, "conv2d") MT_OP(conv_transpose2d, "conv_transpose2d")                   \
  /* pooling (autograd/functions/pool.cpp) */                                          \
  MT_OP(max_pool2d, "max_pool2d") MT_OP(avg_pool2d, "avg_pool2d")                       \
  /* batch norm, dropout, embedding (autograd/functions/{batch_norm,dropout,embedding}.cpp) */ \
  MT_OP(batch_norm, "batch_norm") MT_OP(dropout, "dropout") MT_OP(embedding, "embedding") \
  /* softmax and losses (autograd/functions/loss.cpp) */                               \
  MT_OP(softmax, "softmax") MT_OP(log_softmax, "log_softmax")                           \
  MT_OP(cross_entropy, "cross_entropy")                                                \
  MT_OP(bce_with_logits, "binary_cross_entropy_with_logits") MT_OP(mse_loss, "mse_loss") \
  /* recurrent (autograd/functions/lstm.cpp) */                                        \
  MT_OP(lstm_cell, "lstm_cell")                                                        \
  /* min, var, std (autograd/functions/reduce.cpp); indexing (autograd/functions/index.cpp) */ \
  MT_OP(min, "min") MT_OP(var, "var") MT_OP(std, "std")                                 \
  MT_OP(gather, "gather") MT_OP(index_select, "index_select") MT_OP(where, "where")     \
  MT_OP(masked_fill, "masked_fill")                                                    \
  /* one LSTM layer's recurrence as one node (autograd/functions/lstm.cpp) */           \
  MT_OP(lstm_layer, "lstm_layer")                                                      \
  /* layer norm, group norm (autograd/functions/norm.cpp) */                           \
  MT_OP(layer_norm, "layer_norm") MT_OP(group_norm, "group_norm")                     \
  /* losses (autograd/functions/loss.cpp) */                                           \
  MT_OP(nll_loss, "nll_loss") MT_OP(binary_cross_entropy, "binary_cross_entropy")       \
  MT_OP(l1_loss, "l1_loss") MT_OP(smooth_l1_loss, "smooth_l1_loss")                   \
  /* GRU cell (autograd/functions/lstm.cpp) */                                         \
  MT_OP(gru_cell, "gru_cell")                                                          \
  /* convolution and pooling variants (autograd/functions/pool.cpp) */                 \
  MT_OP(adaptive_avg_pool2d, "adaptive_avg_pool2d")                                    \
  /* upsample, nearest and bilinear (autograd/functions/pool.cpp) */                   \
  MT_OP(upsample, "upsample")
// clang-format on

namespace mixtape {

enum class OpId : uint16_t {
#define MT_OP_ENUM(id, name) id,
  MT_DIFFERENTIABLE_OPS(MT_OP_ENUM)
#undef MT_OP_ENUM
};

inline constexpr const char* kOpNames[] = {
#define MT_OP_NAME(id, name) name,
    MT_DIFFERENTIABLE_OPS(MT_OP_NAME)
#undef MT_OP_NAME
};
inline constexpr size_t kNumOps = sizeof(kOpNames) / sizeof(kOpNames[0]);
inline const char* op_name(OpId op) { return kOpNames[size_t(op)]; }

}  // namespace mixtape
