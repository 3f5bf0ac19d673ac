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
// has for sm_80+ is taken), 132 multiprocessors. By default work runs when it is launched or
// copied, so a stream is always idle and synchronizing returns at once; in deferred mode it waits
// in a queue (Note [Deferred execution]).
//
// Note [Device memory checks]
// Device memory is a reserved range of the address space (kHeapBytes, mapped as it is handed
// out), so one comparison tells a device address from any other. Each cudaMalloc gets its own
// pages with at least kGuard bytes of unmapped-for-use guard on either side, and the runtime keeps
// the exact extent of every allocation: the caching allocator rounds requests up to size classes,
// so it reports each hand-out and return (Note [Block observer] in tensor/core/block_cache.h) and
// the extent is the request, not the class. Every load and store of the emulated .cu files calls
// check_access (emulate.cmake compiles them with GCC's kernel-address instrumentation, one call
// per access), and the emulator's own copies and memsets check their ranges. An access outside
// every live allocation (past the end, before the start, into a block its owner gave back, into
// the unmapped gaps) fails the launch with the kernel, the block, the thread, the address and the
// nearest allocation, as compute-sanitizer's memcheck would on a GPU. Lifetimes follow stream
// order: a block given back while kernels queued before the return still use it stays valid for
// them (the caching allocator's reuse is safe on one stream), but not for later ones.
//
// Note [Deferred execution]
// MIXTAPE_EMU_DEFERRED=1 (the reverse-schedule run of the tests sets it) queues every kernel,
// device copy and memset in issue order (one queue; the library uses one stream per device) and
// runs them only when the host waits: cudaStreamSynchronize, cudaDeviceSynchronize,
// cudaEventSynchronize (up to the event), a copy between the device and pageable host memory
// (the CUDA runtime waits for the stream there too), cudaFree and cudaFreeHost. So the host sees
// what it would see on a GPU: results only after a wait, and a kernel fault at the next wait.
// Pinned host memory (cudaMallocHost / cudaHostAlloc) is where asynchrony can bite, and it is
// watched: while a queued copy will write a pinned buffer, its pages are inaccessible, and while a
// queued copy will read one, read-only; a host access that trips this (reading a result without
// waiting, refilling a staging buffer too early) is reported with the buffer and the pending
// copy, and then allowed, so the program goes on to fail as it would. cudaFreeHost of a buffer
// that a queued copy or kernel still uses (a pointer to it among the kernel's arguments) is
// reported too. Reported host faults make the next cudaGetLastError / synchronization return
// cudaErrorIllegalAddress, and mt_emu::last_fault() has the message.
// The fiber switch: x86-64 assembly (a few instructions), or anywhere else (and on x86-64 with
// MIXTAPE_EMU_UCONTEXT defined, to test it) POSIX ucontext, which also saves and restores the
// signal mask at every switch: correct everywhere, several times slower.
#if defined(__x86_64__) && !defined(MIXTAPE_EMU_UCONTEXT)
#define MT_EMU_ASM_SWITCH 1
#else
#define MT_EMU_ASM_SWITCH 0
#endif

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <asm/sigcontext.h>  // the ESR record of a fault's context
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "tensor/core/block_cache.h"
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

#if MT_EMU_ASM_SWITCH
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

// Where a suspended fiber (or the scheduler) resumes.
struct Resume {
  void* sp = nullptr;
};
void switch_to(Resume& from, Resume& to) { mt_emu_switch(&from.sp, to.sp); }
#else
struct Resume {
  ucontext_t context;
};
void switch_to(Resume& from, Resume& to) {
  if (swapcontext(&from.context, &to.context) != 0) std::abort();
}
#endif

