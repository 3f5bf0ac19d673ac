// Module: registration, dotted names, modes, state dicts, conversion, printing, Sequential.
#include "support/catch.h"

#include <functional>
#include <sstream>

#include "mixtape.h"
#include "nn/nn.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;
using mixtape::test::TempDir;

namespace {

// A nested model: own parameter, a Sequential of conv / batch norm / relu, a linear head.
struct Net : nn::Module {
  Variable scale;
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> fc;

  explicit Net(Generator& gen) : Module("Net") {
    scale = register_parameter("scale", ones({1}));
    features = register_module("features", std::make_shared<nn::Sequential>(
                                               std::make_shared<nn::Conv2d>(1, 2, 3, 1, 1, 1, true, gen),
                                               std::make_shared<nn::BatchNorm2d>(2), std::make_shared<nn::ReLU>()));
    fc = register_module("fc", std::make_shared<nn::Linear>(2 * 4 * 4, 3, gen));
  }

  Variable forward(const Variable& x) {
    Variable h = (*features)(x);
    return (*fc)(flatten(h, 1)) * scale;
  }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Variable>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, p] : v) out.push_back(n);
  return out;
}

bool same_values(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.to_vector() == b.to_vector(); }

Tensor input_batch(uint64_t seed) {
  Generator g(seed);
  return normal({4, 1, 4, 4}, 0.0, 1.0, g);
}

}  // namespace

