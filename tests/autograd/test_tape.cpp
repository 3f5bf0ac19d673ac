// The tape itself: what records, how gradients reach leaves, and how scales travel.
#include "support/catch.h"

#include "mixtape.h"

using namespace mixtape;
using Catch::Contains;

namespace {
Variable leaf(std::vector<double> v, Shape s) { return Variable(from_vector(v, s), true); }
}  // namespace

TEST_CASE("ops record only inside a Tape, outside NoGrad, and when an input requires a gradient", "[autograd][tape]") {
  Variable x = leaf({1, 2, 3}, {3});
  Variable c(from_vector(std::vector<double>{1, 1, 1}, {3}));  // constant
  {
    Variable y = x * x;  // no tape active
    CHECK_FALSE(y.requires_grad());
  }
  Tape tape;
  CHECK(Tape::current() == &tape);
  Variable y = c * c;
  CHECK_FALSE(y.requires_grad());
  CHECK(tape.size() == 0);
  {
    NoGrad ng;
    Variable z = x * x;
    CHECK_FALSE(z.requires_grad());
    CHECK(tape.size() == 0);
  }
  Variable z = x * c;
  CHECK(z.requires_grad());
  CHECK_FALSE(z.is_leaf());
  CHECK(tape.size() == 1);
  CHECK(tape.nodes()[0]->op == OpId::mul);
}

TEST_CASE("nested tapes restore the outer tape", "[autograd][tape]") {
  Tape outer;
  {
    Tape inner;
    CHECK(Tape::current() == &inner);
  }
  CHECK(Tape::current() == &outer);
}

TEST_CASE("backward delivers ScaledGrads to leaves and clears the tape", "[autograd][tape]") {
  Variable x = leaf({1, 2, 3}, {3});
  Tape tape;
  Variable y = sum(x * x);  // dy/dx = 2x
  tape.backward(y, 8.0f);
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->scale == 8.0f);
  CHECK(x.grad()->g.to_vector() == std::vector<double>{16, 32, 48});
  CHECK(x.grad()->unscaled().to_vector() == std::vector<double>{2, 4, 6});
  CHECK(tape.size() == 0);
}

TEST_CASE("leaf gradients accumulate across backward passes", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  for (int i = 0; i < 2; ++i) {
    Tape tape;
    tape.backward(sum(x * 3.0), 1.0f);
  }
  CHECK(x.grad()->g.to_vector() == std::vector<double>{6, 6});
  x.zero_grad();
  CHECK_FALSE(x.grad().has_value());
}

TEST_CASE("accumulating into a leaf with a different scale uses the common-scale rule", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  {
    Tape tape;
    tape.backward(sum(x), 4.0f);  // {4, 4} at scale 4
  }
  {
    Tape tape;
    tape.backward(sum(x), 16.0f);  // {16, 16} at scale 16
  }
  // Both fit at the larger scale: {4*4 + 16, ...} = 32 at scale 16, i.e. true gradient 2.
  CHECK(x.grad()->scale == 16.0f);
  CHECK(x.grad()->unscaled().to_vector() == std::vector<double>{2, 2});
}

TEST_CASE("backward rejects bad seeds and roots with clear messages", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  Variable c(from_vector(std::vector<double>{1, 2}, {2}));
  Tape tape;
  Variable y = sum(x * x);
  CHECK_THROWS_WITH(tape.backward(y, 3.0f), Contains("power of two"));
  CHECK_THROWS_WITH(tape.backward(c, 1.0f), Contains("does not require a gradient"));
  CHECK_THROWS_WITH(tape.backward(y, ScaledGrad{ones({3}), 1.0f}), Contains("does not match"));
}

TEST_CASE("a second backward of the same graph is an error that says why", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  Tape tape;
  Variable y = sum(x * x);
  tape.backward(y, 1.0f);
  CHECK_THROWS_WITH(tape.backward(y, 1.0f),
                    Contains("already ran backward") && Contains("record the forward pass again"));
  CHECK(x.grad()->g.to_vector() == std::vector<double>{2, 4});  // unchanged by the failed call
  // Ops recorded on the tape after its backward make a new graph, which runs once.
  Variable z = sum(x * 3.0);
  tape.backward(z, 1.0f);
  CHECK(x.grad()->g.to_vector() == std::vector<double>{5, 7});
  CHECK_THROWS_WITH(tape.backward(z, 1.0f), Contains("already ran backward"));
}

TEST_CASE("a non-leaf from an earlier tape does not keep a stale gradient", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  Variable h;
  {
    Tape t1;
    h = x * 2.0;
  }  // t1 is gone; h is a non-leaf whose node no longer exists
  Tape t2;
  Variable y = sum(h * h);
  t2.backward(y, 1.0f);
  CHECK(h.impl().pending.empty());
  CHECK_FALSE(x.grad().has_value());  // the path through t1 is not replayed
}

TEST_CASE("backward of a root another tape recorded is an error that says why", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2});
  Variable loss;
  {
    Tape t1;
    loss = sum(x * x);
  }  // t1 has ended with its graph
  Tape t2;
  CHECK_THROWS_WITH(t2.backward(loss, 1.0f),
                    Contains("recorded by another Tape") && Contains("call backward on the Tape that recorded"));
  CHECK_FALSE(x.grad().has_value());
  Tape t3;  // a tape still alive is another tape too
  Variable other = sum(x * 3.0);
  Tape t4;
  CHECK_THROWS_WITH(t4.backward(other, 1.0f), Contains("recorded by another Tape"));
}

namespace {
struct CountingObserver : GradObserver {
  int node_grads = 0, leaf_grads = 0;
  void on_node_grad(const Node&, size_t, const ScaledGrad&) override { ++node_grads; }
  void on_leaf_grad(const VarImpl&, const ScaledGrad&) override { ++leaf_grads; }
};
}  // namespace

TEST_CASE("a GradObserver sees every gradient the tape produces", "[autograd][tape]") {
  Variable x = leaf({1, 2}, {2}), w = leaf({3, 4}, {2});
  CountingObserver obs;
  Tape tape;
  tape.set_observer(&obs);
  Variable y = sum(relu(x * w));
  tape.backward(y, 1.0f);
  CHECK(obs.node_grads == 4);  // sum -> relu -> mul (x and w)
  CHECK(obs.leaf_grads == 2);
}

TEST_CASE("is_power_of_two", "[autograd][scale]") {
  CHECK(is_power_of_two(1.0f));
  CHECK(is_power_of_two(65536.0f));
  CHECK(is_power_of_two(0.125f));
  CHECK_FALSE(is_power_of_two(3.0f));
  CHECK_FALSE(is_power_of_two(0.0f));
  CHECK_FALSE(is_power_of_two(-2.0f));
  CHECK_FALSE(is_power_of_two(INFINITY));
}