struct Fiber {
  Resume at;
  std::vector<char> stack;
  ThreadContext self;
  State state = State::ready;
  int predicate = 0;           // __syncthreads_or's argument, then its result
  unsigned scratch_calls = 0;  // warp_scratch calls so far in this block
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // 32 per warp
  std::vector<unsigned char> shared;
  std::vector<float> scratch;  // warp_scratch
  Resume scheduler;            // where the scheduler resumes
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
  switch_to(f->at, b.scheduler);
}

// A fiber's first frame: runs the thread, then hands control back for good.
[[noreturn]] void fiber_entry() {
  Block& b = block();
  b.body(b.closure);
  b.running->state = State::done;
  switch_to(b.running->at, b.scheduler);
  std::abort();  // a finished fiber is never resumed
}

#if MT_EMU_ASM_SWITCH
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
  f.at.sp = words;
}
#else
// A fiber that has not run starts in fiber_entry on its own stack, with this thread's signal mask
// and floating-point environment (getcontext's).
void prepare(Fiber& f) {
  if (getcontext(&f.at.context) != 0) std::abort();
  f.at.context.uc_stack.ss_sp = f.stack.data();
  f.at.context.uc_stack.ss_size = f.stack.size();
  f.at.context.uc_link = nullptr;  // fiber_entry never returns
  makecontext(&f.at.context, fiber_entry, 0);
}
#endif

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
    f.scratch_calls = 0;
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
      switch_to(b.scheduler, f.at);
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
      fault = "deadlock in kernel " + std::string(cfg.kernel) + ", block " +
              describe(dim3(block_idx.x, block_idx.y, block_idx.z)) +
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

// ---- device memory (Note [Device memory checks]) -------------------------------------------------

