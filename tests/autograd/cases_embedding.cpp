// Op cases for embedding (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

MT_OP_CASE(OpCase{"embedding with repeated indices",
                  [](DType dt) {
  return std::vector<Tensor>{from_vector(std::vector<int64_t>{1, 3, 1, 0, 3, 3}, {2, 3}), rand_input({4, 3}, dt, 62)};
                  },
                  [](const V& v) { return embedding(v[0].data(), v[1]); }});

}  // namespace
