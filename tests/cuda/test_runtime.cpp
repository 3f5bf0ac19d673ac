// The CUDA runtime on a real GPU: device queries, copies, and the caching allocator's counter of
// real allocations staying flat once a repeated training step has warmed it up.
#include "tests/cuda/cuda_test.h"

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

TEST_CASE("cuda runtime reports the device and round-trips bytes", "[cuda]") {
  MT_REQUIRE_GPU();
  const cuda::DeviceInfo info = cuda::device_info(0);
  CHECK(!info.name.empty());
  CHECK(info.major >= 7);  // Tensor Core kernels need sm_70 or newer
  CHECK(info.multiprocessors > 0);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    const Tensor host = dt == DType::i64 ? arange(-50, 77, 1, DType::f32).to(DType::i64) : random({127}, dt, 7);
    const Tensor dev = on_gpu(host);
    CHECK(dev.device() == gpu());
    require_bit_identical(on_cpu(dev), host, std::string("round trip ") + dtype_name(dt));
  }
  REQUIRE_THROWS_WITH(zeros({2}, DType::f32, Device::cuda(cuda::device_count())), Catch::Contains("does not exist"));
  REQUIRE_THROWS_WITH(zeros({2}, DType::f64, gpu()), Catch::Contains("f64 tensors are CPU-only"));
}

TEST_CASE("cuda allocator reuses blocks: no real allocation after a warm-up step", "[cuda]") {
  MT_REQUIRE_GPU();
  // A small CNN step (conv, batch norm, pool, linear, loss, backward, AdamW) run several times.
  Generator gen(3);
  nn::Sequential model(std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(8),
                       std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
                       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8 * 14 * 14, 10, true, gen));
  model.to(gpu());
  AdamW opt(model.parameters(), {.lr = 1e-3});
  const Tensor x = on_gpu(random({16, 1, 28, 28}, DType::f32, 5));
  const Tensor y = on_gpu(from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16}));
  auto step = [&] {
    Tape tape;
    Variable loss = cross_entropy(model(Variable(x)), y);
    opt.zero_grad();
    tape.backward(loss);
    opt.step();
    (void)loss.data().item();
  };
  step();
  step();
  const AllocatorStats warm = cuda::allocator_stats(0);
  for (int i = 0; i < 5; ++i) step();
  const AllocatorStats after = cuda::allocator_stats(0);
  INFO("real allocations after warm-up: " << warm.real_allocs << ", after 5 more steps: " << after.real_allocs
                                          << " (cache hits " << after.cache_hits << ")");
  CHECK(after.real_allocs == warm.real_allocs);
  CHECK(after.cache_hits > warm.cache_hits);
}

TEST_CASE("cuda runtime counters count launches, host synchronizations and real allocations", "[cuda]") {
  MT_REQUIRE_GPU();
  // Note [Runtime counters]: each call below costs exactly what the comment says.
  const Tensor host = random({1000}, DType::f32, 5);
  cuda::RuntimeCounters a = cuda::runtime_counters();
  const Tensor dev = on_gpu(host);  // one host-to-device copy: a synchronization, maybe a cudaMalloc
  cuda::RuntimeCounters b = cuda::runtime_counters();
  CHECK(b.launches == a.launches);
  CHECK(b.host_syncs == a.host_syncs + 1);
  const Tensor twice = unary(UnaryOp::mul_scalar, dev, 2.0);  // one kernel
  cuda::RuntimeCounters c = cuda::runtime_counters();
  CHECK(c.launches == b.launches + 1);
  CHECK(c.host_syncs == b.host_syncs);
  cuda::synchronize(0);
  CHECK(cuda::runtime_counters().host_syncs == c.host_syncs + 1);
  const Tensor back = on_cpu(twice);  // one device-to-host read
  CHECK(cuda::runtime_counters().host_syncs == c.host_syncs + 2);
  // A block the cache already holds is not a real allocation; a size it has never seen is.
  const uint64_t allocs = cuda::runtime_counters().device_allocs;
  { const Tensor again = unary(UnaryOp::mul_scalar, dev, 3.0); }
  { const Tensor again = unary(UnaryOp::mul_scalar, dev, 3.0); }
  const uint64_t reused = cuda::runtime_counters().device_allocs;
  CHECK(reused - allocs <= 1);  // at most the first of the two
  const Tensor big = zeros({int64_t(1) << 22}, DType::f32, gpu());
  CHECK(cuda::runtime_counters().device_allocs == reused + 1);
  CHECK(back.values<float>()[0] == 2.0f * host.values<float>()[0]);
  // A device-to-device copy (a contiguous clone) is work on the stream: one launch, no sync.
  const cuda::RuntimeCounters d = cuda::runtime_counters();
  const Tensor copied = dev.clone();
  CHECK(cuda::runtime_counters().launches == d.launches + 1);
  CHECK(cuda::runtime_counters().host_syncs == d.host_syncs);
  // empty_cache synchronizes, and each cudaFree of a cached block waits for the device too.
  { const Tensor freed = zeros({int64_t(1) << 20}, DType::f32, gpu()); }  // a cached block now
  const uint64_t syncs = cuda::runtime_counters().host_syncs;
  cuda::empty_cache(0);
  CHECK(cuda::runtime_counters().host_syncs >= syncs + 2);
}

TEST_CASE("cuda readout block: one read brings a small value and every readout tensor", "[cuda]") {
  MT_REQUIRE_GPU();
  // Note [Readout block]: a readout tensor written on the device is read with the next
  // synchronization, whatever caused it; reading it again costs nothing until more work is queued.
  Tensor a = readout_zeros({3}, DType::f32, gpu());
  Tensor b = readout_zeros({2}, DType::i64, gpu());
  a.copy_(on_gpu(from_vector(std::vector<float>{1.5f, -2.0f, 4.0f}, {3})));
  b.copy_(on_gpu(from_vector(std::vector<int64_t>{7, -9}, {2})));
  const Tensor x = unary(UnaryOp::mul_scalar, on_gpu(full({1}, 3.0)), 2.0);
  const uint64_t before = cuda::runtime_counters().host_syncs;
  CHECK(x.item() == 6.0);  // a small read: staged into the block, one synchronization
  CHECK(cuda::runtime_counters().host_syncs == before + 1);
  CHECK(a.values<float>() == std::vector<float>{1.5f, -2.0f, 4.0f});  // came with it
  CHECK(b.values<int64_t>() == std::vector<int64_t>{7, -9});
  CHECK(cuda::runtime_counters().host_syncs == before + 1);
  {
    Tensor slot = a.narrow(0, 1, 1);
    slot.copy_(x);  // work queued after the read: the next read of `a` goes to the device
  }
  CHECK(a.values<float>() == std::vector<float>{1.5f, 6.0f, 4.0f});
  CHECK(cuda::runtime_counters().host_syncs == before + 2);
  // A readout tensor's piece goes back to the block and serves the next one of its size.
  const void* where = a.raw_data();
  a = Tensor();
  const Tensor c = readout_zeros({3}, DType::f32, gpu());
  CHECK(c.raw_data() == where);
  CHECK(c.values<float>() == std::vector<float>{0.0f, 0.0f, 0.0f});
}
