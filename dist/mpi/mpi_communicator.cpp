// The Communicator over MPI: the one file of mixtape that includes <mpi.h> (Note [Communicator
// seam] in dist/communicator.h).
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "tensor/core/error.h"
#include "tensor/core/half.h"

namespace mixtape::dist {

bool built_with_mpi() { return true; }

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(detail::cat("MPI: ", what, " failed: ", std::string(msg, size_t(len))));
}

// The sums of 16-bit elements (Note [Same bits on every rank]): widened to fp32, added, rounded
// to nearest even once per addition.
void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = bits16::float_to_half_rn(bits16::half_to_float(a[i]) + bits16::half_to_float(b[i]));
}
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = bits16::float_to_bf16_rn(bits16::bf16_to_float(a[i]) + bits16::bf16_to_float(b[i]));
}

// MPI itself, initialized once and finalized when the program ends (after main returns).
struct MpiSession {
  MPI_Op f16_sum = MPI_OP_NULL, bf16_sum = MPI_OP_NULL;
  std::string library;
  MpiSession() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // The ranks call MPI from their main thread only; the OpenMP threads of the kernels never do.
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    check_mpi(MPI_Op_create(&sum_f16, 1, &f16_sum), "MPI_Op_create");
    check_mpi(MPI_Op_create(&sum_bf16, 1, &bf16_sum), "MPI_Op_create");
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library.assign(version, size_t(len));
    if (const size_t cut = library.find_first_of(",\n"); cut != std::string::npos) library.resize(cut);
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&f16_sum);
    MPI_Op_free(&bf16_sum);
    MPI_Finalize();
  }
};

MpiSession& session() {
  static MpiSession s;
  return s;
}