namespace {

constexpr size_t kHeapBytes = size_t(1) << 40;  // reserved, never committed as a whole
constexpr size_t kGuard = 256;                  // at least, on each side; keeps cudaMalloc's alignment
constexpr uint64_t kForever = ~uint64_t(0);

uintptr_t heap_lo = 0;  // [heap_lo, heap_lo + kHeapBytes): device memory
size_t heap_used = 0;   // bump pointer: addresses are never reused, so a stale pointer stays stale
size_t page_bytes = 4096;

// One allocation as its owner sees it: [lo, hi), valid for operations issued from sequence
// number `from` (inclusive) until `until` (exclusive).
struct Extent {
  uintptr_t lo, hi;
  uint64_t from, until;
};
// A cudaMalloc: its mapped pages [map_lo, map_hi), the user range [lo, lo + bytes).
struct Span {
  uintptr_t map_lo, map_hi, lo;
  size_t bytes;
};

std::map<uintptr_t, Span>& spans() {
  static auto* m = new std::map<uintptr_t, Span>();
  return *m;
}
std::map<uintptr_t, Extent>& live() {  // by lo; at most one per start address
  static auto* m = new std::map<uintptr_t, Extent>();
  return *m;
}
std::vector<Extent>& retired() {  // given back while queued operations may still use them
  static auto* v = new std::vector<Extent>();
  return *v;
}

uint64_t next_seq = 0;     // sequence number of the next queued operation
uint64_t running_seq = 0;  // of the operation now running
const Config* running_cfg = nullptr;
// The last extents accesses fell in (a small cache in front of the map: a kernel touches a few
// buffers in turn).
constexpr int kHits = 4;
Extent hits[kHits] = {};
int next_hit = 0;
void forget_hits() {
  for (Extent& h : hits) h = Extent{0, 0, 0, 0};
}

bool in_heap(uintptr_t a) { return heap_lo != 0 && a - heap_lo < kHeapBytes; }

void reserve_heap() {
  if (heap_lo) return;
  page_bytes = size_t(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, kHeapBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulator: cannot reserve %zu bytes of address space for device memory\n", kHeapBytes);
    std::abort();
  }
  heap_lo = reinterpret_cast<uintptr_t>(p);
}

std::string hex(uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

// Whether [a, a + n) lies in one allocation valid for the operation with sequence number seq.
bool valid(uintptr_t a, size_t n, uint64_t seq) {
  for (const Extent& h : hits)
    if (a >= h.lo && a + n <= h.hi && seq >= h.from && seq < h.until) return true;
  auto& m = live();
  auto it = m.upper_bound(a);
  if (it != m.begin()) {
    const Extent& e = std::prev(it)->second;
    if (a >= e.lo && a + n <= e.hi && seq >= e.from && seq < e.until) {
      hits[next_hit] = e;
      next_hit = (next_hit + 1) % kHits;
      return true;
    }
  }
  for (const Extent& e : retired())
    if (a >= e.lo && a + n <= e.hi && seq >= e.from && seq < e.until) return true;
  return false;
}

// Why [a, a + n) is not valid for seq, naming the nearest allocation.
std::string explain_cached(uintptr_t a);

std::string explain(uintptr_t a, size_t n, uint64_t seq) {
  for (const Extent& e : retired())
    if (a >= e.lo && a < e.hi && seq >= e.until)
      return "inside a " + std::to_string(e.hi - e.lo) + "-byte device allocation at " + hex(e.lo) +
             " that was freed before this operation was issued";
  auto& m = live();
  auto after = m.upper_bound(a);
  const Extent* covering = after != m.begin() ? &std::prev(after)->second : nullptr;
  if (!(covering && a >= covering->lo && a < covering->hi)) {
    const std::string cached = explain_cached(a);
    if (!cached.empty()) return cached;
  }
  const Extent* prev = after != m.begin() ? &std::prev(after)->second : nullptr;
  const Extent* next = after != m.end() ? &after->second : nullptr;
  if (prev && a >= prev->lo && a < prev->hi) {
    if (seq < prev->from)
      return "inside a " + std::to_string(prev->hi - prev->lo) + "-byte device allocation at " + hex(prev->lo) +
             " made after this operation was issued (its memory was freed before)";
    return std::to_string(a + n - prev->hi) + " byte(s) past the end of the " + std::to_string(prev->hi - prev->lo) +
           "-byte device allocation at " + hex(prev->lo);
  }
  const uintptr_t to_prev = prev ? a - prev->hi : ~uintptr_t(0);
  const uintptr_t to_next = next ? next->lo - a : ~uintptr_t(0);
  if (prev && to_prev <= to_next)
    return std::to_string(to_prev) + " byte(s) after the end of the " + std::to_string(prev->hi - prev->lo) +
           "-byte device allocation at " + hex(prev->lo);
  if (next)
    return std::to_string(to_next) + " byte(s) before the start of the " + std::to_string(next->hi - next->lo) +
           "-byte device allocation at " + hex(next->lo);
  return "in device memory that no live allocation covers";
}

// The cudaMalloc block holding a, when a is in its user range but no live extent covers it: the
// caching allocator holds the block, its last owner gave it back.
std::string explain_cached(uintptr_t a) {
  auto& m = spans();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return "";
  const Span& s = std::prev(it)->second;
  if (a < s.lo || a >= s.lo + s.bytes || live().count(s.lo) != 0) return "";
  return "inside the device block at " + hex(s.lo) + ", which its owner freed before this operation was issued (the " +
         "caching allocator holds it)";
}

// The block observer (Note [Block observer]): the exact extent of each block the caching
// allocator hands out, and its end when it comes back.
void block_handed_out(void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!in_heap(a)) return;  // a host cache's block
  live()[a] = Extent{a, a + n, next_seq, kForever};
  forget_hits();
}

bool queue_empty();

void block_taken_back(void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!in_heap(a)) return;
  auto it = live().find(a);
  if (it == live().end()) return;
  Extent e = it->second;
  live().erase(it);
  forget_hits();
  if (!queue_empty()) {  // queued operations issued before now may still use it
    e.until = next_seq;
    retired().push_back(e);
  }
}

