// The emulated device (Note [CUDA emulation] in emu.h): the CUDA runtime calls the library makes,
// on host memory, and the block scheduler that runs a kernel's threads as fibers.
//
// Schedule. By default blocks run in order of their index and, between two barriers, the threads
// of a block run one after the other in order of their index. MIXTAPE_EMU_SCHEDULE=reverse runs
// both in the opposite order. A kernel whose result depends on that order reads memory another
// thread or block writes without a barrier between them (a race on a GPU): running the tests
// under both schedules (tests/CMakeLists.txt) catches the races the order can expose.
//
// One device, "mixtape CUDA emulator", compute capability 9.0 (so every kernel path the library
// has for sm_80+ is taken), 132 multiprocessors. Streams are names only: work runs when it is
// launched or copied, so a stream is always idle and synchronizing returns at once.
#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64 (build with MIXTAPE_CUDA=AUTO or OFF)"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/cuda/emu/emu.h"

namespace mt_emu {

ThreadContext* current = nullptr;

cudaError_t last_error = cudaSuccess;  // what cudaGetLastError returns and clears

namespace {

std::string fault;  // a device-side fault of the running launch
constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreads = 1024;
constexpr size_t kMaxDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute, as on the GPU

enum class State { ready, block_barrier, warp_barrier, done };

bool reverse = false;  // MIXTAPE_EMU_SCHEDULE=reverse, read at each launch

// Fiber switching: a saved stack pointer per fiber. mt_emu_switch(&from, to) saves the callee-saved
// registers and the floating-point control words on the current stack, stores the stack pointer
// in *from, and resumes the fiber whose stack pointer is `to` (x86-64 System V). A fresh
// fiber's stack is laid out as if it had been suspended just before entering fiber_entry.
extern "C" void mt_emu_switch(void** from, void* to);
asm(R"(
  .text
  .globl mt_emu_switch
  .type mt_emu_switch, @function
mt_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mt_emu_switch, .-mt_emu_switch
)");

struct Fiber {
  void* sp = nullptr;
  std::vector<char> stack;
  ThreadContext self;
  State state = State::ready;
  int predicate = 0;  // __syncthreads_or's argument, then its result
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // 32 per warp
  std::vector<unsigned char> shared;
  void* scheduler = nullptr;  // the scheduler's saved stack pointer
  Fiber* running = nullptr;
  void (*body)(void*) = nullptr;
  void* closure = nullptr;
};

Block& block() {
  static Block* b = new Block();  // fiber stacks are reused by every launch
  return *b;
}

// The __shared__ variables seen so far (register_shared).
std::vector<std::pair<void*, size_t>>& shared_variables() {
  static auto* v = new std::vector<std::pair<void*, size_t>>();
  return *v;
}

// Suspends the running fiber in `state` and returns to the scheduler.
void suspend(State state) {
  Block& b = block();
  Fiber* f = b.running;
  f->state = state;
  mt_emu_switch(&f->sp, b.scheduler);
}

// A fiber's first frame: runs the thread, then hands control back for good.
[[noreturn]] void fiber_entry() {
  Block& b = block();
  b.body(b.closure);
  b.running->state = State::done;
  mt_emu_switch(&b.running->sp, b.scheduler);
  std::abort();  // a finished fiber is never resumed
}

// The stack of a fiber that has not run: the words mt_emu_switch pops (control words, six
// registers) and fiber_entry as the return address, at a 16-byte boundary so that fiber_entry
// starts with the stack alignment a call gives.
void prepare(Fiber& f) {
  uintptr_t top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) & ~uintptr_t(15);
  auto* words = reinterpret_cast<uint64_t*>(top) - 9;  // 7 saved words, return address, padding
  uint32_t control[2];
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(&words[0], control, 8);
  for (int r = 1; r <= 6; ++r) words[r] = 0;            // r15 r14 r13 r12 rbx rbp
  words[7] = reinterpret_cast<uint64_t>(&fiber_entry);  // at top - 16; `ret` leaves rsp = top - 8
  words[8] = 0;
  f.sp = words;
}

// Releases a barrier when every live thread of `first..last` has reached it. Returns whether it did.
bool release(size_t first, size_t last, State at) {
  Block& b = block();
  bool any = false;
  for (size_t i = first; i < last; ++i) {
    const State s = b.fibers[i].state;
    if (s != at && s != State::done) return false;
    any = any || s == at;
  }
  if (!any) return false;
  int either = 0;
  if (at == State::block_barrier)
    for (size_t i = first; i < last; ++i)
      if (b.fibers[i].state == at) either |= b.fibers[i].predicate != 0;
  for (size_t i = first; i < last; ++i)
    if (b.fibers[i].state == at) {
      b.fibers[i].state = State::ready;
      b.fibers[i].predicate = either;
    }
  return true;
}

std::string describe(const dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// Runs one block to completion. Returns false after recording a fault.
bool run_block(const Config& cfg, uint3 block_idx) {
  Block& b = block();
  // Shared memory starts as garbage in every block, as on a GPU: a value a previous block (or
  // launch) left must not stand in for a write this block forgot or read too early.
  for (const auto& [p, bytes] : shared_variables()) std::memset(p, 0xcd, bytes);
  std::fill(b.shared.begin(), b.shared.end(), static_cast<unsigned char>(0xcd));
  const unsigned n = cfg.block.x * cfg.block.y * cfg.block.z;
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.self.thread_idx = uint3{t % cfg.block.x, (t / cfg.block.x) % cfg.block.y, t / (cfg.block.x * cfg.block.y)};
    f.self.block_idx = block_idx;
    f.self.block_dim = cfg.block;
    f.self.grid_dim = cfg.grid;
    f.self.linear = t;
    f.state = State::ready;
    f.predicate = 0;
    prepare(f);
  }
  for (;;) {
    bool ran = false;
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = b.fibers[reverse ? n - 1 - i : i];
      if (f.state != State::ready) continue;
      ran = true;
      b.running = &f;
      current = &f.self;
      mt_emu_switch(&b.scheduler, f.sp);
      current = nullptr;
      if (!fault.empty()) return false;
    }
    bool all_done = true;
    for (unsigned t = 0; t < n; ++t) all_done = all_done && b.fibers[t].state == State::done;
    if (all_done) return true;
    bool released = false;
    for (unsigned w = 0; w < n; w += 32) released = release(w, std::min(n, w + 32), State::warp_barrier) || released;
    released = release(0, n, State::block_barrier) || released;
    if (!released && !ran) {
      fault = "deadlock in block " + describe(dim3(block_idx.x, block_idx.y, block_idx.z)) +
              ": its threads wait at barriers that can never all be reached (e.g. part of a warp in "
              "__syncwarp or a shuffle while the rest waits in __syncthreads)";
      return false;
    }
  }
}

}  // namespace