TEST_CASE("parameters, buffers and children get dotted names in registration order", "[nn][module]") {
  Generator gen(1);
  Net net(gen);
  const std::vector<std::string> expected = {
      "scale", "features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias", "fc.weight", "fc.bias"};
  CHECK(names_of(net.named_parameters()) == expected);
  // Each Variable carries its dotted path as its name (telemetry, messages).
  for (const auto& [n, p] : net.named_parameters()) CHECK(p.name() == n);
  CHECK(names_of(net.named_parameters(false)) == std::vector<std::string>{"scale"});
  REQUIRE(net.parameters().size() == 7);
  for (const Variable& p : net.parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(net.parameters()[5].same(net.fc->weight));

  std::vector<std::string> buffers;
  for (const auto& [n, b] : net.named_buffers()) buffers.push_back(n);
  CHECK(buffers == std::vector<std::string>{"features.1.running_mean", "features.1.running_var",
                                            "features.1.num_batches_tracked"});
  CHECK(net.named_buffers(false).empty());

  // 1 + conv (2*1*3*3 + 2) + bn (2 + 2) + fc (3*32 + 3)
  CHECK(net.num_parameters() == 1 + 20 + 4 + 99);
  REQUIRE(net.children().size() == 2);
  CHECK(net.named_children()[0].first == "features");
  CHECK(net.child("fc") == net.fc);
  CHECK(net.features->size() == 3);

  const std::vector<std::string> sd_names = net.state_dict().names();
  CHECK(sd_names == std::vector<std::string>{"scale", "features.0.weight", "features.0.bias", "features.1.weight",
                                             "features.1.bias", "features.1.running_mean", "features.1.running_var",
                                             "features.1.num_batches_tracked", "fc.weight", "fc.bias"});
  CHECK(net.state_dict().at("features.1.num_batches_tracked").dtype() == DType::i64);
}

TEST_CASE("registration rejects bad and repeated names and lists known names on lookup", "[nn][module]") {
  nn::Module m("Box");
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", zeros({2})), Contains("'w' is already taken"));
  CHECK_THROWS_WITH(m.register_buffer("w", zeros({2})), Contains("'w' is already taken"));
  CHECK_THROWS_WITH(m.register_parameter("a.b", zeros({2})), Contains("contains '.'"));
  CHECK_THROWS_WITH(m.register_buffer("", zeros({2})), Contains("empty"));
  CHECK_THROWS_WITH(m.register_module("c", std::shared_ptr<nn::Module>()), Contains("null"));
  CHECK_THROWS_WITH(m.register_parameter("idx", from_vector(std::vector<int64_t>{1}, {1})), Contains("floating"));
  m.register_buffer("stat", zeros({3}));
  CHECK_THROWS_WITH(m.parameter("v"), Contains("no parameter named 'v'") && Contains("[w]"));
  CHECK_THROWS_WITH(m.buffer("x"), Contains("[stat]"));
  m.set_buffer("stat", ones({5}));
  CHECK(m.buffer("stat").shape() == Shape{5});
  CHECK_THROWS_WITH(m.set_buffer("nope", ones({1})), Contains("no buffer named 'nope'"));
}

TEST_CASE("a module registered twice lists its parameters once", "[nn][module]") {
  Generator gen(3);
  auto a = std::make_shared<nn::Linear>(2, 2, gen);
  nn::Module tied("Tied");
  tied.register_module("a", a);
  auto holder = std::make_shared<nn::Module>("Holder");
  holder->register_parameter("extra", zeros({1}));
  tied.register_module("h", holder);
  tied.register_module("a_again", a);
  // parameters() lists each Variable once; state_dict() keeps every name, as torch does.
  CHECK(names_of(tied.named_parameters()) == std::vector<std::string>{"a.weight", "a.bias", "h.extra"});
  CHECK(tied.parameters().size() == 3);
  CHECK(tied.state_dict().size() == 5);
  CHECK(tied.num_parameters() == 4 + 2 + 1);
}

TEST_CASE("train and eval switch the whole tree, zero_grad drops every gradient", "[nn][module]") {
  Generator gen(2);
  Net net(gen);
  CHECK(net.is_training());
  net.eval();
  CHECK(!net.is_training());
  CHECK(!net.features->is_training());
  CHECK(!(*net.features)[1]->is_training());
  net.train();
  CHECK((*net.features)[1]->is_training());

  {
    Tape tape;
    Variable loss = sum(net.forward(Variable(input_batch(5))));
    tape.backward(loss);
  }
  for (const Variable& p : net.parameters()) CHECK(p.grad().has_value());
  net.zero_grad();
  for (const Variable& p : net.parameters()) CHECK(!p.grad().has_value());
}

TEST_CASE("state_dict round trip into a fresh model gives identical outputs", "[nn][module][state]") {
  Generator g1(11), g2(22);
  Net a(g1), b(g2);
  // Give a's running statistics non-trivial values with two training steps.
  a.forward(Variable(input_batch(1)));
  a.forward(Variable(input_batch(2)));
  a.eval();
  b.eval();
  const Tensor x = input_batch(3);
  const Tensor ya = a.forward(Variable(x)).data();
  CHECK(!same_values(ya, b.forward(Variable(x)).data()));

  const Variable b_fc_weight = b.fc->weight;  // handles taken before loading see the new values
  b.load_state_dict(a.state_dict());
  CHECK(same_values(ya, b.forward(Variable(x)).data()));
  CHECK(same_values(b_fc_weight.data(), a.fc->weight.data()));
  CHECK(!b_fc_weight.data().same_storage(a.fc->weight.data()));  // copied, not aliased
  CHECK(b.state_dict().at("features.1.num_batches_tracked").item() == 2.0);
  CHECK(same_values(b.state_dict().at("features.1.running_var"), a.state_dict().at("features.1.running_var")));

  // state_dict() shares storage with the module; a clone is a snapshot.
  const Tensor live = a.state_dict().at("scale");
  const Tensor snap = live.clone();
  nn::init::constant_(a.scale, 3.0);
  CHECK(live.item() == 3.0);
  CHECK(snap.item() == 1.0);
}

TEST_CASE("load_state_dict names missing, unexpected and mismatched entries and copies nothing",
          "[nn][module][state]") {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  const std::vector<double> before = b.fc->weight.data().to_vector();

  NamedTensors items = a.state_dict().tensors;
  NamedTensors missing_two;
  for (const auto& it : items)
    if (it.first != "fc.bias" && it.first != "features.1.running_var") missing_two.push_back(it);
  std::string msg = error_of([&] { b.load_state_dict(TensorDict{missing_two}); });
  CHECK_THAT(msg, Contains("missing keys: [features.1.running_var, fc.bias]"));
  CHECK_THAT(msg, Contains("load_state_dict into Net"));
  CHECK(b.fc->weight.data().to_vector() == before);

  NamedTensors extra = items;
  extra.emplace_back("fc.gain", ones({3}));
  msg = error_of([&] { b.load_state_dict(TensorDict{extra}); });
  CHECK_THAT(msg, Contains("unexpected keys: [fc.gain]"));
  CHECK_THAT(msg, !Contains("missing"));
  CHECK(b.fc->weight.data().to_vector() == before);

  // Non-strict loading skips both kinds of names and loads the rest.
  b.load_state_dict(TensorDict{missing_two}, /*strict=*/false);
  CHECK(b.fc->weight.data().to_vector() == a.fc->weight.data().to_vector());
  b.load_state_dict(TensorDict{extra}, /*strict=*/false);

  NamedTensors wrong = items;
  for (auto& it : wrong) {
    if (it.first == "fc.weight") it.second = zeros({3, 31});
    if (it.first == "features.0.bias") it.second = zeros({2}, DType::f64);
  }
  msg = error_of([&] { b.load_state_dict(TensorDict{wrong}, /*strict=*/false); });
  CHECK_THAT(msg, Contains("size mismatch for 'fc.weight': the state has f32[3, 31]") &&
                      Contains("the module has f32[3, 32]"));
  CHECK_THAT(msg, Contains("dtype mismatch for 'features.0.bias': the state has f64[2]"));
  CHECK_THAT(msg, Contains("nothing was copied"));

  TensorDict twice;
  twice.add("a", zeros({1}));
  CHECK_THROWS_WITH(twice.add("a", zeros({1})), Contains("duplicate tensor name 'a'"));
  CHECK_THROWS_WITH(a.state_dict().at("fc.nope"), Contains("no tensor named 'fc.nope'"));
}

TEST_CASE("Module::to converts parameters and floating buffers in place", "[nn][module]") {
  Generator gen(4);
  Net net(gen);
  const Variable w = net.fc->weight;
  const std::vector<double> vals = w.data().to_vector();
  net.to(DType::f64);
  CHECK(w.dtype() == DType::f64);  // the same Variable, converted
  CHECK(w.data().to_vector() == vals);
  for (const auto& [n, b] : net.named_buffers())
    CHECK(b.dtype() == (n == "features.1.num_batches_tracked" ? DType::i64 : DType::f64));
  const Variable y = net.forward(Variable(input_batch(6).to(DType::f64)));
  CHECK(y.dtype() == DType::f64);
  net.to(DType::f32);
  CHECK(w.dtype() == DType::f32);
  CHECK(w.data().to_vector() == vals);  // f32 -> f64 -> f32 is exact

  // A 16-bit model (the pure 16-bit policies): parameters convert, statistics stay f32.
  net.to(DType::bf16);
  CHECK(w.dtype() == DType::bf16);
  for (const auto& [n, b] : net.named_buffers())
    CHECK(b.dtype() == (n == "features.1.num_batches_tracked" ? DType::i64 : DType::f32));
  const Variable y16 = net.forward(Variable(input_batch(6).to(DType::bf16)));
  CHECK(y16.dtype() == DType::bf16);
  CHECK(net.features->at<nn::BatchNorm2d>(1)->num_batches_tracked().item() == 2.0);

  net.to(Device::cpu());  // same device: nothing changes
  CHECK(w.dtype() == DType::bf16);
}

TEST_CASE("modules print as a tree", "[nn][module][print]") {
  Generator gen(5);
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(32),
      std::make_shared<nn::LeakyReLU>(0.2), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Dropout>(0.25, uint64_t(7)), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(32 * 14 * 14, 10, false, gen));
  auto head = std::make_shared<nn::Sequential>();
  head->add("up", std::make_shared<nn::ConvTranspose2d>(100, 64, 4, 2, 1, 0, 1, false, gen));
  head->add("act", std::make_shared<nn::Tanh>());
  net->add("head", head);
  const std::string expected =
      "Sequential(\n"
      "  (0): Conv2d(1, 32, kernel=3, stride=1, padding=1)\n"
      "  (1): BatchNorm2d(32, eps=1e-05, momentum=0.1)\n"
      "  (2): LeakyReLU(negative_slope=0.2)\n"
      "  (3): MaxPool2d(kernel=2, stride=2, padding=0)\n"
      "  (4): Dropout(p=0.25)\n"
      "  (5): Flatten(start_dim=1, end_dim=-1)\n"
      "  (6): Linear(6272, 10, bias=false)\n"
      "  (head): Sequential(\n"
      "    (up): ConvTranspose2d(100, 64, kernel=4, stride=2, padding=1, bias=false)\n"
      "    (act): Tanh()\n"
      "  )\n"
      ")";
  CHECK(net->str() == expected);
  std::ostringstream os;
  os << *net;
  CHECK(os.str() == expected);

  CHECK(nn::LSTM(8, 16, 2, true, true, 0.1, false, gen).str() ==
        "LSTM(8, 16, num_layers=2, batch_first=true, dropout=0.1)");
  CHECK(nn::Embedding(100, 16, gen).str() == "Embedding(100, 16)");
  CHECK(nn::Conv2d(nn::Conv2dOptions{.in_channels = 3, .out_channels = 8, .kernel_size = {3, 5}, .dilation = 2}, gen)
            .str() == "Conv2d(3, 8, kernel=(3, 5), stride=1, padding=0, dilation=2)");
  CHECK(nn::CrossEntropyLoss().str() == "CrossEntropyLoss(reduction=mean)");
  CHECK(nn::AvgPool2d(3, 1, 1).str() == "AvgPool2d(kernel=3, stride=1, padding=1)");
  // A user module without a type name prints its class name.
  struct Custom : nn::Module {};
  CHECK(Custom().str() == "Custom()");
  Net n(gen);
  CHECK_THAT(n.str(), Contains("Net(\n  (features): Sequential(\n    (0): Conv2d(1, 2, kernel=3"));
}

