// Astra CPU backend runtime: runs a CUDA grid on host threads. Each block runs on one worker
// thread; each CUDA thread of the block is a fiber that switches only at barriers and warp
// collectives, in an order chosen by the schedule (forward / reverse / random), so the
// semantics of __syncthreads and the *_sync warp intrinsics are exact and races show up as
// schedule-dependent results. Compiled once per cache (with and without ASan) and linked into
// every kernel module.
#include "astra_cuda_shim.h"

#include <cfenv>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ASTRA_ASAN 1
#endif

// Static __shared__ arrays of an ASan build sit between two poisoned redzones (the shim's
// ASTRA_SHARED_* macros): an access past either end is reported, and named from this table (the
// worker thread's own arrays: static shared memory is thread_local) when ASan dies.
struct AstraSharedArray {
  const char* name;
  uintptr_t base;
  size_t bytes, elem, rz;
};
namespace {
thread_local std::vector<AstraSharedArray>* t_shared = nullptr;
}  // namespace

#if defined(ASTRA_TSAN_ANNOTATE)
// ThreadSanitizer sees each CUDA thread as a fiber. Switches do not synchronize; barriers and
// warp collectives do (release on arrival, acquire on leaving), so what it reports as a data
// race is a race between CUDA threads (in practice: on shared memory). The runtime itself is
// built without TSan instrumentation (its bookkeeping is single-threaded per block) and only
// calls the annotation API; the kernel module is instrumented.
#define ASTRA_TSAN 1
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
// The report API (compiler-rt's tsan_debugging): what a report says, read in its filter.
int __tsan_get_report_data(void* report, const char** description, int* count, int* stack_count,
                           int* mop_count, int* loc_count, int* mutex_count, int* thread_count,
                           int* unique_tid_count, void** sleep_trace, unsigned long trace_size);
int __tsan_get_report_mop(void* report, unsigned long idx, int* tid, void** addr, int* size,
                          int* write, int* atomic, void** trace, unsigned long trace_size);
int __tsan_get_report_thread(void* report, unsigned long idx, int* tid, unsigned long long* os_id,
                             int* running, const char** name, int* parent_tid, void** trace,
                             unsigned long trace_size);
void __tsan_write1_pc(void* addr, void* pc);
void __tsan_write2_pc(void* addr, void* pc);
void __tsan_write4_pc(void* addr, void* pc);
void __tsan_write8_pc(void* addr, void* pc);
void __tsan_write16_pc(void* addr, void* pc);
void __tsan_write_range_pc(void* addr, unsigned long size, void* pc);
}
#define ASTRA_TSAN_NO_SYNC 1u
#include <dlfcn.h>
#endif

#include <ucontext.h>
#if defined(__x86_64__) && !defined(ASTRA_USE_UCONTEXT)
#define ASTRA_ASM_SWITCH 1
#endif

namespace astra {

namespace {
// Memory a launch hands to kernel code as a GPU would (buffers, dynamic shared memory): aligned
// as cudaMalloc's, so that the alignment check holds the CPU to what the GPU allows, no less.
void* aligned_block(size_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 256, bytes) == 0 ? p : nullptr;
}

enum State { NEW = 0, RUNNABLE, WAIT_BAR, WAIT_WARP, DONE };

#ifdef ASTRA_ASM_SWITCH
// Saves the callee-saved registers on the old stack and swaps stacks (kernels do not change
// the FP environment, so MXCSR and the x87 control word are left alone: they are costly).
extern "C" void astra_ctx_switch(void** save_sp, void* to_sp);
extern "C" void astra_ctx_start();
asm(R"(
.text
.globl astra_ctx_switch
.hidden astra_ctx_switch
.type astra_ctx_switch,@function
astra_ctx_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size astra_ctx_switch, .-astra_ctx_switch
.globl astra_ctx_start
.hidden astra_ctx_start
.type astra_ctx_start,@function
astra_ctx_start:
  movq %rbx, %rdi
  callq *%r12
  ud2
.size astra_ctx_start, .-astra_ctx_start
)");
using Ctx = void*;
#else
using Ctx = ucontext_t;
#endif

void fiber_main(Fiber* f);
}  // namespace

#ifdef ASTRA_TSAN
// A write that ThreadSanitizer reported against a write by another lane of the same warp at the
// same instruction. compute-sanitizer's racecheck does not count lanes of one warp storing the
// same value to one address in one instruction as a hazard (the stores are one), so the report
// is held back until the writer reaches its next switch point: the bytes it left there are the
// previous lane's (the same value: no race) or not (a race, reported then).
struct WarpWrite {
  unsigned char* addr;
  int size;
  unsigned char before[16];
  int writer, other;  // linear thread ids in the block
  void* pc;
};
constexpr size_t kMaxWarpWrites = 256;  // per switch point; beyond it, reports go out as races
#endif

// One worker thread's state; it runs blocks one after another.
struct Block {
  BlockInfo info;
  std::vector<Fiber> fibers;
  std::vector<Ctx> ctx;
  Ctx sched;
  int n = 0, nlive = 0, ndone = 0;
  int bar_arrived = 0, bar_count = 0;
  unsigned warp_live[32], warp_arrived[32];
  unsigned warp_converging[32];  // lanes waiting in __activemask()
  bool failed = false;
  std::string error;
  void (*entry)(void**) = nullptr;
  void** args = nullptr;
  char* arena = nullptr;
  // Stacks of exited fibers are reused first, so threads that run to completion without
  // blocking all run on one cache-hot stack.
  std::vector<int> free_stacks;
  std::vector<int> perm;
  std::vector<int> slot_of;
#ifdef ASTRA_ASAN
  void* fake_stack = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
#ifdef ASTRA_TSAN
  void* sched_fiber = nullptr;
  std::vector<void*> tsan_fiber;       // per CUDA thread of the current block
  std::vector<std::string> tsan_name;
  std::vector<char> tsan_started;
  std::vector<unsigned> arrivals;      // per thread: warp collectives arrived at
  std::vector<unsigned> group_parity;  // per thread: members' arrival parities of its last group
  std::vector<unsigned> group_mask;
  char bar_obj[2];                     // barrier generations alternate between two sync objects
  unsigned bar_gen = 0;
  std::vector<char> arrival_obj;       // per thread, two parities
  char block_done = 0;
  std::vector<WarpWrite> warp_writes;  // held back until the writer's next switch point
  size_t nwarp_writes = 0;
  bool judging = false;                // replaying a held-back write: its report goes out
#endif
};