const mixtape::BlockObserver kObserver{&block_handed_out, &block_taken_back};
const bool observer_installed = [] {
  mixtape::block_observer().store(&kObserver, std::memory_order_release);
  return true;
}();

}  // namespace

namespace {

// ---- host faults, pinned host memory (Note [Deferred execution]) ---------------------------------

std::string last_fault_text;
bool host_fault = false;  // makes the next cudaGetLastError / synchronization fail

void report(const std::string& what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what.c_str());
  last_fault_text = what;
}

void report_host_fault(const std::string& what) {
  report(what);
  host_fault = true;
}

struct Pinned {
  uintptr_t lo, hi;  // page-aligned mapping; the user's bytes start at lo
  size_t bytes;
  int pending_reads = 0, pending_writes = 0;  // queued copies that read / write it
  bool tripped = false;                       // a host access was reported; left open until idle
  std::string pending;                        // what the latest of them is
};
std::map<uintptr_t, Pinned>& pinned() {
  static auto* m = new std::map<uintptr_t, Pinned>();
  return *m;
}

Pinned* find_pinned(uintptr_t a) {
  auto& m = pinned();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  Pinned& p = std::prev(it)->second;
  return a >= p.lo && a < p.hi ? &p : nullptr;
}

struct sigaction previous_segv;
bool handler_installed = false;

void protect(Pinned& p) {
  int prot = PROT_READ | PROT_WRITE;
  if (!p.tripped && p.pending_writes > 0) prot = PROT_NONE;
  else if (!p.tripped && p.pending_reads > 0) prot = PROT_READ;
  mprotect(reinterpret_cast<void*>(p.lo), p.hi - p.lo, prot);
}

// Whether the faulting access of a SIGSEGV was a write, as the CPU reported it: "write to",
// "read of", or "access to" where the handler cannot tell.
const char* access_kind(void* context) {
#if defined(__x86_64__)
  const bool write = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  return write ? "write to" : "read of";
#elif defined(__aarch64__)
  // The exception syndrome is one of the records after the registers; WnR (bit 6) is the write.
  const auto* mc = &static_cast<ucontext_t*>(context)->uc_mcontext;
  for (size_t at = 0; at + sizeof(_aarch64_ctx) <= sizeof(mc->__reserved);) {
    const auto* head = reinterpret_cast<const _aarch64_ctx*>(mc->__reserved + at);
    if (head->magic == 0 || head->size == 0) break;
    if (head->magic == ESR_MAGIC)
      return (reinterpret_cast<const esr_context*>(head)->esr & (1u << 6)) ? "write to" : "read of";
    at += head->size;
  }
  return "access to";
#else
  (void)context;
  return "access to";
#endif
}

void on_segv(int sig, siginfo_t* info, void* context) {
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  Pinned* p = find_pinned(a);
  if (p && (p->pending_reads > 0 || p->pending_writes > 0) && !p->tripped) {
    report_host_fault(std::string("host ") + access_kind(context) + " pinned host memory at " + hex(a) + " (the " +
                      std::to_string(p->bytes) + "-byte buffer at " + hex(p->lo) + ") while " + p->pending +
                      " is still queued: synchronize the stream (or wait for an event recorded after it) first");
    p->tripped = true;
    protect(*p);
    return;  // the access runs again and goes through
  }
  sigaction(sig, &previous_segv, nullptr);  // not ours: let the previous handler (or the default) act
}

// Installed when a pinned buffer is first protected, so that it runs before a handler a test
// framework installed at the start of the test case (ours passes anything else on to it).
void install_handler() {
  struct sigaction current;
  sigaction(SIGSEGV, nullptr, &current);
  if (handler_installed && current.sa_sigaction == &on_segv) return;
  struct sigaction sa {};
  sa.sa_sigaction = &on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
  handler_installed = true;
}

// ---- the queue (Note [Deferred execution]) --------------------------------------------------------

