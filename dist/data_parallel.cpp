#include "dist/data_parallel.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "autograd/scaling.h"
#include "autograd/tape.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/optim.h"

namespace mixtape::dist {

// Note [Gradient all-reduce]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// After backward each rank holds, per parameter, a ScaledGrad {g_r, alpha_r}: g_r = alpha_r x its
// shard's mean gradient, stored in the parameter's dtype (f32 under the fp32 and mixed policies,
// f16 / bf16 under the pure ones). The step needs the average over the N ranks, the same bits on
// every rank. Per step:
//   1. vote   one element-wise maximum over the ranks of a few numbers per parameter: -log2
//             alpha_r (so the maximum gives the smallest scale, 2^e = min_r alpha_r), whether the
//             rank has a gradient, this rank's inf/NaN flag, and a fingerprint of the parameters'
//             names, shapes and dtypes (mismatched ranks stop here, with a message);
//   2. align  g_r x 2^(e - log2 alpha_r - k), k = ceil(log2 N): a power of two <= 2^-k, exact
//             unless a value underflows. It brings every rank to the common scale 2^e (the
//             smallest: no rank's gradient is scaled up, so none can overflow) and pre-divides
//             by 2^k >= N, so that the sum of N aligned values, each at most lambda_max / 2^k in
//             magnitude, is at most lambda_max: a 16-bit sum cannot overflow where every addend
//             was finite (docs/mixed-precision.md has the numbers);
//   3. sum    the aligned gradients, packed per dtype into one buffer, summed with the same bits on
//             every rank (Note [Same bits on every rank] in communicator.h);
//   4. mean   the sum carries 2^(e-k) x N x the mean. For N a power of two that is 2^e x the
//             mean: the result is {sum, 2^e} with no further rounding. Otherwise the sum is
//             multiplied by 2^k / N (in [1, 2): it cannot overflow the bound of step 2) in fp32
//             and rounded once;
//   5. skip   if any rank voted inf/NaN, GradSync::any_overflow says so on every rank, and the
//             trainer passes it to the step (scaled_step's overflow_elsewhere): the loss scaler
//             sees an overflow on every rank and skips the step and backs off identically
//             everywhere (the sums carry an inf or NaN anyway, IEEE addition propagates them;
//             the vote makes the decision not depend on it).
// The loss scaler and the optimizer then run as on one process (optim/scaled_step.h).
// Gradient scaling's per-node scales are agreed while backward runs (Note [Scales agreed
// across processes]); the min of step 1 also reconciles any scale a rank chose alone (a branch
// sum's common scale, Note [Overflow-free branch sum]).

namespace {

constexpr double kAbsent = -1e9;  // a vote for "no gradient here"

// FNV-1a over bytes, folded to 52 bits so that it travels exactly in a double.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  void add(int64_t v) { add(&v, sizeof v); }
  uint64_t value() const { return h & ((uint64_t(1) << 52) - 1); }
};

void add_meta(Fingerprint& f, const Tensor& t) {
  f.add(int64_t(t.dtype()));
  f.add(int64_t(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) f.add(t.size(d));
}

// A CPU tensor's bytes, contiguous.
Tensor host_contiguous(const Tensor& t, const char* what) {
  MT_CHECK(t.device().is_cpu(), "DataParallel: ", what, " is on ", t.device(),
           "; the MPI communicator works on CPU tensors (GPUs need a NCCL communicator: docs/data-parallel.md)");
  return t.contiguous();
}

size_t nbytes(const Tensor& t) { return size_t(t.numel()) * dtype_size(t.dtype()); }

int exponent_of(float scale) {
  int e = 0;
  std::frexp(scale, &e);
  return e - 1;
}

// g x 2^shift for shift <= 0, exact unless values underflow (in steps float's normal powers of
// two can express).
Tensor shift_down(Tensor g, int shift) {
  while (shift < -126) {
    g = rescale(g, std::ldexp(1.0f, -126));
    shift += 126;
  }
  return rescale(g, std::ldexp(1.0f, shift));
}

// ---- the stages of all_reduce_gradients (Note [Gradient all-reduce]) ------------------------

// 1. What the ranks agreed, per parameter.
struct Vote {
  std::vector<int> exponent;  // e: 2^e is the smallest scale any rank holds
  std::vector<bool> present;  // some rank has a gradient
  bool local_overflow = false, any_overflow = false;
};

Vote vote(Communicator& comm, const std::vector<Variable>& params, int rank, int ranks) {
  const size_t P = params.size();
  std::vector<double> votes(2 * P + 3, kAbsent);
  Fingerprint f;
  std::vector<Tensor> local;
  for (size_t i = 0; i < P; ++i) {
    const std::optional<ScaledGrad>& g = params[i].grad();
    f.add(params[i].name());
    add_meta(f, params[i].data());
    votes[P + i] = 0.0;
    if (!g || !g->defined()) continue;
    MT_CHECK(g->g.dtype() == params[i].dtype() && g->g.shape() == params[i].shape(), "DataParallel: the gradient of '",
             params[i].name(), "' ", g->g.meta(), " does not match the parameter ", params[i].data().meta());
    MT_CHECK(is_power_of_two(g->scale), "DataParallel: the gradient of '", params[i].name(), "' carries scale ",
             g->scale, ", not a power of two");
    host_contiguous(g->g, "a gradient");
    votes[i] = -double(exponent_of(g->scale));
    votes[P + i] = 1.0;
    local.push_back(g->g);
  }
  Vote v;
  for (const GradStats& st : grad_stats(local)) v.local_overflow = v.local_overflow || st.has_inf_nan;
  votes[2 * P] = v.local_overflow ? 1.0 : 0.0;
  votes[2 * P + 1] = double(f.value());
  votes[2 * P + 2] = -double(f.value());
  comm.all_reduce_max(votes);
  MT_CHECK(votes[2 * P + 1] == -votes[2 * P + 2],
           "DataParallel: the ranks hold different parameters (names, shapes or dtypes); rank ", rank, " of ", ranks);
  v.any_overflow = votes[2 * P] > 0.0;
  for (size_t i = 0; i < P; ++i) {
    v.present.push_back(votes[P + i] > 0.0);
    v.exponent.push_back(int(-votes[i]));
  }
  return v;
}

// 2. The aligned gradients, packed per dtype group (f32, f64, f16, bf16) into one buffer.
struct Slot {
  size_t param, offset;  // offset within its group
  int e;
};
struct Packed {
  std::vector<Slot> slots;
  std::vector<Tensor> aligned;  // per parameter; undefined where no rank has a gradient
  size_t offsets[4] = {0, 0, 0, 0}, base[4] = {0, 0, 0, 0}, total = 0;
};
constexpr DType kGroupTypes[4] = {DType::f32, DType::f64, DType::f16, DType::bf16};
int group_of(DType t) {
  for (int grp = 0; grp < 4; ++grp)
    if (kGroupTypes[grp] == t) return grp;
  return -1;
}

Packed align_and_pack(const std::vector<Variable>& params, const Vote& v, int ranks, std::vector<char>& buffer) {
  const int k = int(std::ceil(std::log2(double(ranks))));
  Packed p;
  p.aligned.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!v.present[i]) continue;  // no rank has a gradient
    const DType dt = params[i].dtype();
    const int grp = group_of(dt);
    MT_CHECK(grp >= 0, "DataParallel: cannot all-reduce the ", dtype_name(dt), " gradient of '", params[i].name(), "'");
    const int e = v.exponent[i];
    const std::optional<ScaledGrad>& g = params[i].grad();
    if (g && g->defined()) p.aligned[i] = shift_down(g->g, e - exponent_of(g->scale) - k).contiguous();
    else p.aligned[i] = zeros(params[i].shape(), dt);  // another rank has one: this one adds zeros
    p.slots.push_back({i, p.offsets[grp], e});
    p.offsets[grp] += nbytes(p.aligned[i]);
  }
  for (int grp = 0; grp < 4; ++grp) {
    p.base[grp] = p.total;
    p.total += (p.offsets[grp] + 7) / 8 * 8;
  }
  buffer.resize(p.total);
  for (const Slot& s : p.slots) {
    const Tensor& a = p.aligned[s.param];
    std::memcpy(buffer.data() + p.base[group_of(a.dtype())] + s.offset, a.raw_data(), nbytes(a));
  }
  return p;
}