namespace {
thread_local Block* t_worker = nullptr;  // for the crash handler only

std::string where(const char* file, int line) {
  return std::string(file ? file : "?") + ":" + std::to_string(line);
}

std::string dim_str(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

void to_sched(Block* b, Fiber* f) {
#ifdef ASTRA_TSAN
  __tsan_switch_to_fiber(b->sched_fiber, ASTRA_TSAN_NO_SYNC);
#endif
#ifdef ASTRA_ASAN
  __sanitizer_start_switch_fiber(nullptr, b->sched_bottom, b->sched_size);
#endif
#ifdef ASTRA_ASM_SWITCH
  astra_ctx_switch(&b->ctx[f->linear], b->sched);
#else
  swapcontext(&b->ctx[f->linear], &b->sched);
#endif
#ifdef ASTRA_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

[[noreturn]] void fail(Block* b, const std::string& msg) {
  if (!b->failed) {
    b->failed = true;
    b->error = msg;
  }
  Fiber* f = self();
  to_sched(b, f);  // the scheduler never resumes a failed block
  __builtin_unreachable();
}

const char* op_name(int op) {
  static const char* names[] = {"__syncwarp", "__shfl*_sync", "__ballot_sync", "__any_sync",
                                "__all_sync", "__uni_sync", "__reduce_add_sync", "__reduce_min_sync",
                                "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync",
                                "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                "__match_any_sync", "__match_all_sync", "__activemask"};
  return op >= 0 && op < (int)(sizeof(names) / sizeof(names[0])) ? names[op] : "warp collective";
}
const char* bar_name(int kind) {
  static const char* names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                "__syncthreads_or"};
  return kind >= 0 && kind < 4 ? names[kind] : "__syncthreads";
}

// "threads 0-31, 64" style summary of a sorted list of thread ids.
std::string ranges(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ids[i]);
    if (j > i) s += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return s;
}

// Groups waiting threads by what they wait at: "threads 0-31 at __syncthreads (k.cu:12)".
std::string waiting_summary(Block* b, int only_state) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (auto& f : b->fibers) {
    if (f.state != WAIT_BAR && f.state != WAIT_WARP) continue;
    if (only_state >= 0 && f.state != only_state) continue;
    std::string key = std::string(f.state == WAIT_BAR ? bar_name(f.op) : op_name(f.op)) + " (" +
                      where(f.file, f.line) + ")";
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == key; });
    if (it == groups.end()) groups.push_back({key, {f.linear}});
    else it->second.push_back(f.linear);
  }
  std::string s;
  for (auto& g : groups) {
    if (!s.empty()) s += "; ";
    s += "thread" + std::string(g.second.size() > 1 ? "s " : " ") + ranges(g.second) + " at " + g.first;
  }
  return s;
}

void try_release_barrier(Block* b) {
  if (b->bar_arrived == 0 || b->bar_arrived < b->nlive) return;
  Fiber* first = nullptr;
  for (auto& f : b->fibers) {
    if (f.state != WAIT_BAR) continue;
    if (!first) first = &f;
    else if (f.line != first->line || (f.file != first->file && std::strcmp(f.file, first->file) != 0))
      fail(b, "divergent barrier in block " + dim_str(b->info.bid) + ": " +
                  waiting_summary(b, WAIT_BAR) +
                  " — all threads of a block must reach the same __syncthreads");
  }
#ifdef ASTRA_TSAN
  b->bar_gen++;
#endif
  int count = b->bar_count, n = b->bar_arrived;
  for (auto& f : b->fibers) {
    if (f.state != WAIT_BAR) continue;
    f.result = f.op == BAR_COUNT ? count : f.op == BAR_AND ? (count == n) : f.op == BAR_OR ? (count > 0) : 0;
    f.state = RUNNABLE;
  }
  b->bar_arrived = b->bar_count = 0;
}

void complete_group(Block* b, int w, unsigned req) {
  Fiber* base = &b->fibers[w * 32];
  int op = -1;
  for (int m = 0; m < 32; ++m)
    if (req >> m & 1) { op = base[m].op; break; }
  unsigned ballot = 0;
  unsigned long long acc = 0;
  bool first = true, all_equal = true;
  unsigned long long v0 = 0;
  for (int m = 0; m < 32; ++m) {
    if (!(req >> m & 1)) continue;
    unsigned long long v = base[m].value;
    if (v) ballot |= 1u << m;
    unsigned u = (unsigned)v;
    int i = (int)u;
    if (first) {
      v0 = v;
      acc = op == OP_RED_MIN_I || op == OP_RED_MAX_I ? (unsigned)i : u;
      first = false;
    } else {
      if (v != v0) all_equal = false;
      switch (op) {
        case OP_RED_ADD: acc = (unsigned)(acc + u); break;
        case OP_RED_MIN_U: acc = std::min<unsigned>((unsigned)acc, u); break;
        case OP_RED_MAX_U: acc = std::max<unsigned>((unsigned)acc, u); break;
        case OP_RED_MIN_I: acc = (unsigned)std::min<int>((int)(unsigned)acc, i); break;
        case OP_RED_MAX_I: acc = (unsigned)std::max<int>((int)(unsigned)acc, i); break;
        case OP_RED_AND: acc &= u; break;
        case OP_RED_OR: acc |= u; break;
        case OP_RED_XOR: acc ^= u; break;
      }
    }
  }
#ifdef ASTRA_TSAN
  unsigned parity = 0;
  for (int m = 0; m < 32; ++m)
    if (req >> m & 1) parity |= (b->arrivals[w * 32 + m] & 1u) << m;
  for (int m = 0; m < 32; ++m)
    if (req >> m & 1) { b->group_parity[w * 32 + m] = parity; b->group_mask[w * 32 + m] = req; }
#endif
  for (int m = 0; m < 32; ++m) {
    if (!(req >> m & 1)) continue;
    Fiber& f = base[m];
    switch (op) {
      case OP_SHFL: f.result = (req >> f.src & 1) ? base[f.src].value : f.value; break;
      case OP_BALLOT: f.result = ballot; break;
      case OP_ANY: f.result = ballot != 0; break;
      case OP_ALL: f.result = ballot == req; break;
      case OP_UNI: f.result = ballot == 0 || ballot == req; break;
      case OP_MATCH_ANY: {
        unsigned r = 0;
        for (int k = 0; k < 32; ++k)
          if ((req >> k & 1) && base[k].value == f.value) r |= 1u << k;
        f.result = r;
        break;
      }
      case OP_MATCH_ALL: f.result = all_equal ? req : 0; f.pred = all_equal; break;
      case OP_SYNCWARP: f.result = 0; break;
      default: f.result = acc; break;
    }
    f.state = RUNNABLE;
  }
  b->warp_arrived[w] &= ~req;
}