void block_barrier() { suspend(State::block_barrier); }

int block_barrier_or(int predicate) {
  Block& b = block();
  b.running->predicate = predicate;
  suspend(State::block_barrier);
  return b.running->predicate;
}

void warp_barrier() { suspend(State::warp_barrier); }

uint64_t* warp_slots() { return block().slots.data() + (current->linear / 32) * 32; }

void* dynamic_shared() { return block().shared.data(); }

bool register_shared(void* p, size_t bytes) {
  shared_variables().emplace_back(p, bytes);
  return true;
}

void trap(const char* what) {
  Block& b = block();
  fault = std::string(what) + " in block " +
          describe(dim3(current->block_idx.x, current->block_idx.y, current->block_idx.z)) + ", thread " +
          describe(dim3(current->thread_idx.x, current->thread_idx.y, current->thread_idx.z));
  b.running->state = State::done;
  mt_emu_switch(&b.running->sp, b.scheduler);
  std::abort();  // never resumed
}

void run(const Config& cfg, void (*body)(void*), void* closure) {
  const unsigned threads = cfg.block.x * cfg.block.y * cfg.block.z;
  if (threads == 0 || threads > kMaxThreads || cfg.block.z > 64 || cfg.grid.x == 0 || cfg.grid.y == 0 ||
      cfg.grid.z == 0 || cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 0x7fffffffu ||
      cfg.smem > kMaxDynamicShared) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  Block& b = block();
  while (b.fibers.size() < threads) {
    b.fibers.emplace_back();
    b.fibers.back().stack.resize(kStackBytes);
  }
  b.slots.assign(((threads + 31) / 32) * 32, 0);
  b.shared.resize(cfg.smem);  // filled with garbage at each block's start
  b.body = body;
  b.closure = closure;
  fault.clear();
  const char* schedule = std::getenv("MIXTAPE_EMU_SCHEDULE");
  reverse = schedule != nullptr && std::string(schedule) == "reverse";
  const uint64_t blocks = uint64_t(cfg.grid.x) * cfg.grid.y * cfg.grid.z;
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t k = reverse ? blocks - 1 - i : i;
    const unsigned x = unsigned(k % cfg.grid.x), y = unsigned(k / cfg.grid.x % cfg.grid.y),
                   z = unsigned(k / (uint64_t(cfg.grid.x) * cfg.grid.y));
    if (!run_block(cfg, uint3{x, y, z})) {
      std::fprintf(stderr, "cuda emulator: kernel fault: %s\n", fault.c_str());
      last_error = cudaErrorLaunchFailure;
      return;
    }
  }
}

}  // namespace mt_emu

// ---- the CUDA runtime API, as far as the library uses it ---------------------------------------

namespace {

int current_device = 0;
int streams_made = 0;
char stream_handles[256];  // stream i is &stream_handles[i]: distinct, non-null

cudaError_t fail(cudaError_t e) {
  mt_emu::last_error = e;
  return e;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "mixtape CUDA emulator");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->totalGlobalMem = size_t(16) << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = size_t(16) << 30;
  *free_bytes = *total;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t n) {
  // 256-byte alignment, like cudaMalloc; the bytes start as garbage, as device memory does.
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::memset(*p, 0xcd, n);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (streams_made >= int(sizeof(stream_handles))) return fail(cudaErrorMemoryAllocation);
  *s = reinterpret_cast<cudaStream_t>(&stream_handles[streams_made++]);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  // Work ran when it was issued; a fault of an earlier launch is reported here as on a GPU.
  return mt_emu::last_error == cudaErrorLaunchFailure ? cudaErrorLaunchFailure : cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  if (n) std::memset(p, value, n);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = mt_emu::last_error;
  mt_emu::last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated kernel fault, see stderr)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return "emulated CUDA error";
  }
}

}  // extern "C"