TEST_CASE("Sequential chains its modules and checks indices and types", "[nn][module]") {
  Generator gen(6);
  nn::Sequential seq(std::make_shared<nn::Linear>(3, 4, gen), std::make_shared<nn::ReLU>());
  auto last = seq.add("out", std::make_shared<nn::Linear>(4, 2, gen));
  seq.push_back(std::make_shared<nn::Sigmoid>());
  REQUIRE(seq.size() == 4);
  CHECK(seq.named_children()[3].first == "3");
  CHECK(names_of(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "out.weight", "out.bias"});
  CHECK(seq.at<nn::Linear>(2) == last);
  CHECK_THROWS_WITH(seq.at<nn::Linear>(1), Contains("module 1 is a ReLU"));
  CHECK_THROWS_WITH(seq[4], Contains("index 4 is out of range for 4 modules"));

  Generator gx(1);
  const Tensor x = normal({5, 3}, 0.0, 1.0, gx);
  const Tensor y = seq(x).data();
  // The same chain by hand.
  const auto l0 = seq.at<nn::Linear>(0);
  const Tensor h = relu(linear(x, l0->weight.data(), l0->bias.data()));
  const Tensor ref = sigmoid(linear(h, last->weight.data(), last->bias.data()));
  CHECK(same_values(y, ref));
  size_t count = 0;
  for (const auto& m : seq) count += m != nullptr;
  CHECK(count == 4);
}