// Completes every group of a warp whose named (and still running) lanes have all arrived.
void try_complete_warp(Block* b, int w) {
  Fiber* base = &b->fibers[w * 32];
  for (int lane = 0; lane < 32; ++lane) {
    unsigned arrived = b->warp_arrived[w], live = b->warp_live[w];
    if (!(arrived >> lane & 1)) continue;
    Fiber& f = base[lane];
    unsigned req = (f.mask & live) | (1u << lane);
    if ((arrived & req) != req) continue;
    bool same = true;
    for (int m = 0; m < 32 && same; ++m) {
      if (!(req >> m & 1)) continue;
      if (((base[m].mask & live) | (1u << m)) != req) same = false;  // waits for others too
      else if (base[m].op != f.op && !(base[m].op == OP_SYNCWARP && f.op == OP_SYNCWARP))
        fail(b, "mismatched warp collectives in block " + dim_str(b->info.bid) + ", warp " +
                    std::to_string(w) + ": " + waiting_summary(b, WAIT_WARP) +
                    " — the threads named in a mask must execute the same intrinsic");
    }
    if (same) complete_group(b, w, req);
  }
}

// __activemask(): with independent thread scheduling the active lanes are those executing the
// call together. Here a lane waits in it until every running lane of its warp is waiting
// somewhere (or has exited); the lanes waiting at the same call form the mask. So
// `if (c) { m = __activemask(); ... __shfl_sync(m, ...); }` sees exactly the lanes with c.
void try_converge(Block* b, int w) {
  unsigned waiting = b->warp_converging[w];
  if (!waiting) return;
  Fiber* base = &b->fibers[w * 32];
  unsigned live = b->warp_live[w];
  for (int m = 0; m < 32; ++m)
    if ((live >> m & 1) && base[m].state != WAIT_BAR && base[m].state != WAIT_WARP) return;
  while (waiting) {
    int first = __builtin_ctz(waiting);
    unsigned group = 0;
    for (int m = first; m < 32; ++m)
      if ((waiting >> m & 1) && base[m].line == base[first].line &&
          (base[m].file == base[first].file || std::strcmp(base[m].file, base[first].file) == 0))
        group |= 1u << m;
    for (int m = 0; m < 32; ++m)
      if (group >> m & 1) {
        base[m].result = group;
        base[m].state = RUNNABLE;
      }
    waiting &= ~group;
  }
  b->warp_converging[w] = 0;
}

void thread_exit(Fiber* f) {
  Block* b = f->block;
#ifdef ASTRA_TSAN
  __tsan_release(&b->bar_obj[b->bar_gen & 1]);  // counts as arriving at the pending barrier
  __tsan_release(&b->block_done);
#endif
  f->state = DONE;
  b->nlive--;
  b->ndone++;
  b->warp_live[f->warp] &= ~(1u << f->lane);
  try_release_barrier(b);  // exited threads count as arrived (sm_70+)
  if (b->warp_arrived[f->warp]) try_complete_warp(b, f->warp);
  try_converge(b, f->warp);
}

void fiber_main(Fiber* f) {
#ifdef ASTRA_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Block* b = f->block;
  b->entry(b->args);
  thread_exit(f);
#ifndef ASTRA_TSAN
  b->free_stacks.push_back(b->slot_of[f->linear]);  // reused only after we switched away
#endif
#ifdef ASTRA_TSAN
  __tsan_switch_to_fiber(b->sched_fiber, ASTRA_TSAN_NO_SYNC);
#endif
#ifdef ASTRA_ASAN
  __sanitizer_start_switch_fiber(nullptr, b->sched_bottom, b->sched_size);  // this stack dies
#endif
#ifdef ASTRA_ASM_SWITCH
  astra_ctx_switch(&b->ctx[f->linear], b->sched);
#else
  swapcontext(&b->ctx[f->linear], &b->sched);
#endif
  __builtin_unreachable();
}

#ifndef ASTRA_ASM_SWITCH
void fiber_tramp(unsigned hi, unsigned lo) {
  fiber_main(reinterpret_cast<Fiber*>(((uintptr_t)hi << 32) | lo));
}
#endif

char* region_bottom(Block* b, int slot) { return b->arena + (size_t)slot * kStackBytes; }

char* stack_top(Block* b, int slot) {
  // Below the header; staggered so the fibers' hot frames do not alias into the same cache sets.
  return region_bottom(b, slot) + kStackBytes - 128 - 64 * (slot % 32);
}

void start_fiber(Block* b, Fiber* f) {
#ifdef ASTRA_TSAN
  // Under the race checker every thread keeps a stack of its own: a stack left by a finished
  // thread and reused by the next would make their locals (a `uint4` written through a
  // `__half*`) look like one address written by two threads with nothing ordering them.
  int slot = f->linear;
#else
  int slot = b->free_stacks.back();
  b->free_stacks.pop_back();
#endif
  b->slot_of[f->linear] = slot;
  char* top = stack_top(b, slot);
  StackHeader* h = stack_header((uintptr_t)top);
  h->magic = kStackMagic;
  h->fiber = f;
#ifdef ASTRA_ASM_SWITCH
  void** sp = (void**)(((uintptr_t)top & ~(uintptr_t)15) - 16);
  *--sp = (void*)astra_ctx_start;
  *--sp = nullptr;                        // rbp
  *--sp = (void*)f;                       // rbx: argument
  *--sp = (void*)&fiber_main;             // r12: function
  *--sp = nullptr;                        // r13
  *--sp = nullptr;                        // r14
  *--sp = nullptr;                        // r15
  b->ctx[f->linear] = (void*)sp;
#else
  ucontext_t& uc = b->ctx[f->linear];
  getcontext(&uc);
  uc.uc_stack.ss_sp = region_bottom(b, slot) + 4096;
  uc.uc_stack.ss_size = (size_t)(top - region_bottom(b, slot)) - 4096;
  uc.uc_link = nullptr;
  uintptr_t p = (uintptr_t)f;
  makecontext(&uc, (void (*)())fiber_tramp, 2, (unsigned)(p >> 32), (unsigned)p);
#endif
  f->stack = top;
}