struct Op {
  uint64_t seq;
  std::function<void()> work;
  std::vector<uintptr_t> pinned_refs;  // pinned buffers it reads or writes
  std::string what;
};
std::deque<Op>& queue() {
  static auto* q = new std::deque<Op>();
  return *q;
}

int deferred_override = -1;

bool queue_empty() { return queue().empty(); }

// Runs queued operations with sequence numbers below `upto`, in order.
void drain(uint64_t upto = kForever) {
  auto& q = queue();
  while (!q.empty() && q.front().seq < upto) {
    Op op = std::move(q.front());
    q.pop_front();
    running_seq = op.seq;
    op.work();
  }
  // Extents given back before every remaining operation was issued can no longer be used.
  const uint64_t oldest = q.empty() ? next_seq : q.front().seq;
  auto& r = retired();
  r.erase(std::remove_if(r.begin(), r.end(), [&](const Extent& e) { return e.until <= oldest; }), r.end());
}

// Issues an operation: runs it now, or queues it in deferred mode.
void issue(std::function<void()> work, std::vector<uintptr_t> pinned_refs, std::string what) {
  const uint64_t seq = next_seq++;
  if (!deferred()) {
    running_seq = seq;
    work();
    return;
  }
  queue().push_back(Op{seq, std::move(work), std::move(pinned_refs), std::move(what)});
}

// Device ranges a copy or memset touches must lie in one live allocation.
bool check_range(const void* p, size_t n, const char* call, const char* role) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (n == 0 || !in_heap(a) || valid(a, n, running_seq)) return true;
  report(std::string(call) + ": the " + role + " range [" + hex(a) + ", " + hex(a + n) + ") of " + std::to_string(n) +
         " bytes is not inside one live device allocation: " + explain(a, n, running_seq));
  last_error = cudaErrorIllegalAddress;
  return false;
}

}  // namespace

void trap(const char* what) {
  Block& b = block();
  fault = std::string(what) + " in kernel " + running_cfg->kernel + " (launched by " + running_cfg->caller +
          "), block " + describe(dim3(current->block_idx.x, current->block_idx.y, current->block_idx.z)) + ", thread " +
          describe(dim3(current->thread_idx.x, current->thread_idx.y, current->thread_idx.z));
  b.running->state = State::done;
  switch_to(b.running->at, b.scheduler);
  std::abort();  // never resumed
}

// Called before every load and store of the instrumented code (Note [Device memory checks]).
void check_access(uintptr_t a, size_t n, bool write) {
  if (!in_heap(a)) return;  // host memory: shared memory, the thread's stack, kernel parameters
  if (current == nullptr) {
    report_host_fault(std::string("host code ") + (write ? "wrote" : "read") + " device memory at " + hex(a) +
                      " (a GPU would fault: device memory is reached through copies)");
    return;
  }
  if (valid(a, n, running_seq)) return;
  const std::string what = std::string("out-of-bounds ") + (write ? "write" : "read") + " of " + std::to_string(n) +
                           " byte(s) at address " + hex(a) + ", " + explain(a, n, running_seq) + ",";
  trap(what.c_str());
}