// Note [Waiting for a collective]
// Every collective is started nonblocking (MPI_Ibcast, MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibarrier) and wait() polls it with MPI_Test: without pause for the first
// millisecond, then sleeping between polls, 20 microseconds at first and twice as long each time,
// up to a millisecond. MPI's blocking calls spin at full speed for as long as they wait; a rank
// that waits here for a slower one sleeps almost all that time and leaves its core to the others.
// Open MPI advances a nonblocking collective only inside MPI calls, and the polls are those calls,
// so a collective that outlasts the spin finishes up to one pause late. On 2 ranks of the cnn's
// smoke run (2.3 ms steps, 10 collectives each) this waiting and MPI's own spinning train equally
// fast, within the noise of repeated runs (docs/data-parallel.md).
// When timeout() seconds pass (Note [Collectives that cannot hang] in dist/communicator.h), the
// rank asks every other rank which collective it is waiting in, on a duplicate of MPI_COMM_WORLD
// (tag kAsk; the collectives' own traffic never meets it), and listens for kListenSeconds. A
// waiting rank answers from its polling loop with the number and kind of its collective: the same
// number means it arrived; another means the ranks called their collectives in different orders
// (a bug in the program). A rank that does not answer has not arrived: stopped, hung, dead, or
// still computing. The error names them; the program's error path then ends the job.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() : s_(session()) {
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &watch_), "MPI_Comm_dup");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return detail::cat("mpi (", s_.library, "), ", size_, " ranks"); }

  void broadcast(void* data, size_t bytes, int root) override {
    MT_CHECK(root >= 0 && root < size_, "Communicator::broadcast: root ", root, " of ", size_, " ranks");
    for (size_t done = 0; done < bytes;) {  // counts are ints: chunks of at most 1 GiB
      const size_t n = std::min<size_t>(bytes - done, size_t(1) << 30);
      run(Collective::broadcast, [&](MPI_Request* r) {
        return MPI_Ibcast(static_cast<char*>(data) + done, int(n), MPI_BYTE, root, MPI_COMM_WORLD, r);
      });
      done += n;
    }
  }

  void all_reduce_max(std::span<double> v) override {
    if (size_ == 1 || v.empty()) return;
    // Maxima are exact in any order: one MPI_Allreduce gives every rank the same values.
    run(Collective::all_reduce_max, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, r);
    });
  }

  // Note [Same bits on every rank]: reduce-scatter, then all-gather.
  void all_reduce_sum(void* data, size_t n, DType dtype) override {
    if (size_ == 1 || n == 0) return;
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    switch (dtype) {
      case DType::f32: break;
      case DType::f64: type = MPI_DOUBLE; break;
      case DType::f16: type = MPI_UINT16_T, op = s_.f16_sum; break;
      case DType::bf16: type = MPI_UINT16_T, op = s_.bf16_sum; break;
      default: throw Error(detail::cat("Communicator::all_reduce_sum: cannot sum ", dtype_name(dtype)));
    }
    const size_t esize = dtype_size(dtype);
    const size_t block = (n + size_t(size_) - 1) / size_t(size_);
    MT_CHECK(block <= size_t(1) << 30, "Communicator::all_reduce_sum: ", n, " elements are too many for one call");
    padded_.assign(block * size_t(size_) * esize, 0);  // zeros beyond n: they sum to zeros
    std::memcpy(padded_.data(), data, n * esize);
    mine_.resize(block * esize);
    run(Collective::reduce_scatter, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(padded_.data(), mine_.data(), int(block), type, op, MPI_COMM_WORLD, r);
    });
    std::memcpy(padded_.data() + size_t(rank_) * block * esize, mine_.data(), block * esize);
    run(Collective::all_gather, [&](MPI_Request* r) {
      return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded_.data(), int(block), type, MPI_COMM_WORLD, r);
    });
    std::memcpy(data, padded_.data(), n * esize);
  }

  void barrier() override {
    run(Collective::barrier, [](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); });
  }

 private:
  enum class Collective : int64_t { broadcast, all_reduce_max, reduce_scatter, all_gather, barrier };
  static const char* collective_name(int64_t c) {
    switch (Collective(c)) {
      case Collective::broadcast: return "broadcast (MPI_Ibcast)";
      case Collective::all_reduce_max: return "all-reduce of maxima (MPI_Iallreduce)";
      case Collective::reduce_scatter: return "gradient all-reduce, reduce-scatter (MPI_Ireduce_scatter_block)";
      case Collective::all_gather: return "gradient all-reduce, all-gather (MPI_Iallgather)";
      case Collective::barrier: return "barrier (MPI_Ibarrier)";
    }
    return "unknown collective";
  }
  static constexpr int kAsk = 1, kAnswer = 2;  // tags on watch_
  static constexpr double kListenSeconds = 2.0;
  using Clock = std::chrono::steady_clock;

  // Starts collective `c` (start(&request) is the nonblocking MPI call) and waits for it. The
  // collective's number and kind are what this rank answers while it waits. After a timeout the
  // abandoned collective may still complete on other ranks, so the communicator refuses any more.
  template <class Start>
  void run(Collective c, Start&& start) {
    MT_CHECK(!timed_out_, "dist: a collective timed out on this rank earlier; its communicator cannot be used again");
    ++seq_;
    kind_ = c;
    MPI_Request r = MPI_REQUEST_NULL;
    check_mpi(start(&r), collective_name(int64_t(c)));
    wait(r);
  }

  // Note [Waiting for a collective].
  void wait(MPI_Request& r) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
    std::chrono::microseconds pause(20);
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE), collective_name(int64_t(kind_)));
      if (done) return;
      answer_questions();
      const Clock::time_point now = Clock::now();
      if (now >= deadline) timed_out();
      if (now - start < std::chrono::microseconds(1000)) continue;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  // Answers every rank that asked which collective this one is waiting in.
  void answer_questions() {
    for (auto it = answers_.begin(); it != answers_.end();) {  // the answers already delivered
      int sent = 0;
      check_mpi(MPI_Test(&it->request, &sent, MPI_STATUS_IGNORE), "MPI_Test (timeout answer)");
      it = sent ? answers_.erase(it) : std::next(it);
    }
    for (;;) {
      int asked = 0;
      MPI_Status st;
      check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kAsk, watch_, &asked, &st), "MPI_Iprobe (timeout question)");
      if (!asked) return;
      int64_t question = 0;
      check_mpi(MPI_Recv(&question, 1, MPI_INT64_T, st.MPI_SOURCE, kAsk, watch_, MPI_STATUS_IGNORE),
                "MPI_Recv (timeout question)");
      Answer& a = answers_.emplace_back();
      a.payload[0] = seq_;
      a.payload[1] = int64_t(kind_);
      check_mpi(MPI_Isend(a.payload, 2, MPI_INT64_T, st.MPI_SOURCE, kAnswer, watch_, &a.request),
                "MPI_Isend (timeout answer)");
    }
  }

  // Finds the ranks that did not arrive (Note [Waiting for a collective]) and throws.
  [[noreturn]] void timed_out() {
    timed_out_ = true;
    question_ = seq_;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Request ask = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(&question_, 1, MPI_INT64_T, q, kAsk, watch_, &ask), "MPI_Isend (timeout question)");
      MPI_Request_free(&ask);  // a stopped rank never takes it
    }
    std::vector<int64_t> at(size_t(size_), -1), kind(size_t(size_), -1);
    at[size_t(rank_)] = seq_;
    int answered = 1;
    const Clock::time_point until =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kListenSeconds));
    while (answered < size_ && Clock::now() < until) {
      answer_questions();  // ranks that time out together name each other as arrived
      int got = 0;
      MPI_Status st;
      check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kAnswer, watch_, &got, &st), "MPI_Iprobe (timeout answer)");
      if (!got) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      int64_t payload[2] = {0, 0};
      check_mpi(MPI_Recv(payload, 2, MPI_INT64_T, st.MPI_SOURCE, kAnswer, watch_, MPI_STATUS_IGNORE),
                "MPI_Recv (timeout answer)");
      if (at[size_t(st.MPI_SOURCE)] < 0) ++answered;
      at[size_t(st.MPI_SOURCE)] = payload[0];
      kind[size_t(st.MPI_SOURCE)] = payload[1];
    }
    std::string missing, elsewhere;
    for (int q = 0; q < size_; ++q) {
      if (at[size_t(q)] < 0) missing += detail::cat(missing.empty() ? "" : ", ", q);
      else if (at[size_t(q)] != seq_)
        elsewhere +=
            detail::cat("; rank ", q, " waits in collective ", at[size_t(q)], ", a ", collective_name(kind[size_t(q)]),
                        " (the ranks call their collectives in different orders)");
    }
    throw Error(detail::cat("dist: the ", collective_name(int64_t(kind_)), ", collective ", seq_, " of this run, ",
                            step_ > 0 ? detail::cat("at step ", step_) : std::string("before the first step"),
                            ", timed out after ", timeout_, " s on rank ", rank_, " of ", size_, ": ",
                            missing.empty()
                                ? std::string("every rank answered")
                                : detail::cat("rank(s) ", missing, " did not arrive (stopped, hung or much slower)"),
                            elsewhere, "; --dist-timeout sets the limit"));
  }

  struct Answer {
    int64_t payload[2] = {0, 0};
    MPI_Request request = MPI_REQUEST_NULL;
  };

  MpiSession& s_;
  int rank_ = 0, size_ = 1;
  MPI_Comm watch_ = MPI_COMM_NULL;  // the timeout's questions and answers
  int64_t seq_ = 0;                 // collectives started by this rank
  Collective kind_ = Collective::barrier;
  int64_t question_ = 0;
  bool timed_out_ = false;
  std::list<Answer> answers_;        // in flight; a list keeps their buffers in place
  std::vector<char> padded_, mine_;  // reused between calls
};

}  // namespace

std::shared_ptr<Communicator> mpi_world() {
  static std::mutex m;
  static std::shared_ptr<Communicator> world;
  std::lock_guard lock(m);
  if (!world) world = std::make_shared<MpiCommunicator>();
  return world;
}

void abort_all(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace mixtape::dist