void switch_in(Block* b, Fiber* f) {
#ifdef ASTRA_TSAN
  // The first switch into a thread synchronizes (it starts after the block's set-up); later
  // ones do not, or every thread would appear ordered after every other.
  bool first = !b->tsan_started[f->linear];
  b->tsan_started[f->linear] = 1;
  __tsan_switch_to_fiber(b->tsan_fiber[f->linear], first ? 0u : ASTRA_TSAN_NO_SYNC);
#endif
#ifdef ASTRA_ASAN
  int slot = b->slot_of[f->linear];
  __sanitizer_start_switch_fiber(nullptr, region_bottom(b, slot) + 4096,
                                 (size_t)(stack_top(b, slot) - region_bottom(b, slot)) - 4096);
#endif
#ifdef ASTRA_ASM_SWITCH
  astra_ctx_switch(&b->sched, b->ctx[f->linear]);
#else
  swapcontext(&b->sched, &b->ctx[f->linear]);
#endif
#ifdef ASTRA_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b->sched_bottom, &b->sched_size);
#endif
}

#ifdef ASTRA_TSAN
// ThreadSanitizer's report filter (installed through the preloaded hook, astra_tsan_hook.cpp):
// returns 1 to hold back a report of two plain writes of the same size to one address by two
// lanes of one warp at the same instruction (see WarpWrite). Runs inside TSan's report code on
// the writer's stack: no allocation here.
int hold_warp_write(const void* report) {
  Block* b = t_worker;
  void* rep = const_cast<void*>(report);
  if (!b || b->judging || b->nwarp_writes >= b->warp_writes.size()) return 0;
  const char* desc = nullptr;
  int count = 0, stacks = 0, mops = 0, locs = 0, mutexes = 0, threads = 0, unique = 0;
  void* sleep[1];
  if (!__tsan_get_report_data(rep, &desc, &count, &stacks, &mops, &locs, &mutexes, &threads, &unique,
                              sleep, 1) ||
      !desc || std::strcmp(desc, "data-race") != 0 || mops != 2)
    return 0;
  int tid[2], size[2], write[2], atomic[2];
  void* addr[2];
  void* pc[2];
  for (int i = 0; i < 2; ++i) {
    pc[i] = nullptr;
    if (!__tsan_get_report_mop(rep, i, &tid[i], &addr[i], &size[i], &write[i], &atomic[i], &pc[i], 1)) return 0;
  }
  WarpWrite& w = b->warp_writes[b->nwarp_writes];
  if (!write[0] || !write[1] || atomic[0] || atomic[1] || addr[0] != addr[1] || size[0] != size[1] ||
      size[0] <= 0 || size[0] > (int)sizeof(w.before) || !pc[0] || pc[0] != pc[1])
    return 0;  // not one instruction's plain stores to one place
  Fiber* f = self();
  int other = -1;
  for (int t = 0; t < threads && other < 0; ++t) {
    int id = -1, running = 0, parent = 0;
    unsigned long long os_id = 0;
    const char* name = nullptr;
    void* tr[1];
    if (!__tsan_get_report_thread(rep, t, &id, &os_id, &running, &name, &parent, tr, 1) || id != tid[1] || !name)
      continue;
    for (int i = 0; i < b->n; ++i)
      if (b->tsan_name[i] == name) { other = i; break; }
  }
  if (other < 0 || other == f->linear || b->fibers[other].warp != f->warp) return 0;  // another warp: a race
  w.addr = static_cast<unsigned char*>(addr[0]);
  w.size = size[0];
  for (int i = 0; i < w.size; ++i)  // the other lane's value (this store has not happened yet)
    w.before[i] = static_cast<volatile unsigned char*>(w.addr)[i];
  w.writer = f->linear;
  w.other = other;
  w.pc = pc[0];
  b->nwarp_writes++;
  return 1;
}

void install_report_filter() {
  using Filter = int (*)(const void*);
  static auto set = reinterpret_cast<void (*)(Filter)>(dlsym(RTLD_DEFAULT, "astra_tsan_set_filter"));
  if (set) set(&hold_warp_write);  // without the hook every report goes out (stricter, never laxer)
}