void run(const Config& cfg, void (*body)(void*), std::shared_ptr<void> closure, const void* params, size_t bytes) {
  const unsigned threads = cfg.block.x * cfg.block.y * cfg.block.z;
  if (threads == 0 || threads > kMaxThreads || cfg.block.z > 64 || cfg.grid.x == 0 || cfg.grid.y == 0 ||
      cfg.grid.z == 0 || cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 0x7fffffffu ||
      cfg.smem > kMaxDynamicShared) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  // Pinned buffers among the arguments (a kernel may read or write mapped host memory).
  std::vector<uintptr_t> refs;
  if (!pinned().empty())
    for (size_t o = 0; o + sizeof(uintptr_t) <= bytes; o += sizeof(uintptr_t)) {
      uintptr_t w;
      std::memcpy(&w, static_cast<const char*>(params) + o, sizeof(w));
      if (Pinned* p = find_pinned(w)) refs.push_back(p->lo);
    }
  const std::string what = std::string("kernel ") + cfg.kernel + " (launched by " + cfg.caller + ")";
  issue(
      [cfg, body, closure] {
    Block& b = block();
    while (b.fibers.size() < cfg.block.x * cfg.block.y * cfg.block.z) {
      b.fibers.emplace_back();
      b.fibers.back().stack.resize(kStackBytes);
    }
    const unsigned n = cfg.block.x * cfg.block.y * cfg.block.z;
    b.slots.assign(((n + 31) / 32) * 32, 0);
    b.shared.resize(cfg.smem);  // filled with garbage at each block's start
    b.body = body;
    b.closure = closure.get();
    fault.clear();
    running_cfg = &cfg;
    const char* schedule = std::getenv("MIXTAPE_EMU_SCHEDULE");
    reverse = schedule != nullptr && std::string(schedule) == "reverse";
    const uint64_t blocks = uint64_t(cfg.grid.x) * cfg.grid.y * cfg.grid.z;
    for (uint64_t i = 0; i < blocks; ++i) {
      const uint64_t k = reverse ? blocks - 1 - i : i;
      const unsigned x = unsigned(k % cfg.grid.x), y = unsigned(k / cfg.grid.x % cfg.grid.y),
                     z = unsigned(k / (uint64_t(cfg.grid.x) * cfg.grid.y));
      if (!run_block(cfg, uint3{x, y, z})) {
        report("kernel fault: " + fault);
        last_error = cudaErrorLaunchFailure;
        break;
      }
    }
    running_cfg = nullptr;
      },
      std::move(refs), what);
}

// Two buffers per warp, taken in turn by each thread's successive calls (mma_sync in
// include/mma.h relies on it to need one barrier per call, not two).
float* warp_scratch(size_t floats) {
  Block& b = block();
  const size_t warps = (b.slots.size() + 31) / 32;
  if (b.scratch.size() < 2 * warps * floats) b.scratch.resize(2 * warps * floats);
  const size_t buffer = b.running->scratch_calls++ & 1;
  return b.scratch.data() + ((current->linear / 32) * 2 + buffer) * floats;
}

bool reverse_schedule() { return reverse; }

std::string last_fault() { return last_fault_text; }
void clear_fault() {
  last_fault_text.clear();
  host_fault = false;
}

bool deferred() {
  if (deferred_override >= 0) return deferred_override != 0;
  const char* env = std::getenv("MIXTAPE_EMU_DEFERRED");
  return env != nullptr && std::string(env) == "1";
}

void set_deferred(std::optional<bool> on) {
  drain();
  deferred_override = on ? int(*on) : -1;
}

}  // namespace mt_emu

// The instrumentation's entry points (Note [Device memory checks]).
extern "C" {
#define MT_EMU_ACCESS(n)                                                            \
  void __asan_load##n##_noabort(uintptr_t a) { mt_emu::check_access(a, n, false); } \
  void __asan_store##n##_noabort(uintptr_t a) { mt_emu::check_access(a, n, true); }
MT_EMU_ACCESS(1)
MT_EMU_ACCESS(2)
MT_EMU_ACCESS(4)
MT_EMU_ACCESS(8)
MT_EMU_ACCESS(16)
#undef MT_EMU_ACCESS
void __asan_loadN_noabort(uintptr_t a, size_t n) { mt_emu::check_access(a, n, false); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { mt_emu::check_access(a, n, true); }
void __asan_handle_no_return() {}
// Around a translation unit's dynamic initializers (initialization-order checking: not done here).
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}
}

// ---- the CUDA runtime API, as far as the library uses it ---------------------------------------

