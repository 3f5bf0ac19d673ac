// Embedding on the GPU against the CPU kernels (tensor/cpu/embedding.cpp): f32, f16, bf16,
// contiguous and strided inputs, repeated and out-of-range indices, forward and backward.
#include "tests/cuda/cuda_test.h"

#include <algorithm>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

TEST_CASE("cuda embedding forward copies rows bit for bit", "[cuda]") {
  MT_REQUIRE_GPU();
  const std::vector<Shape> index_shapes = {{1}, {7}, {3, 5}, {33}, {4, 9, 2}};
  uint64_t seed = 900;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t D : {1, 5, 33})
      for (const Shape& is : index_shapes)
        for (bool strided : {false, true}) {
          ++seed;
          const int64_t V = 17;
          std::vector<int64_t> idx(size_t(numel_of(is)));
          for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 7 + seed) % 5) * 3 + int64_t(i % 2);  // repeats
          const Tensor indices = from_vector(idx, is);
          const Tensor weight = random({V, D}, dt, seed);
          const std::string what = std::string(dtype_name(dt)) + " D=" + std::to_string(D) + " indices " +
                                   shape_str(is) + " " + layout_name(strided);
          require_bit_identical(embedding(gpu_input(indices, strided), gpu_input(weight, strided)),
                                embedding(indices, weight), what);
        }
}

TEST_CASE("cuda embedding rejects out-of-range indices like the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor weight = on_gpu(random({17, 4}, DType::f32, 1));
  const Tensor dy = on_gpu(random({5, 4}, DType::f32, 2));
  for (int64_t bad : {int64_t(-1), int64_t(17), int64_t(1) << 40}) {
    const Tensor indices = on_gpu(from_vector(std::vector<int64_t>{0, 16, bad, 3, bad}, {5}));
    // The check is read with the next synchronization (Note [Deferred device checks]).
    REQUIRE_THROWS_WITH(on_cpu(embedding(indices, weight)), Catch::Contains("embedding: index " + std::to_string(bad) +
                                                                            " (at position 2) is out of range "
                                                                            "for 17 rows"));
    REQUIRE_THROWS_WITH(on_cpu(embedding_backward(indices, dy, 17)),
                        Catch::Contains("embedding backward: index " + std::to_string(bad)) &&
                            Catch::Contains("out of range for 17 rows"));
  }
  // The stream is still usable after the error.
  const Tensor ok = on_gpu(from_vector(std::vector<int64_t>{0, 16}, {2}));
  require_bit_identical(embedding(ok, weight), embedding(on_cpu(ok), on_cpu(weight)), "after an error");
}

TEST_CASE("cuda embedding backward accumulates repeated indices bit for bit", "[cuda]") {
  MT_REQUIRE_GPU();
  // Index counts around the shared-memory sort tile (2048) exercise both sort paths; V leaves
  // some rows unused (their gradient is zero) and many indices repeat.
  uint64_t seed = 1300;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n : {1, 2, 7, 33, 1000, 2048, 2049, 5000})
      for (int64_t D : {1, 5, 33})
        for (bool strided : {false, true}) {
          if (n >= 2048 && D == 33 && dt != DType::f32) continue;  // keep the run short
          ++seed;
          const int64_t V = n < 10 ? 9 : 40;
          std::vector<int64_t> idx(static_cast<size_t>(n));
          Generator gen(seed);
          const std::vector<double> u = uniform({n}, 0.0, 1.0, gen, DType::f64).to_vector();
          for (size_t i = 0; i < idx.size(); ++i)
            idx[i] = std::min<int64_t>(V - 3, int64_t(u[i] * u[i] * double(V - 2)));
          // 2-D indices when n factors, to exercise the leading-dims view of dy.
          const Shape is = n % 2 == 0 ? Shape{2, n / 2} : Shape{n};
          const Tensor indices = from_vector(idx, is);
          Shape dys = is;
          dys.push_back(D);
          const Tensor dy = random(dys, dt, seed, -2.0, 2.0);
          const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " D=" + std::to_string(D) +
                                   " " + layout_name(strided);
          require_bit_identical(embedding_backward(gpu_input(indices, strided), gpu_input(dy, strided), V),
                                embedding_backward(indices, dy, V), what);
        }
  // No indices: a zero gradient.
  const Tensor none = from_vector(std::vector<int64_t>{}, {0});
  const Tensor dy0 = zeros({0, 3});
  require_bit_identical(embedding_backward(on_gpu(none), on_gpu(dy0), 4), zeros({4, 3}), "no indices");
}

TEST_CASE("cuda embedding backward gives the padding row no gradient, as the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 1700;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t padding_idx : {int64_t(0), int64_t(3), int64_t(8)})
      for (bool strided : {false, true}) {
        ++seed;
        const int64_t V = 9, n = 40, D = 5;
        std::vector<int64_t> idx(static_cast<size_t>(n));
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 7 + seed) % size_t(V));  // every row, padding too
        const Tensor indices = from_vector(idx, {4, n / 4});
        const Tensor dy = random({4, n / 4, D}, dt, seed, -2.0, 2.0);
        const std::string what =
            std::string(dtype_name(dt)) + " padding_idx=" + std::to_string(padding_idx) + " " + layout_name(strided);
        const Tensor want = embedding_backward(indices, dy, V, padding_idx);
        require_bit_identical(embedding_backward(gpu_input(indices, strided), gpu_input(dy, strided), V, padding_idx),
                              want, what);
        CHECK(sum(abs(want.select(0, padding_idx).to(DType::f64))).item() == 0.0);
        CHECK(sum(abs(want.to(DType::f64))).item() > 0.0);
      }
}
