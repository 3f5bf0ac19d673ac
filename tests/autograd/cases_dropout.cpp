// Op cases for dropout (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

// A generator with a fixed seed per call: every forward of the case draws the same mask, and the
// mask does not depend on the dtype, so the 16-bit comparison applies too.
MT_OP_CASE(OpCase{"dropout p = 0.3, non-contiguous",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 5}, dt, 61)};
                  },
                  [](const V& v) {
  Generator gen(1234);
  return dropout(v[0], 0.3, true, gen);
}});

}  // namespace