// 3. The sums, one collective per dtype group.
void sum_packed(Communicator& comm, const Packed& p, std::vector<char>& buffer) {
  for (int grp = 0; grp < 4; ++grp)
    if (p.offsets[grp] > 0)
      comm.all_reduce_sum(buffer.data() + p.base[grp], p.offsets[grp] / dtype_size(kGroupTypes[grp]), kGroupTypes[grp]);
}

// 4. Each parameter's gradient becomes the mean, at the agreed scale 2^e. Returns how many.
size_t set_means(const std::vector<Variable>& params, const Packed& p, const std::vector<char>& buffer, int ranks) {
  const int k = int(std::ceil(std::log2(double(ranks))));
  const bool power_of_two = (1 << k) == ranks;
  for (const Slot& s : p.slots) {
    const Tensor& a = p.aligned[s.param];
    Tensor sum = empty(a.shape(), a.dtype());
    std::memcpy(sum.raw_data(), buffer.data() + p.base[group_of(a.dtype())] + s.offset, nbytes(a));
    if (!power_of_two)
      sum = (sum.to(a.dtype() == DType::f64 ? DType::f64 : DType::f32) * (double(1 << k) / ranks)).to(a.dtype());
    Variable param = params[s.param];  // a handle: the parameter itself
    param.set_grad(ScaledGrad{sum, std::ldexp(1.0f, s.e)});
  }
  return p.slots.size();
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  MT_CHECK(comm_ != nullptr, "DataParallel: no communicator");
}