// After a thread yields: each held-back write either left the other lane's bytes (the same
// value: not a race) or did not: then the write is made again in its thread's name, and
// ThreadSanitizer reports it as its own (halt_on_error ends the process). The other lane's write
// stays in TSan's shadow, so a later access that races with this one is found against it; TSan's
// dedup of reported addresses is off (TSAN_OPTIONS in isolation.py), or a held-back report would
// silence its address for good. Byte loops, not memcmp: that is intercepted, and would count as
// an access of this runtime's.
bool same_bytes(const volatile unsigned char* a, const unsigned char* b, int n) {
  for (int i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

bool judge_warp_writes(Block* b) {
  size_t n = b->nwarp_writes;
  b->nwarp_writes = 0;
  for (size_t k = 0; k < n; ++k) {
    WarpWrite& w = b->warp_writes[k];
    if (same_bytes(w.addr, w.before, w.size)) continue;
    fprintf(stderr, "astra: lanes of one warp stored different values to one address in one instruction\n");
    b->judging = true;
    __tsan_switch_to_fiber(b->tsan_fiber[w.writer], ASTRA_TSAN_NO_SYNC);
    switch (w.size) {  // the store as the compiler instrumented it, so the report reads the same
      case 1: __tsan_write1_pc(w.addr, w.pc); break;
      case 2: __tsan_write2_pc(w.addr, w.pc); break;
      case 4: __tsan_write4_pc(w.addr, w.pc); break;
      case 8: __tsan_write8_pc(w.addr, w.pc); break;
      case 16: __tsan_write16_pc(w.addr, w.pc); break;
      default: __tsan_write_range_pc(w.addr, (unsigned long)w.size, w.pc);
    }
    __tsan_switch_to_fiber(b->sched_fiber, ASTRA_TSAN_NO_SYNC);
    b->judging = false;
    // Still here: TSan no longer holds the other write (evicted from its shadow). Said plainly.
    Fiber &f = b->fibers[w.writer], &o = b->fibers[w.other];
    b->failed = true;
    b->error = "data race on shared memory: block " + dim_str(b->info.bid) + " threads " + dim_str(f.tid) +
               " and " + dim_str(o.tid) + " (lanes of warp " + std::to_string(f.warp) +
               ") stored different values to one address in one instruction (ThreadSanitizer)";
    return false;
  }
  return true;
}
#endif

struct Launch {
  void (*entry)(void**);
  void** args;
  uint3 grid;
  dim3 block;
  unsigned long long shmem;
  int order;
  int rounding;  // FE_* rounding direction of every worker's floating-point arithmetic
  unsigned long long seed;
  unsigned long long nblocks = 0;
  unsigned long long perm_a = 1, perm_c = 0;  // random order: k -> (a*k + c) mod nblocks, gcd(a, n) = 1
  unsigned block_at(unsigned long long k) const {
    if (order == 1) return (unsigned)(nblocks - 1 - k);
    if (order == 2) return (unsigned)((unsigned __int128)perm_a * k % nblocks + perm_c) % nblocks;
    return (unsigned)k;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string error;
};

std::atomic<unsigned long long> g_epoch{1};
std::vector<void (*)(void*)>& dyn_setters();

// Runs one block to completion; false (with b->error set) on deadlock / divergence.
bool run_block(Block* b, Launch& L, unsigned linear_block) {
  BlockInfo& info = b->info;
  info.bid = make_uint3(linear_block % L.grid.x, (linear_block / L.grid.x) % L.grid.y,
                        linear_block / (L.grid.x * L.grid.y));
  info.epoch = g_epoch.fetch_add(1);
#ifdef ASTRA_TSAN
  __tsan_acquire(&b->block_done);  // the previous block's threads are done with this memory
#endif
  if (L.shmem) std::memset(info.dyn_smem, 0xFF, L.shmem);  // poison: NaN for floats
  for (auto set : dyn_setters()) set(info.dyn_smem);
  int n = b->n;
  b->nlive = n;
  b->ndone = 0;
  b->bar_arrived = b->bar_count = 0;
  b->failed = false;
  b->error.clear();
  for (int w = 0; w < 32; ++w) {
    int lo = w * 32;
    int cnt = std::max(0, std::min(32, n - lo));
    b->warp_live[w] = cnt == 32 ? 0xffffffffu : ((1u << cnt) - 1);
    b->warp_arrived[w] = 0;
    b->warp_converging[w] = 0;
  }
  for (int i = 0; i < n; ++i) {
    Fiber& f = b->fibers[i];
    f.state = NEW;
    f.file = nullptr;
    f.line = 0;
  }
  b->free_stacks.clear();
  for (int i = n - 1; i >= 0; --i) b->free_stacks.push_back(i);
  std::vector<int>& perm = b->perm;
  for (int i = 0; i < n; ++i) perm[i] = L.order == 1 ? n - 1 - i : i;
  std::mt19937_64 rng;
  if (L.order == 2) rng.seed(L.seed * 0x9E3779B97F4A7C15ull + linear_block);
  for (;;) {
    if (L.order == 2) std::shuffle(perm.begin(), perm.end(), rng);
    bool progressed = false;
    for (int i : perm) {
      Fiber* f = &b->fibers[i];
      if (f->state == NEW) {
        start_fiber(b, f);
        f->state = RUNNABLE;
#ifdef ASTRA_TSAN
        if (b->tsan_fiber[i]) __tsan_destroy_fiber(b->tsan_fiber[i]);
        b->tsan_fiber[i] = __tsan_create_fiber(0);
        b->tsan_name[i] = "block " + dim_str(info.bid) + " thread " + dim_str(f->tid);
        __tsan_set_fiber_name(b->tsan_fiber[i], b->tsan_name[i].c_str());
        b->tsan_started[i] = 0;
#endif
      }
      if (f->state != RUNNABLE) continue;
      switch_in(b, f);
#ifdef ASTRA_TSAN
      if (b->nwarp_writes && !judge_warp_writes(b)) return false;
#endif
      progressed = true;
      if (b->failed) return false;
    }
    if (b->ndone == n) return true;
    if (!progressed) {
      b->error = "deadlock in block " + dim_str(info.bid) + ": no thread can proceed; " +
                 waiting_summary(b, -1);
      return false;
    }
  }
}

thread_local const char* t_phase = nullptr;

// The fiber running on the faulting stack, if any (the handler runs on the alternate stack).
Fiber* fiber_at(uintptr_t sp) {
  Block* w = t_worker;
  if (!w || !w->arena) return nullptr;
  uintptr_t lo = (uintptr_t)w->arena, hi = lo + (uintptr_t)w->n * kStackBytes;
  if (sp < lo || sp >= hi) return nullptr;
  StackHeader* h = stack_header(sp);
  return h->magic == kStackMagic ? h->fiber : nullptr;
}

void crash_handler(int sig, siginfo_t*, void* ctx) {
  // Async-signal-safe report of where the fault happened; then the default action.
  char buf[256];
  int len = 0;
  auto put = [&](const char* s) { while (*s && len < 250) buf[len++] = *s++; };
  auto num = [&](unsigned v) {
    char t[12]; int k = 0;
    do { t[k++] = char('0' + v % 10); v /= 10; } while (v && k < 11);
    while (k && len < 250) buf[len++] = t[--k];
  };
  put("astra: ");
  put(sig == SIGSEGV ? "segmentation fault (invalid memory access or stack overflow)"
      : sig == SIGBUS ? "bus error" : sig == SIGFPE ? "arithmetic exception (integer division by zero?)"
      : sig == SIGILL ? "illegal instruction" : sig == SIGABRT ? "abort (assert failed?)" : "signal");
  uintptr_t sp = 0;
#if defined(__x86_64__)
  sp = (uintptr_t)((ucontext_t*)ctx)->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  sp = (uintptr_t)((ucontext_t*)ctx)->uc_mcontext.sp;
#endif
  Fiber* f = fiber_at(sp);
  if (f) {
    BlockInfo* bi = f->info;
    put(" in block ("); num(bi->bid.x); put(","); num(bi->bid.y); put(",");
    num(bi->bid.z); put(") thread ("); num(f->tid.x); put(","); num(f->tid.y); put(",");
    num(f->tid.z); put(")");
  }
  put("\n");
  ssize_t r = write(2, buf, len);
  (void)r;
  signal(sig, SIG_DFL);
  if (sig == SIGABRT) raise(sig);
}

#ifdef ASTRA_ASAN
// The static __shared__ array an ASan report's address is in or beside: its name, the element
// the access reached and the array's extent.
void name_shared_access() {
  if (!t_shared || !__asan_report_present()) return;
  uintptr_t a = (uintptr_t)__asan_get_report_address();
  for (const AstraSharedArray& s : *t_shared) {
    if (a + s.rz < s.base || a >= s.base + s.bytes + s.rz) continue;
    long long index = a >= s.base ? (long long)((a - s.base) / s.elem) : -(long long)((s.base - a + s.elem - 1) / s.elem);
    fprintf(stderr, "astra: shared memory `%s` accessed at element %lld, %s its %zu elements of %zu bytes\n",
            s.name, index, a >= s.base ? "past the end of" : "before the start of", s.bytes / s.elem, s.elem);
    return;
  }
}

void asan_death() {
  name_shared_access();
  Fiber* f = fiber_at((uintptr_t)__builtin_frame_address(0));
  if (f)
    fprintf(stderr, "astra: in block (%u,%u,%u) thread (%u,%u,%u)\n", f->info->bid.x,
            f->info->bid.y, f->info->bid.z, f->tid.x, f->tid.y, f->tid.z);
}
#endif

// Fiber stacks (1024 aligned regions) are kept between the blocks of a launch (every launch runs
// in a fresh process). Each region's guard page is set when a block first needs that many
// fibers: one mprotect per used stack, not 1024 (~2 ms, and 2,048 mappings, per worker). An
// arena whose block failed is unmapped instead, so that no state of abandoned fibers
// (sanitizer shadow included) reaches the next block.
struct Arena {
  void* map = nullptr;
  size_t bytes = 0;
  char* aligned = nullptr;
  int guarded = 0;  // regions [0, guarded) have their guard page
};
std::mutex g_arena_mu;
std::vector<Arena> g_arenas;

// A guard page under each fiber stack. Linux >= 6.13 installs one without splitting the mapping
// (MADV_GUARD_INSTALL): with 1,024 mprotect'ed pages the arena is 2,049 mappings, whose setup
// and teardown cost ~15 ms in every launch process. Older kernels: mprotect.
void guard_page(char* p) {
  static std::atomic<bool> madvise_guards{true};
  if (madvise_guards.load(std::memory_order_relaxed) && madvise(p, 4096, 102 /* MADV_GUARD_INSTALL */) == 0) return;
  madvise_guards.store(false, std::memory_order_relaxed);
  mprotect(p, 4096, PROT_NONE);
}

Arena take_arena(int stacks) {
  Arena a;
  {
    std::lock_guard<std::mutex> g(g_arena_mu);
    if (!g_arenas.empty()) {
      a = g_arenas.back();
      g_arenas.pop_back();
    }
  }
  if (!a.map) {
    a.bytes = kStackBytes * (1024 + 1);  // + 1: room to align the regions
    a.map = mmap(nullptr, a.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a.map == MAP_FAILED) return Arena();
    a.aligned = (char*)(((uintptr_t)a.map + kStackBytes - 1) & ~(kStackBytes - 1));
  }
  for (; a.guarded < stacks; ++a.guarded) guard_page(a.aligned + (size_t)a.guarded * kStackBytes);
  return a;
}

void give_arena(const Arena& a, bool reuse) {
  if (reuse) {
    std::lock_guard<std::mutex> g(g_arena_mu);
    g_arenas.push_back(a);
  } else {
    munmap(a.map, a.bytes);
  }
}

void worker_main(Launch& L, bool handlers) {
  Block b;
  t_worker = &b;
  // The rounding direction is per thread and fiber switches keep it (the hand-written switch
  // does not touch MXCSR; swapcontext restores what the fiber started with, set here first).
  int rounding_before = std::fegetround();
  std::fesetround(L.rounding);
  std::vector<char> altstack;
  if (handlers) {
    altstack.resize(64 * 1024);
    stack_t ss{};
    ss.ss_sp = altstack.data();
    ss.ss_size = altstack.size();
    sigaltstack(&ss, nullptr);
  }
  int n = (int)(L.block.x * L.block.y * L.block.z);
  b.n = n;
  b.entry = L.entry;
  b.args = L.args;
  b.info.bdim = L.block;
  b.info.gdim = dim3(L.grid.x, L.grid.y, L.grid.z);
  b.fibers.resize(n);
  b.ctx.resize(n);
  b.slot_of.resize(n);
  b.perm.resize(n);
#ifdef ASTRA_TSAN
  b.sched_fiber = __tsan_get_current_fiber();
  b.tsan_fiber.assign(n, nullptr);
  b.tsan_name.resize(n);
  b.tsan_started.assign(n, 0);
  b.arrivals.assign(n, 0);
  b.group_parity.assign(n, 0);
  b.group_mask.assign(n, 0);
  b.arrival_obj.assign(2 * (size_t)n, 0);
  b.warp_writes.resize(kMaxWarpWrites);
  install_report_filter();
#endif
  b.free_stacks.reserve(n);
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f = Fiber{};
    f.linear = i;
    f.tid = make_uint3(i % L.block.x, (i / L.block.x) % L.block.y, i / (L.block.x * L.block.y));
    f.lane = i % 32;
    f.warp = i / 32;
    f.block = &b;
    f.info = &b.info;
  }
  Arena arena = take_arena(n);
  if (!arena.map) {
    std::lock_guard<std::mutex> g(L.mu);
    if (L.error.empty()) L.error = "cannot allocate fiber stacks";
    L.stop = true;
    return;
  }
  b.arena = arena.aligned;
  bool failed = false;
  // malloc'd so that ASan puts red zones around the dynamic shared memory; aligned as a GPU's
  // (a vector access to it is checked for alignment).
  void* smem = L.shmem ? aligned_block(L.shmem) : nullptr;
  b.info.dyn_smem = smem;
  for (;;) {
    if (L.stop.load()) break;
    size_t k = L.next.fetch_add(1);
    if (k >= L.nblocks) break;
    if (!run_block(&b, L, L.block_at(k))) {
      failed = true;
      std::lock_guard<std::mutex> g(L.mu);
      if (L.error.empty()) L.error = b.error;
      L.stop = true;
      break;
    }
  }
  t_worker = nullptr;
#ifdef ASTRA_TSAN
  for (void* tf : b.tsan_fiber)
    if (tf) __tsan_destroy_fiber(tf);
  __tsan_acquire(&b.block_done);  // the worker's clean-up comes after all its CUDA threads
#endif
  std::free(smem);
  give_arena(arena, !failed);
  std::fesetround(rounding_before);
  if (handlers) {
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  }
}

}  // namespace

int bar_sync(int kind, int pred, const char* file, int line) {
  Fiber* f = self();
  Block* b = f->block;
  f->state = WAIT_BAR;
  f->op = kind;
  f->file = file;
  f->line = line;
  b->bar_arrived++;
  b->bar_count += pred ? 1 : 0;
#ifdef ASTRA_TSAN
  unsigned gen = b->bar_gen;
  __tsan_release(&b->bar_obj[gen & 1]);
#endif
  try_release_barrier(b);
  try_converge(b, f->warp);
  to_sched(b, f);  // always: the schedule decides who runs next
#ifdef ASTRA_TSAN
  __tsan_acquire(&b->bar_obj[gen & 1]);
#endif
  return (int)f->result;
}

unsigned long long warp_op(int op, unsigned mask, unsigned long long value, int src,
                           const char* file, int line, int* pred_out) {
  Fiber* f = self();
  Block* b = f->block;
  f->state = WAIT_WARP;
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->src = src;
  f->file = file;
  f->line = line;
  b->warp_arrived[f->warp] |= 1u << f->lane;
#ifdef ASTRA_TSAN
  unsigned k = ++b->arrivals[f->linear];
  __tsan_release(&b->arrival_obj[2 * f->linear + (k & 1)]);
#endif
  try_complete_warp(b, f->warp);
  try_converge(b, f->warp);
  to_sched(b, f);
#ifdef ASTRA_TSAN
  {
    unsigned req = b->group_mask[f->linear], par = b->group_parity[f->linear];
    for (int m = 0; m < 32; ++m)
      if (req >> m & 1) __tsan_acquire(&b->arrival_obj[2 * (f->warp * 32 + m) + (par >> m & 1)]);
  }
#endif
  if (pred_out) *pred_out = f->pred;
  return f->result;
}

unsigned active_mask(const char* file, int line) {
  Fiber* f = self();
  Block* b = f->block;
  f->state = WAIT_WARP;
  f->op = OP_ACTIVEMASK;
  f->file = file;
  f->line = line;
  b->warp_converging[f->warp] |= 1u << f->lane;
  try_converge(b, f->warp);
  to_sched(b, f);
  return (unsigned)f->result;
}

void trap(const char* file, int line) {
  Fiber* f = self();
  fprintf(stderr, "astra: __trap() at %s:%d in block (%u,%u,%u) thread (%u,%u,%u)\n",
          file, line, f->info->bid.x, f->info->bid.y, f->info->bid.z, f->tid.x, f->tid.y,
          f->tid.z);
  fflush(stderr);
  signal(SIGABRT, SIG_DFL);
  abort();
}

void misaligned(const void* p, unsigned long long bytes, const char* file, int line, const char* type) {
  Fiber* f = self();  // an access the GPU would fault on: inline PTX (inline_asm.py) or C++ (below)
  fprintf(stderr, "astra: misaligned address %p: %s%s needs %llu-byte alignment, at %s:%d in block (%u,%u,%u) "
          "thread (%u,%u,%u)\n", p, type ? "an access to " : "an access", type ? type : "", bytes, file, line, f->info->bid.x, f->info->bid.y, f->info->bid.z, f->tid.x, f->tid.y, f->tid.z);
  fflush(stderr);
  signal(SIGABRT, SIG_DFL);
  abort();
}

// Kernel code is compiled with the compiler's alignment check (toolchain.ALIGNMENT_CHECK), which
// calls these on a misaligned access; their data is laid out as GCC and Clang pass it (ubsan's
// TypeMismatchData, version 1). Defined here so that no sanitizer library is needed.
struct UbsanLocation {
  const char* file;
  unsigned line, column;
};
struct UbsanType {
  unsigned short kind, info;
  char name[1];  // the type's name in quotes, e.g. 'const float4'
};
struct UbsanMismatch {
  UbsanLocation loc;
  const UbsanType* type;
  unsigned char log_alignment, check_kind;
};

[[noreturn]] void ubsan_misaligned(const UbsanMismatch* d, uintptr_t p) {
  misaligned((const void*)p, 1ull << d->log_alignment, d->loc.file ? d->loc.file : "?", (int)d->loc.line,
             d->type ? d->type->name : nullptr);
}

void* dyn_smem() { return self()->info->dyn_smem; }

namespace {
std::vector<void (*)(void*)>& dyn_setters() {
  static std::vector<void (*)(void*)> v;
  return v;
}
}  // namespace
int register_dyn_shared(void (*set)(void*)) {
  dyn_setters().push_back(set);
  return 0;
}

bool guard_shared(const char* name, void* base, size_t bytes, size_t elem, void* lo, void* hi, size_t rz) {
#ifdef ASTRA_ASAN
  ASAN_POISON_MEMORY_REGION(lo, rz);
  ASAN_POISON_MEMORY_REGION(hi, rz);
  if (!t_shared) t_shared = new std::vector<AstraSharedArray>();
  t_shared->push_back({name, (uintptr_t)base, bytes, elem ? elem : 1, rz});
#else
  (void)name, (void)base, (void)bytes, (void)elem, (void)lo, (void)hi, (void)rz;
#endif
  return true;
}

void poison_shared(void* p, size_t n, unsigned long long* epoch) {
  BlockInfo* bi = self()->info;
  if (*epoch != bi->epoch) {
#ifdef ASTRA_TSAN
    __tsan_ignore_thread_begin();  // poisoning belongs to the block's start, not to this thread
#endif
    std::memset(p, 0xFF, n);
    *epoch = bi->epoch;
#ifdef ASTRA_TSAN
    __tsan_ignore_thread_end();
#endif
  }
}

}  // namespace astra