namespace {

using mt_emu::drain;

int current_device = 0;
int streams_made = 0;
char stream_handles[256];  // stream i is &stream_handles[i]: distinct, non-null

struct EmuEvent {
  uint64_t seq = 0;  // the marker's sequence number; the event completes when it has run
  bool recorded = false;
};

cudaError_t fail(cudaError_t e) {
  mt_emu::last_error = e;
  return e;
}

// What a wait reports: a fault of an earlier launch, or a host fault, as on a GPU.
cudaError_t after_wait() {
  if (mt_emu::host_fault) return cudaErrorIllegalAddress;
  if (mt_emu::last_error == cudaErrorLaunchFailure || mt_emu::last_error == cudaErrorIllegalAddress)
    return mt_emu::last_error;
  return cudaSuccess;
}

enum class Where { device, pinned, pageable };
Where where(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (mt_emu::in_heap(a)) return Where::device;
  if (mt_emu::find_pinned(a)) return Where::pinned;
  return Where::pageable;
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

// Note [Device memory checks]: fresh pages for every allocation, the user's bytes 256-byte aligned
// (as cudaMalloc's) between guards of at least kGuard bytes, garbage in them as in device memory.
cudaError_t cudaMalloc(void** p, size_t n) {
  using namespace mt_emu;
  reserve_heap();
  const size_t span = (kGuard + std::max<size_t>(n, 1) + kGuard + page_bytes - 1) / page_bytes * page_bytes;
  if (heap_used + span > kHeapBytes) return fail(cudaErrorMemoryAllocation);
  const uintptr_t map_lo = heap_lo + heap_used;
  heap_used += span;
  if (mprotect(reinterpret_cast<void*>(map_lo), span, PROT_READ | PROT_WRITE) != 0)
    return fail(cudaErrorMemoryAllocation);
  const uintptr_t lo = map_lo + kGuard;
  std::memset(reinterpret_cast<void*>(lo), 0xcd, n);
  spans()[lo] = Span{map_lo, map_lo + span, lo, n};
  live()[lo] = Extent{lo, lo + n, next_seq, kForever};
  forget_hits();
  *p = reinterpret_cast<void*>(lo);
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  using namespace mt_emu;
  if (!p) return cudaSuccess;
  drain();  // cudaFree waits for the device
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = spans().find(a);
  if (it == spans().end()) return fail(cudaErrorInvalidValue);
  const Span s = it->second;
  spans().erase(it);
  live().erase(a);
  forget_hits();
  // The pages go back to the reservation: any later use of the pointer faults.
  mmap(reinterpret_cast<void*>(s.map_lo), s.map_hi - s.map_lo, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) {
  using namespace mt_emu;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t bytes = (std::max<size_t>(n, 1) + page - 1) / page * page;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  const auto lo = reinterpret_cast<uintptr_t>(m);
  Pinned& b = pinned()[lo];
  b.lo = lo;
  b.hi = lo + bytes;
  b.bytes = n;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int) {
  if (!mt_emu::find_pinned(reinterpret_cast<uintptr_t>(host))) return fail(cudaErrorInvalidValue);
  *device = host;  // unified addressing: the same pointer
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  using namespace mt_emu;
  if (!p) return cudaSuccess;
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = pinned().find(a);
  if (it == pinned().end()) return fail(cudaErrorInvalidValue);
  for (const Op& op : queue())
    if (std::find(op.pinned_refs.begin(), op.pinned_refs.end(), a) != op.pinned_refs.end()) {
      report_host_fault("cudaFreeHost of the " + std::to_string(it->second.bytes) + "-byte pinned buffer at " + hex(a) +
                        " while " + op.what + ", which uses it, is still queued: synchronize first");
      break;
    }
  drain();
  munmap(p, it->second.hi - it->second.lo);
  pinned().erase(it);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (streams_made >= int(sizeof(stream_handles))) return fail(cudaErrorMemoryAllocation);
  *s = reinterpret_cast<cudaStream_t>(&stream_handles[streams_made++]);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  drain();
  return after_wait();
}

cudaError_t cudaDeviceSynchronize(void) {
  drain();
  return after_wait();
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new EmuEvent());
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<EmuEvent*>(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  auto* ev = reinterpret_cast<EmuEvent*>(e);
  ev->seq = mt_emu::next_seq;
  ev->recorded = true;
  mt_emu::issue([] {}, {}, "an event");
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  drain(reinterpret_cast<EmuEvent*>(e)->seq + 1);
  return after_wait();
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  const auto* ev = reinterpret_cast<EmuEvent*>(e);
  const auto& q = mt_emu::queue();
  return !q.empty() && q.front().seq <= ev->seq ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }  // one queue

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  using namespace mt_emu;
  if (n == 0) return cudaSuccess;
  const Where d = where(dst), s = where(src);
  // Pageable host memory: the CUDA runtime waits for the stream and copies before returning.
  if (d == Where::pageable || s == Where::pageable) {
    drain();
    running_seq = next_seq++;
    if (!check_range(dst, n, "cudaMemcpyAsync", "destination") || !check_range(src, n, "cudaMemcpyAsync", "source"))
      return cudaErrorIllegalAddress;
    std::memmove(dst, src, n);
    return cudaSuccess;
  }
  Pinned* pd = d == Where::pinned ? find_pinned(reinterpret_cast<uintptr_t>(dst)) : nullptr;
  Pinned* ps = s == Where::pinned ? find_pinned(reinterpret_cast<uintptr_t>(src)) : nullptr;
  const std::string what =
      "a cudaMemcpyAsync of " + std::to_string(n) + " bytes from " + hex(uintptr_t(src)) + " to " + hex(uintptr_t(dst));
  std::vector<uintptr_t> refs;
  if (pd) refs.push_back(pd->lo);
  if (ps) refs.push_back(ps->lo);
  if (deferred()) {
    if (pd) {
      ++pd->pending_writes;
      pd->pending = what;
    }
    if (ps) {
      ++ps->pending_reads;
      ps->pending = what;
    }
    if (pd || ps) install_handler();
    if (pd) protect(*pd);
    if (ps) protect(*ps);
  }
  const uintptr_t dlo = pd ? pd->lo : 0, slo = ps ? ps->lo : 0;
  const bool watched = deferred();
  issue(
      [dst, src, n, dlo, slo, watched] {
    Pinned* pd = dlo ? find_pinned(dlo) : nullptr;
    Pinned* ps = slo ? find_pinned(slo) : nullptr;
    for (Pinned* p : {pd, ps})
      if (p) mprotect(reinterpret_cast<void*>(p->lo), p->hi - p->lo, PROT_READ | PROT_WRITE);
    if (check_range(dst, n, "cudaMemcpyAsync", "destination") && check_range(src, n, "cudaMemcpyAsync", "source"))
      std::memmove(dst, src, n);
    if (watched) {
      if (pd) --pd->pending_writes;
      if (ps) --ps->pending_reads;
    }
    for (Pinned* p : {pd, ps})
      if (p) {
        if (p->pending_reads == 0 && p->pending_writes == 0) p->tripped = false;
        protect(*p);
      }
      },
      std::move(refs), what);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  drain();
  return e;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  if (n == 0) return cudaSuccess;
  mt_emu::issue(
      [p, value, n] {
    if (mt_emu::check_range(p, n, "cudaMemsetAsync", "destination")) std::memset(p, value, n);
      },
      {}, "a cudaMemsetAsync of " + std::to_string(n) + " bytes at " + mt_emu::hex(uintptr_t(p)));
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = mt_emu::last_error;
  if (mt_emu::host_fault) {
    e = cudaErrorIllegalAddress;
    mt_emu::host_fault = false;
  }
  mt_emu::last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated kernel fault, see stderr)";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (emulator: see stderr)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotReady: return "device not ready";
    default: return "emulated CUDA error";
  }
}

}  // extern "C"