TEST_CASE("generator_state saves where each owned generator stands, and loading continues the same masks",
          "[nn][module][state]") {
  struct Net : nn::Module {
    std::shared_ptr<nn::Dropout> drop;
    explicit Net(Generator& gen) : Module("Net") {
      register_module("0", std::make_shared<nn::Linear>(4, 4, true, gen));
      drop = register_module("1", std::make_shared<nn::Dropout>(0.5, uint64_t(3)));
      register_module("2", std::make_shared<nn::LSTM>(4, 4, 2, true, true, 0.5, false, gen));
    }
  };
  Generator gen(11);
  auto a = std::make_shared<Net>(gen), b = std::make_shared<Net>(gen);
  const Tensor x = ones({2, 4});
  (*a->drop)(x);  // draws a mask: a's dropout generator moves on
  const TensorDict state = a->generator_state();
  CHECK(state.empty());  // metadata only
  CHECK(state.metadata.size() == 4);
  CHECK(state.meta("1.mask.seed") == "3");
  CHECK(state.meta("1.mask.offset") != "0");
  CHECK(state.has_meta("2.dropout.offset"));
  b->load_generator_state(state);
  CHECK(b->generator_state().metadata == state.metadata);
  // The next masks agree: b's dropout layer continues a's stream, not its own fresh one.
  const Tensor ya = (*a->drop)(x).data(), yb = (*b->drop)(x).data();
  CHECK(ya.values<float>() == yb.values<float>());

  // Refused before anything changes: a missing or unknown entry, a value that is not a decimal integer.
  TensorDict missing = state;
  missing.metadata.erase("2.dropout.seed");
  CHECK_THROWS_WITH(b->load_generator_state(missing), Contains("2.dropout.seed"));
  TensorDict garbage = state;
  garbage.set_meta("1.mask.offset", "12abc");
  const StringMap before = b->generator_state().metadata;
  CHECK_THROWS_WITH(b->load_generator_state(garbage), Contains("1.mask.offset"));
  CHECK(b->generator_state().metadata == before);
}