extern "C" [[noreturn]] void __ubsan_handle_type_mismatch_v1_abort(const astra::UbsanMismatch* d, uintptr_t p) {
  astra::ubsan_misaligned(d, p);
}
extern "C" [[noreturn]] void __ubsan_handle_type_mismatch_v1(const astra::UbsanMismatch* d, uintptr_t p) {
  astra::ubsan_misaligned(d, p);
}

using namespace astra;

// Each module carries its own runtime, hence its own stack pool: the executor trims the pool
// of the module it used last before it launches another.
extern "C" void astra_trim() {
  std::lock_guard<std::mutex> g(g_arena_mu);
  for (auto& a : g_arenas) munmap(a.map, a.bytes);
  g_arenas.clear();
}

// order: 0 forward, 1 reverse, 2 random. rounding: 0 to nearest, 1 upward, 2 downward, 3
// toward zero (IEEE directions, for the gate's measure of a kernel's own rounding error).
// Returns 0, or 1 with a message in err.
// What a float atomic add adds in this launch (the shim's ledger_term): a launch runs in a
// process of its own, so one word for the launch.
extern "C" int astra_atomic_ledger = 0;

extern "C" int astra_launch(void (*entry)(void**), void** args, int nargs,
                            const unsigned long long* buf_bytes, int copy_buffers,
                            const unsigned* grid, const unsigned* block,
                            unsigned long long shmem, int order, int rounding, unsigned long long seed,
                            int workers, int stack_kib, int handlers, char* err, int errlen,
                            const unsigned long long* relocs, int nrelocs) {
  static bool line_buffered = false;  // kernel printf output survives a crash that follows it
  if (!line_buffered) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    line_buffered = true;
  }
  auto fail_msg = [&](const std::string& m) {
    std::snprintf(err, errlen, "%s", m.c_str());
    return 1;
  };
  unsigned long long nthreads = (unsigned long long)block[0] * block[1] * block[2];
  if (nthreads == 0 || nthreads > 1024)
    return fail_msg("invalid block size " + std::to_string(block[0]) + "x" + std::to_string(block[1]) +
                    "x" + std::to_string(block[2]) + ": a block has 1 to 1024 threads");
  if (block[2] > 64) return fail_msg("invalid block size: blockDim.z is at most 64");
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[1] > 65535 || grid[2] > 65535 ||
      grid[0] > 2147483647u)
    return fail_msg("invalid grid size");
  unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
  if (nblocks > (1ull << 32) - 1) return fail_msg("grid too large for the CPU backend");
  if (shmem > 232448) return fail_msg("dynamic shared memory of " + std::to_string(shmem) +
                                      " bytes exceeds the 227 KiB a block can have");
  // With ASan, buffers are copied into malloc'd memory so that out-of-bounds accesses hit
  // red zones instead of neighbouring data.
  std::vector<void*> copies(nargs, nullptr);
  std::vector<void*> ptr_vals(nargs, nullptr);
  std::vector<void*> argv(args, args + nargs);
  if (copy_buffers) {
    for (int i = 0; i < nargs; ++i) {
      if (!buf_bytes[i]) continue;
      void* src = *(void**)args[i];
      copies[i] = aligned_block(buf_bytes[i]);
      std::memcpy(copies[i], src, buf_bytes[i]);
      ptr_vals[i] = copies[i];
      argv[i] = &ptr_vals[i];
    }
  }
  // Addresses inside arguments (a struct's pointer fields, a table of pointers): the buffers as
  // this launch sees them — the copies, where there are copies. The executor checked the bounds.
  for (int k = 0; k < nrelocs; ++k) {
    unsigned long long target = relocs[4 * k], at = relocs[4 * k + 1], source = relocs[4 * k + 2];
    char* where = buf_bytes[target] ? (char*)*(void**)argv[target] : (char*)argv[target];
    void* address = (char*)*(void**)argv[source] + relocs[4 * k + 3];
    std::memcpy(where + at, &address, sizeof address);
  }
  Launch L;
  L.entry = entry;
  L.args = argv.data();
  L.grid = make_uint3(grid[0], grid[1], grid[2]);
  L.block = dim3(block[0], block[1], block[2]);
  L.shmem = shmem;
  L.order = order;
  static const int directions[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
  // the atomic ledger rides in the rounding word's second byte (Schedule.atomics)
  int ledger = rounding >> 8;
  rounding &= 0xff;
  if (ledger < 0 || ledger > 2) return fail_msg("unknown atomic ledger " + std::to_string(ledger));
  astra_atomic_ledger = ledger;
  if (rounding < 0 || rounding > 3) return fail_msg("unknown rounding direction " + std::to_string(rounding));
  L.rounding = directions[rounding];
  L.seed = seed;
  (void)stack_kib;  // the stack size is fixed at build time (ASTRA_STACK_SHIFT)
  L.nblocks = nblocks;
  if (order == 2) {
    std::mt19937_64 rng(seed);
    auto gcd = [](unsigned long long a, unsigned long long b) { while (b) { a %= b; std::swap(a, b); } return a; };
    do L.perm_a = rng() % nblocks + 1; while (gcd(L.perm_a, nblocks) != 1);
    L.perm_c = rng() % nblocks;
  }
#ifdef ASTRA_ASAN
  __sanitizer_set_death_callback(asan_death);
#endif
  struct sigaction old[5];
  int sigs[5] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  if (handlers) {
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 5; ++i) sigaction(sigs[i], &sa, &old[i]);
  }
  int nw = (int)std::max(1ull, std::min<unsigned long long>(workers > 0 ? workers : 1, nblocks));
  std::vector<std::thread> pool;
  for (int i = 1; i < nw; ++i) pool.emplace_back([&] { worker_main(L, handlers != 0); });
  worker_main(L, handlers != 0);
  for (auto& t : pool) t.join();
  if (handlers)
    for (int i = 0; i < 5; ++i) sigaction(sigs[i], &old[i], nullptr);
  fflush(stdout);
  if (copy_buffers) {
    for (int i = 0; i < nargs; ++i) {
      if (!copies[i]) continue;
      std::memcpy(*(void**)args[i], copies[i], buf_bytes[i]);
      std::free(copies[i]);
    }
  }
  if (!L.error.empty()) return fail_msg(L.error);
  return 0;
}
