// The Communicator over MPI: the one file of mixtape that includes <mpi.h> (Note [Communicator
// seam] in dist/communicator.h).
#include <mpi.h>

#include <cstring>
#include <mutex>
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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() : s_(session()) {
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return detail::cat("mpi (", s_.library, "), ", size_, " ranks"); }

  void broadcast(void* data, size_t bytes, int root) override {
    MT_CHECK(root >= 0 && root < size_, "Communicator::broadcast: root ", root, " of ", size_, " ranks");
    for (size_t done = 0; done < bytes;) {  // counts are ints: chunks of at most 1 GiB
      const size_t n = std::min<size_t>(bytes - done, size_t(1) << 30);
      check_mpi(MPI_Bcast(static_cast<char*>(data) + done, int(n), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
      done += n;
    }
  }

  void all_reduce_max(std::span<double> v) override {
    if (size_ == 1 || v.empty()) return;
    // Maxima are exact in any order: one MPI_Allreduce gives every rank the same values.
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
              "MPI_Allreduce (max)");
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
    check_mpi(MPI_Reduce_scatter_block(padded_.data(), mine_.data(), int(block), type, op, MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
    std::memcpy(padded_.data() + size_t(rank_) * block * esize, mine_.data(), block * esize);
    check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded_.data(), int(block), type, MPI_COMM_WORLD),
              "MPI_Allgather");
    std::memcpy(data, padded_.data(), n * esize);
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  MpiSession& s_;
  int rank_ = 0, size_ = 1;
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
