#include "autograd/functions/lstm.h"

#include "autograd/tape.h"

namespace mixtape {

LstmCellResult<Variable> lstm_cell(const Variable& gates, const Variable& c_prev) {
  MT_CHECK(gates.defined() && c_prev.defined(), "lstm_cell: got an undefined Variable");
  LstmCellResult<Tensor> out = mixtape::lstm_cell(gates.data(), c_prev.data());
  // Saves the inputs only; backward recomputes the activations (Note [LSTM cell backward]).
  Tensor sg = gates.data(), sc = c_prev.data();
  std::vector<Variable> vs = record_multi(OpId::lstm_cell, {gates, c_prev}, {out.c, out.h},
                                          [sg, sc](const std::vector<Tensor>& dys, const std::vector<bool>&) {
    LstmCellGrads g = lstm_cell_backward(sg, sc, dys[0], dys[1]);
    return std::vector<Tensor>{g.d_gates, g.d_c_prev};
  });
  return {vs[0], vs[1]};
}

}  // namespace mixtape
