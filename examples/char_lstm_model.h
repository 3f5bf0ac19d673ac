// The char_lstm example's model and its validation loss, shared by examples/char_lstm.cpp,
// examples/precision_lab.cpp and bench/cpu_train_step.cpp.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixtape.h"

namespace examples {

// The sizes char_lstm's flags set (--embed, --hidden, --layers, --dropout, --cell), with its
// defaults.
struct CharLSTMSize {
  int64_t embed = 64;
  int64_t hidden = 256;
  int64_t layers = 2;
  double dropout = 0.0;
  std::string cell = "lstm";  // the recurrent layers: "lstm" (nn::LSTM) or "gru" (nn::GRU)
};

// What the model carries from one call to the next: h, and c for an LSTM (undefined for a GRU),
// each [layers, B, H].
struct CharState {
  mixtape::Variable h, c;
};

// Embedding(V, E) -> LSTM(E, H, layers, batch_first) or GRU(...) -> Linear(H, V).
class CharLSTM : public mixtape::nn::Module {
 public:
  CharLSTM(int64_t vocab, const CharLSTMSize& c, mixtape::Generator& gen) : Module("CharLSTM") {
    namespace nn = mixtape::nn;
    MT_CHECK(c.cell == "lstm" || c.cell == "gru", "CharLSTM: the cell must be lstm or gru, got '", c.cell, "'");
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, c.embed, gen));
    if (c.cell == "lstm") {
      lstm = register_module("lstm", std::make_shared<nn::LSTM>(nn::LSTMOptions{.input_size = c.embed,
                                                                                .hidden_size = c.hidden,
                                                                                .num_layers = c.layers,
                                                                                .batch_first = true,
                                                                                .dropout = c.dropout},
                                                                gen));
    } else {
      gru = register_module("gru", std::make_shared<nn::GRU>(nn::GRUOptions{.input_size = c.embed,
                                                                            .hidden_size = c.hidden,
                                                                            .num_layers = c.layers,
                                                                            .batch_first = true,
                                                                            .dropout = c.dropout},
                                                             gen));
    }
    head = register_module("head", std::make_shared<nn::Linear>(c.hidden, vocab, true, gen));
  }

  struct Out {
    mixtape::Variable logits;  // [B, T, V]
    CharState state;
  };
  // ids i64 [B, T] on any device (copied to the model's); the embedding rows come in `dtype` and
  // everything after follows them.
  Out forward(const mixtape::Tensor& ids, const std::optional<CharState>& state = std::nullopt,
              mixtape::DType dtype = mixtape::DType::f32) {
    const mixtape::Variable x = (*embed)(ids.to(embed->weight.device()), dtype);
    if (lstm) {
      std::optional<mixtape::nn::LSTMState> s;
      if (state) s = mixtape::nn::LSTMState{state->h, state->c};
      mixtape::nn::LSTMOutput o = (*lstm)(x, s);
      return {(*head)(o.output), {o.state.h, o.state.c}};
    }
    mixtape::nn::GRUOutput o = (*gru)(x, state ? std::optional<mixtape::Variable>(state->h) : std::nullopt);
    return {(*head)(o.output), {o.h, mixtape::Variable()}};
  }

  // Seeds the generator of the dropout masks between the recurrent layers.
  void set_dropout_seed(uint64_t seed) {
    if (lstm) lstm->set_dropout_seed(seed);
    if (gru) gru->set_dropout_seed(seed);
  }

  std::shared_ptr<mixtape::nn::Embedding> embed;
  std::shared_ptr<mixtape::nn::LSTM> lstm;  // with the lstm cell, else null
  std::shared_ptr<mixtape::nn::GRU> gru;    // with the gru cell, else null
  std::shared_ptr<mixtape::nn::Linear> head;
};

// Mean cross-entropy in nats over all B*T positions: logits [B, T, V] in any dtype, targets
// i64 [B, T]; the loss is computed in fp32 (Note [The fp32 allow-list]).
inline mixtape::Variable sequence_loss(const mixtape::Variable& logits, const mixtape::Tensor& targets,
                                       mixtape::Reduction reduction = mixtape::Reduction::mean) {
  using namespace mixtape;
  const int64_t V = logits.size(2);
  return cross_entropy(nn::fp32_input(OpId::cross_entropy, reshape(logits, {-1, V})),
                       targets.to(logits.device()).reshape({-1}), reduction);
}

// Validation cross-entropy in nats per character over `batches` (carrying the state along each
// stream), stopping once `max_chars` targets are scored (0: all). The model runs in `dtype`.
inline double evaluate_nats(CharLSTM& model, const std::vector<mixtape::data::TextBatch>& batches, int64_t max_chars,
                            mixtape::DType dtype) {
  using namespace mixtape;
  NoGrad no_grad;
  model.eval();
  std::optional<CharState> state;
  double nats = 0.0;
  int64_t count = 0;
  for (const mixtape::data::TextBatch& b : batches) {
    if (max_chars > 0 && count >= max_chars) break;
    CharLSTM::Out out = model.forward(b.input, state, dtype);
    nats += sequence_loss(out.logits, b.target, Reduction::sum).item();
    count += b.target.numel();
    state = out.state;
  }
  model.train();
  return nats / double(std::max<int64_t>(count, 1));
}

}  // namespace examples