int64_t DataParallel::shard_size(int64_t global) const {
  MT_CHECK(global > 0 && global % size() == 0, "DataParallel: a global batch of ", global, " rows does not split into ",
           size(), " equal shards; choose a batch size divisible by the number of ranks");
  return global / size();
}

Tensor DataParallel::shard_rows(const Tensor& batch) const {
  if (!distributed()) return batch;
  const int64_t n = shard_size(batch.size(0));
  return batch.narrow(0, int64_t(rank()) * n, n);
}

void DataParallel::check_same(uint64_t fingerprint, const char* what) {
  double v[2] = {double(fingerprint), -double(fingerprint)};
  comm_->all_reduce_max(v);
  MT_CHECK(v[0] == -v[1], "DataParallel: the ranks disagree on ", what,
           " (started with different flags or models?); rank ", rank(), " of ", size());
}

void DataParallel::broadcast(Tensor& t) {
  const Tensor c = host_contiguous(t, "a broadcast tensor");
  Fingerprint f;
  add_meta(f, c);
  check_same(f.value(), "a broadcast tensor's shape or dtype");
  comm_->broadcast(c.raw_data(), nbytes(c), 0);
  if (!c.same_storage(t)) t.copy_(c);
}

uint64_t DataParallel::broadcast(uint64_t value) {
  comm_->broadcast(&value, sizeof value, 0);
  return value;
}

void DataParallel::broadcast(nn::Module& model) {
  if (!distributed()) return;
  NoGrad no_grad;
  Fingerprint f;
  const TensorDict state = model.state_dict();
  for (const auto& [name, t] : state.tensors) {
    f.add(name);
    add_meta(f, t);
  }
  const TensorDict gens = model.generator_state();
  for (const auto& [key, v] : gens.metadata) f.add(key);
  check_same(f.value(), "the model's parameters, buffers or generators");
  for (const auto& [name, t] : state.tensors) {
    Tensor dst = t;
    broadcast(dst);
  }
  // The generators' states as text (decimal seeds and offsets), rank 0's.
  std::string text;
  for (const auto& [key, v] : gens.metadata) text += key + "=" + v + "\n";
  uint64_t len = broadcast(uint64_t(text.size()));
  text.resize(len);
  comm_->broadcast(text.data(), len, 0);
  TensorDict loaded;
  for (size_t pos = 0; pos < text.size();) {
    const size_t eq = text.find('=', pos), nl = text.find('\n', pos);
    MT_ASSERT(eq != std::string::npos && nl != std::string::npos && eq < nl);
    loaded.set_meta(text.substr(pos, eq - pos), text.substr(eq + 1, nl - eq - 1));
    pos = nl + 1;
  }
  model.load_generator_state(loaded);
}

void DataParallel::sync_buffers(nn::Module& model) {
  if (!distributed()) return;
  NoGrad no_grad;
  for (auto& [name, t] : model.named_buffers()) {
    const Tensor c = host_contiguous(t, "a buffer");
    comm_->broadcast(c.raw_data(), nbytes(c), 0);
    if (!c.same_storage(t)) t.copy_(c);
  }
}

void DataParallel::mean_over_ranks(std::span<double> values) {
  if (!distributed() || values.empty()) return;
  comm_->all_reduce_sum(values.data(), values.size(), DType::f64);
  for (double& v : values) v /= double(size());
}

void DataParallel::max_over_processes(std::span<double> votes) { comm_->all_reduce_max(votes); }

GradSync DataParallel::all_reduce_gradients(const std::vector<Variable>& params) {
  const auto t0 = std::chrono::steady_clock::now();
  GradSync sync;
  if (!distributed()) return last_ = sync;
  NoGrad no_grad;
  const Vote v = vote(*comm_, params, rank(), size());         // Note [Gradient all-reduce]: 1
  Packed packed = align_and_pack(params, v, size(), buffer_);  // 2
  sum_packed(*comm_, packed, buffer_);                         // 3
  sync.grads = set_means(params, packed, buffer_, size());     // 4
  sync.bytes = packed.total;
  sync.local_overflow = v.local_overflow;
  sync.any_overflow = v.any_overflow;  // 5: the trainer's step skips on every rank
  sync.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  total_seconds_ += sync.seconds;
  return last_ = sync;
}

bool DataParallel::identical(const std::vector<Variable>& params) {
  Fingerprint f;
  for (const Variable& p : params) {
    const Tensor c = host_contiguous(p.data(), "a parameter");
    add_meta(f, c);
    f.add(c.raw_data(), nbytes(c));
  }
  double v[2] = {double(f.value()), -double(f.value())};
  comm_->all_reduce_max(v);
  return v[0] == -v[1];
}

bool DataParallel::identical(const nn::Module& model) {
  std::vector<Variable> all = model.parameters();
  for (const auto& [name, t] : model.named_buffers()) all.emplace_back(t, false, name);
  return identical(all);
}

}  // namespace mixtape::dist
