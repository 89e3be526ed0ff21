// Astra CPU backend: force-included (-include) before a CUDA compilation unit compiled as
// host C++. Kernels run as fibers, one per CUDA thread, switching only at barriers and warp
// collectives (astra_runtime.cpp), so block and warp semantics are exact.
#ifndef ASTRA_CUDA_SHIM_H
#define ASTRA_CUDA_SHIM_H

// The C and C++ standard headers come first, before `__noinline__` and friends become macros:
// newer libstdc++ headers (GCC 13) spell `__attribute__((__noinline__))` themselves.
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cassert>
#include <climits>
#include <cfloat>
#include <type_traits>
#include <utility>
#include <algorithm>
#include <limits>
#include <atomic>
#include <memory>
#include <functional>
#include <array>
#include <tuple>
#include <new>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

// ---- CUDA qualifiers become plain C++ (defined before the CUDA headers, which keep them).
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __maxnreg__(n)
// Static __shared__ storage is per block: blocks of one worker thread run one after another,
// so thread_local storage is exactly one block's shared memory. (The source screen inserts a
// poisoning statement after each local declaration; `extern __shared__` is rewritten.)
#define __shared__ static thread_local
// The host runtime API has no business in a kernel unit; keep those headers out.
#define __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_API_H__
#define __cuda_cuda_h__
#define __DEVICE_LAUNCH_PARAMETERS_H__

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifdef ASTRA_WITH_FP8  // only when the unit includes them: they are large
#include <cuda_fp8.h>
#include <cuda_fp6.h>
#include <cuda_fp4.h>
#endif
#include <vector_types.h>
#include <vector_functions.h>

namespace astra {

enum WarpOp : int {
  OP_SYNCWARP = 0, OP_SHFL, OP_BALLOT, OP_ANY, OP_ALL, OP_UNI, OP_RED_ADD, OP_RED_MIN_U,
  OP_RED_MAX_U, OP_RED_MIN_I, OP_RED_MAX_I, OP_RED_AND, OP_RED_OR, OP_RED_XOR, OP_MATCH_ANY,
  OP_MATCH_ALL, OP_ACTIVEMASK,
};
enum BarKind : int { BAR_SYNC = 0, BAR_COUNT, BAR_AND, BAR_OR };

struct Block;
struct BlockInfo;
struct Fiber {
  uint3 tid;
  Block* block;
  BlockInfo* info;
  int linear, lane, warp, state;
  void* sp;
  char* stack;
  const char* file;  // where it waits (from __FILE__/__LINE__, i.e. the user's #line mapping)
  int line;
  int op;
  unsigned mask;
  unsigned long long value, result;
  int src, pred;
};
struct BlockInfo {
  uint3 bid;
  dim3 bdim, gdim;
  void* dyn_smem;
  unsigned long long epoch;  // unique per block run: static shared memory is poisoned once per epoch
};

// Fiber stacks are 2^ASTRA_STACK_SHIFT-byte aligned regions with a header at the top naming
// their fiber, so the current CUDA thread is found from the stack pointer: no TLS lookup.
#ifndef ASTRA_STACK_SHIFT
#define ASTRA_STACK_SHIFT 16
#endif
constexpr uintptr_t kStackBytes = uintptr_t(1) << ASTRA_STACK_SHIFT;
constexpr unsigned long long kStackMagic = 0xA57AF1BE12345678ull;
struct StackHeader {
  unsigned long long magic;
  Fiber* fiber;
};
inline StackHeader* stack_header(uintptr_t sp) {
  return reinterpret_cast<StackHeader*>((sp | (kStackBytes - 1)) + 1 - 64);
}
inline Fiber* self() { return stack_header((uintptr_t)__builtin_frame_address(0))->fiber; }

int bar_sync(int kind, int pred, const char* file, int line);
unsigned long long warp_op(int op, unsigned mask, unsigned long long value, int src,
                           const char* file, int line, int* pred_out);
// The lanes of the warp that reach this call together (see astra_runtime.cpp).
unsigned active_mask(const char* file, int line);
[[noreturn]] void trap(const char* file, int line);
[[noreturn]] void misaligned(const void* p, unsigned long long bytes, const char* file, int line,
                             const char* type = nullptr);
void* dyn_smem();
// Namespace-scope `extern __shared__` arrays: pointer setters called at every block start.
int register_dyn_shared(void (*set)(void*));
void poison_shared(void* p, size_t n, unsigned long long* epoch);
bool guard_shared(const char* name, void* base, size_t bytes, size_t elem, void* lo, void* hi, size_t rz);

template <class T> inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 64 bits");
  unsigned long long b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T> inline T from_bits(unsigned long long b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// PTX shfl semantics (segment mask from `width`, clamp to own lane when out of range).
inline int shfl_src(int mode, int lane, int b, int width) {
  int segmask = (32 - width) & 0x1f;
  int c = mode == 1 ? 0 : 0x1f;  // shfl.up uses c = 0, the others c = 0x1f
  int maxLane = (lane & segmask) | (c & ~segmask);
  int minLane = lane & segmask;
  int j; bool ok;
  switch (mode) {
    case 1: j = lane - b; ok = j >= maxLane; break;            // up
    case 2: j = lane + b; ok = j <= maxLane; break;            // down
    case 3: j = lane ^ (b & 0x1f); ok = j <= maxLane; break;   // xor (bfly)
    default: j = minLane | ((b & 0x1f) & ~segmask); ok = j <= maxLane; break;  // idx
  }
  return ok ? j : lane;
}
template <class T> inline T shfl(int mode, const char* f, int l, unsigned mask, T var, int b, int width) {
  int src = shfl_src(mode, self()->lane, b, width);
  return from_bits<T>(warp_op(OP_SHFL, mask, to_bits(var), src, f, l, nullptr));
}
}  // namespace astra

// ---- Built-in variables.
#define threadIdx (static_cast<const uint3&>(astra::self()->tid))
#define blockIdx (static_cast<const uint3&>(astra::self()->info->bid))
#define blockDim (static_cast<const dim3&>(astra::self()->info->bdim))
#define gridDim (static_cast<const dim3&>(astra::self()->info->gdim))
#define warpSize 32

// ---- Barriers and warp collectives: switch points, recorded with the caller's source line.
#define __syncthreads() ((void)astra::bar_sync(astra::BAR_SYNC, 1, __FILE__, __LINE__))
#define __syncthreads_count(p) astra::bar_sync(astra::BAR_COUNT, (p) ? 1 : 0, __FILE__, __LINE__)
#define __syncthreads_and(p) astra::bar_sync(astra::BAR_AND, (p) ? 1 : 0, __FILE__, __LINE__)
#define __syncthreads_or(p) astra::bar_sync(astra::BAR_OR, (p) ? 1 : 0, __FILE__, __LINE__)
#define __syncwarp(...) ((void)astra::warp_op(astra::OP_SYNCWARP, astra_mask_or_full(__VA_ARGS__), 0, 0, __FILE__, __LINE__, nullptr))
inline unsigned astra_mask_or_full(unsigned m = 0xffffffffu) { return m; }
#define __shfl_sync(m, v, ...) astra::shfl(0, __FILE__, __LINE__, (m), (v), __VA_ARGS__)
#define __shfl_up_sync(m, v, ...) astra::shfl(1, __FILE__, __LINE__, (m), (v), __VA_ARGS__)
#define __shfl_down_sync(m, v, ...) astra::shfl(2, __FILE__, __LINE__, (m), (v), __VA_ARGS__)
#define __shfl_xor_sync(m, v, ...) astra::shfl(3, __FILE__, __LINE__, (m), (v), __VA_ARGS__)
namespace astra {
template <class T> inline T shfl(int mode, const char* f, int l, unsigned m, T v, int b) {
  return shfl(mode, f, l, m, v, b, 32);
}
}
#define __ballot_sync(m, p) ((unsigned)astra::warp_op(astra::OP_BALLOT, (m), (p) ? 1 : 0, 0, __FILE__, __LINE__, nullptr))
#define __any_sync(m, p) ((int)astra::warp_op(astra::OP_ANY, (m), (p) ? 1 : 0, 0, __FILE__, __LINE__, nullptr))
#define __all_sync(m, p) ((int)astra::warp_op(astra::OP_ALL, (m), (p) ? 1 : 0, 0, __FILE__, __LINE__, nullptr))
#define __uni_sync(m, p) ((int)astra::warp_op(astra::OP_UNI, (m), (p) ? 1 : 0, 0, __FILE__, __LINE__, nullptr))
#define __activemask() astra::active_mask(__FILE__, __LINE__)
namespace astra {
inline unsigned reduce(int op, const char* f, int l, unsigned m, unsigned v) {
  return (unsigned)warp_op(op, m, v, 0, f, l, nullptr);
}
inline int reduce(int op, const char* f, int l, unsigned m, int v) {
  int o = op == OP_RED_MIN_U ? OP_RED_MIN_I : op == OP_RED_MAX_U ? OP_RED_MAX_I : op;
  return (int)(unsigned)warp_op(o, m, (unsigned)v, 0, f, l, nullptr);
}
template <class T> inline unsigned match_any(const char* f, int l, unsigned m, T v) {
  return (unsigned)warp_op(OP_MATCH_ANY, m, to_bits(v), 0, f, l, nullptr);
}
template <class T> inline unsigned match_all(const char* f, int l, unsigned m, T v, int* pred) {
  return (unsigned)warp_op(OP_MATCH_ALL, m, to_bits(v), 0, f, l, pred);
}
}  // namespace astra
#define __reduce_add_sync(m, v) astra::reduce(astra::OP_RED_ADD, __FILE__, __LINE__, (m), (v))
#define __reduce_min_sync(m, v) astra::reduce(astra::OP_RED_MIN_U, __FILE__, __LINE__, (m), (v))
#define __reduce_max_sync(m, v) astra::reduce(astra::OP_RED_MAX_U, __FILE__, __LINE__, (m), (v))
#define __reduce_and_sync(m, v) astra::reduce(astra::OP_RED_AND, __FILE__, __LINE__, (m), (unsigned)(v))
#define __reduce_or_sync(m, v) astra::reduce(astra::OP_RED_OR, __FILE__, __LINE__, (m), (unsigned)(v))
#define __reduce_xor_sync(m, v) astra::reduce(astra::OP_RED_XOR, __FILE__, __LINE__, (m), (unsigned)(v))
#define __match_any_sync(m, v) astra::match_any(__FILE__, __LINE__, (m), (v))
#define __match_all_sync(m, v, p) astra::match_all(__FILE__, __LINE__, (m), (v), (p))
#define __trap() astra::trap(__FILE__, __LINE__)
#define __brkpt() astra::trap(__FILE__, __LINE__)
// nvcc's front end (EDG, clang's builtin) reads `__builtin_assume(c)` as an optimiser hint whose
// argument is never evaluated (TransformerEngine's warp_reduce_max); g++ has no such builtin.
#if !defined(__clang__)
#define __builtin_assume(...) ((void)sizeof((__VA_ARGS__) ? 1 : 0))
#endif

// ---- Memory ordering: blocks run on several host threads.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) {}
// The clock is a counter (results never depend on the host's timing). It runs on from one launch
// of a module to the next, as a GPU's does: the counter is the module's own writable data, which
// the executor carries between launches with the __device__ variables (runtime/astra_state.ld).
inline long long clock64() { static std::atomic<long long> t{0}; return t.fetch_add(1) * 16; }
inline unsigned long long __globaltimer() { return (unsigned long long)clock64(); }
inline void __prof_trigger(int) {}

// ---- Cache-hinted loads and stores are plain accesses here.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---- Atomics: real host atomics (blocks of one launch run concurrently on several cores).
// The launch's atomic ledger (Schedule.atomics, set by the runtime for one launch): 0, a float
// atomic add adds its value; 1, its magnitude; 2, one. What the gate bounds a float output's
// run-to-run differences by (gate/atomic_bound.py): how many adds an element takes and the sum of
// their magnitudes, in the launch's own arithmetic.
extern "C" int astra_atomic_ledger;
namespace astra {
inline float ledger_term(float v) { return astra_atomic_ledger == 1 ? fabsf(v) : astra_atomic_ledger == 2 ? 1.0f : v; }
inline double ledger_term(double v) { return astra_atomic_ledger == 1 ? fabs(v) : astra_atomic_ledger == 2 ? 1.0 : v; }
inline __half ledger_term(__half v) {
  return astra_atomic_ledger == 0 ? v : __float2half(astra_atomic_ledger == 1 ? fabsf(__half2float(v)) : 1.0f);
}
inline __nv_bfloat16 ledger_term(__nv_bfloat16 v) {
  return astra_atomic_ledger == 0 ? v : __float2bfloat16(astra_atomic_ledger == 1 ? fabsf(__bfloat162float(v)) : 1.0f);
}
inline __half2 ledger_term(__half2 v) { return astra_atomic_ledger == 0 ? v : __halves2half2(ledger_term(__low2half(v)), ledger_term(__high2half(v))); }
inline __nv_bfloat162 ledger_term(__nv_bfloat162 v) {
  return astra_atomic_ledger == 0 ? v : __halves2bfloat162(ledger_term(__low2bfloat16(v)), ledger_term(__high2bfloat16(v)));
}
template <class T> inline T atomic_rmw_cas(T* addr, T (*f)(T, T), T val) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic size");
  using U = std::conditional_t<sizeof(T) == 2, unsigned short,
            std::conditional_t<sizeof(T) == 4, unsigned, unsigned long long>>;
  U* p = reinterpret_cast<U*>(addr);
  U old = __atomic_load_n(p, __ATOMIC_RELAXED);
  for (;;) {
    T o = from_bits<T>(old);
    T n = f(o, val);
    U nb = (U)to_bits(n);
    if (__atomic_compare_exchange_n(p, &old, nb, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return o;
  }
}
}  // namespace astra
#define ASTRA_ATOMIC_INT(T)                                                                    \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }         \
  inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }         \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }       \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }         \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }           \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }         \
  inline T atomicMin(T* a, T v) { return astra::atomic_rmw_cas<T>(a, [](T o, T x) { return x < o ? x : o; }, v); } \
  inline T atomicMax(T* a, T v) { return astra::atomic_rmw_cas<T>(a, [](T o, T x) { return x > o ? x : o; }, v); } \
  inline T atomicCAS(T* a, T cmp, T v) {                                                       \
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
    return cmp;                                                                                \
  }
ASTRA_ATOMIC_INT(int)
ASTRA_ATOMIC_INT(unsigned)
ASTRA_ATOMIC_INT(unsigned long long)
ASTRA_ATOMIC_INT(long long)
#undef ASTRA_ATOMIC_INT
inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline unsigned atomicInc(unsigned* a, unsigned m) {
  return astra::atomic_rmw_cas<unsigned>(a, [](unsigned o, unsigned m) { return o >= m ? 0u : o + 1; }, m);
}
inline unsigned atomicDec(unsigned* a, unsigned m) {
  return astra::atomic_rmw_cas<unsigned>(a, [](unsigned o, unsigned m) { return (o == 0 || o > m) ? m : o - 1; }, m);
}
inline float atomicExch(float* a, float v) { return astra::from_bits<float>(__atomic_exchange_n((unsigned*)a, (unsigned)astra::to_bits(v), __ATOMIC_SEQ_CST)); }
inline float atomicAdd(float* a, float v) { return astra::atomic_rmw_cas<float>(a, [](float o, float x) { return o + x; }, astra::ledger_term(v)); }
inline double atomicAdd(double* a, double v) { return astra::atomic_rmw_cas<double>(a, [](double o, double x) { return o + x; }, astra::ledger_term(v)); }
inline float atomicMax(float* a, float v) { return astra::atomic_rmw_cas<float>(a, [](float o, float x) { return fmaxf(o, x); }, v); }
inline float atomicMin(float* a, float v) { return astra::atomic_rmw_cas<float>(a, [](float o, float x) { return fminf(o, x); }, v); }
inline __half atomicAdd(__half* a, __half v) { return astra::atomic_rmw_cas<__half>(a, [](__half o, __half x) { return __hadd(o, x); }, astra::ledger_term(v)); }
inline __half2 atomicAdd(__half2* a, __half2 v) { return astra::atomic_rmw_cas<__half2>(a, [](__half2 o, __half2 x) { return __hadd2(o, x); }, astra::ledger_term(v)); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) { return astra::atomic_rmw_cas<__nv_bfloat16>(a, [](__nv_bfloat16 o, __nv_bfloat16 x) { return __hadd(o, x); }, astra::ledger_term(v)); }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) { return astra::atomic_rmw_cas<__nv_bfloat162>(a, [](__nv_bfloat162 o, __nv_bfloat162 x) { return __hadd2(o, x); }, astra::ledger_term(v)); }
#define ASTRA_ATOMIC_SCOPES(name)                                                              \
  template <class... A> inline auto name##_block(A... a) -> decltype(name(a...)) { return name(a...); } \
  template <class... A> inline auto name##_system(A... a) -> decltype(name(a...)) { return name(a...); }
ASTRA_ATOMIC_SCOPES(atomicAdd) ASTRA_ATOMIC_SCOPES(atomicSub) ASTRA_ATOMIC_SCOPES(atomicExch)
ASTRA_ATOMIC_SCOPES(atomicMin) ASTRA_ATOMIC_SCOPES(atomicMax) ASTRA_ATOMIC_SCOPES(atomicCAS)
ASTRA_ATOMIC_SCOPES(atomicAnd) ASTRA_ATOMIC_SCOPES(atomicOr) ASTRA_ATOMIC_SCOPES(atomicXor)
ASTRA_ATOMIC_SCOPES(atomicInc) ASTRA_ATOMIC_SCOPES(atomicDec)
#undef ASTRA_ATOMIC_SCOPES

// ---- Integer and bit intrinsics.
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline int __mul24(int a, int b) { return (int)(((long long)(a << 8 >> 8)) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
inline int __sad(int a, int b, unsigned c) { return (int)(c + (unsigned)(a > b ? a - b : b - a)); }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)(v >> (s & 31));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_l(lo, hi, s > 32 ? 32 : s); }
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_r(lo, hi, s > 32 ? 32 : s); }

// ---- Reinterpretation and float intrinsics (GPU approximations emulated where they differ).
inline float __int_as_float(int x) { return astra::from_bits<float>((unsigned)x); }
inline int __float_as_int(float x) { return (int)(unsigned)astra::to_bits(x); }
inline float __uint_as_float(unsigned x) { return astra::from_bits<float>(x); }
inline unsigned __float_as_uint(float x) { return (unsigned)astra::to_bits(x); }
inline double __longlong_as_double(long long x) { return astra::from_bits<double>((unsigned long long)x); }
inline long long __double_as_longlong(double x) { return (long long)astra::to_bits(x); }
inline int __double2hiint(double x) { return (int)(astra::to_bits(x) >> 32); }
inline int __double2loint(double x) { return (int)(unsigned)astra::to_bits(x); }
inline double __hiloint2double(int hi, int lo) { return astra::from_bits<double>(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo); }
// Rounded-to-nearest operations must not be contracted into FMAs (volatile blocks contraction).
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fmul_rz(float a, float b) { return __fmul_rn(a, b); }
inline float __fadd_rz(float a, float b) { return __fadd_rn(a, b); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }
inline float __fdividef(float a, float b) {
  // div.approx: a * rcp(b); returns 0 for 2^126 < |b| < 2^128 on the GPU.
  float ab = fabsf(b);
  if (ab > 8.507059e37f && ab < INFINITY) return 0.0f;
  return __fmul_rn(a, 1.0f / b);
}
inline float __expf(float x) { return exp2f(__fmul_rn(x, 1.4426950408889634f)); }
inline float __exp10f(float x) { return exp2f(__fmul_rn(x, 3.3219280948873622f)); }
inline float __logf(float x) { return __fmul_rn(log2f(x), 0.6931471805599453f); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return __fmul_rn(log2f(x), 0.3010299956639812f); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __tanf(float x) { return __fdividef(sinf(x), cosf(x)); }
inline float __powf(float x, float y) { return exp2f(__fmul_rn(y, log2f(x))); }
inline float sinpif(float x) { return sinf(x * 3.14159265358979f); }
inline float cospif(float x) { return cosf(x * 3.14159265358979f); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline float fdividef(float a, float b) { return a / b; }
inline float rhypotf(float a, float b) { return (float)(1.0 / std::hypot((double)a, (double)b)); }
inline float norm3df(float a, float b, float c) { return (float)std::sqrt((double)a * a + (double)b * b + (double)c * c); }
inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
inline float norm4df(float a, float b, float c, float d) {
  return (float)std::sqrt((double)a * a + (double)b * b + (double)c * c + (double)d * d);
}
inline float normf(int n, const float* a) {
  double s = 0; for (int i = 0; i < n; ++i) s += (double)a[i] * a[i]; return (float)std::sqrt(s);
}
inline float rnormf(int n, const float* a) { return 1.0f / normf(n, a); }
inline double erfinv(double y) {
  // Newton on erf from a rational first guess; double precision is plenty for float results.
  if (y <= -1.0) return y == -1.0 ? -INFINITY : NAN;
  if (y >= 1.0) return y == 1.0 ? INFINITY : NAN;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  x = w < 5.0 ? (w - 2.5) * 2.81022636e-08 + 3.43273939e-07 : std::sqrt(w) - 3.0;
  if (w < 5.0) {
    for (double c : {-3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941}) x = c + x * (w - 2.5);
  } else {
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682}) p = c + p * x;
    x = p;
  }
  x *= y;
  for (int i = 0; i < 3; ++i) x -= (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
  return x;
}
inline float erfinvf(float y) { return (float)erfinv((double)y); }
inline float erfcinvf(float y) { return (float)erfinv(1.0 - (double)y); }
inline float __float2float(float x) { return x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
inline long long __float2ll_rz(float x) { return (long long)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline int __double2int_rn(double x) { return (int)nearbyint(x); }
inline int __double2int_rz(double x) { return (int)x; }
inline float __double2float_rn(double x) { return (float)x; }
inline double __int2double_rn(int x) { return (double)x; }
inline double __uint2double_rn(unsigned x) { return (double)x; }
inline double __ll2double_rn(long long x) { return (double)x; }
inline double __ull2double_rn(unsigned long long x) { return (double)x; }
inline float __ull2float_rn(unsigned long long x) { return (float)x; }
inline unsigned long long __float2ull_rn(float x) { return (unsigned long long)nearbyintf(x); }
inline unsigned __double2uint_rn(double x) { return (unsigned)nearbyint(x); }
inline long long __double2ll_rn(double x) { return (long long)nearbyint(x); }
inline unsigned long long __double2ull_rn(double x) { return (unsigned long long)nearbyint(x); }

// CUDA's overloaded min/max on device (mixed types promote as the usual arithmetic conversions).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B> && !std::is_same_v<A, B>>>
inline std::common_type_t<A, B> min(A a, B b) { using C = std::common_type_t<A, B>; return min(C(a), C(b)); }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B> && !std::is_same_v<A, B>>>
inline std::common_type_t<A, B> max(A a, B b) { using C = std::common_type_t<A, B>; return max(C(a), C(b)); }
inline int umin(unsigned a, unsigned b) { return a < b ? a : b; }

// ---- Half / bfloat16 functions the host headers leave to device code. Templates, so that a
// real host overload (newer headers) wins overload resolution instead of clashing.
namespace astra {
template <class H> constexpr bool is_h1 = std::is_same_v<H, __half> || std::is_same_v<H, __nv_bfloat16>;
template <class H> constexpr bool is_h2 = std::is_same_v<H, __half2> || std::is_same_v<H, __nv_bfloat162>;
// Through the conversion functions, not casts: torch's -D__CUDA_NO_HALF_CONVERSIONS__ and
// -D__CUDA_NO_BFLOAT16_CONVERSIONS__ take the casts away, as they do under nvcc.
inline float f(__half h) { return __half2float(h); }
inline float f(__nv_bfloat16 h) { return __bfloat162float(h); }
template <class H> inline H h(float x) {
  if constexpr (std::is_same_v<H, __half>) return __float2half_rn(x); else return __float2bfloat16_rn(x);
}
template <class H2> using lane_t = std::conditional_t<std::is_same_v<H2, __half2>, __half, __nv_bfloat16>;
template <class H2, class Fn> inline H2 map2(H2 a, Fn fn) { H2 r; r.x = fn(a.x); r.y = fn(a.y); return r; }
}  // namespace astra
#define ASTRA_H1_UNARY(name, expr)                                                             \
  template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline H name(H a) {          \
    float x = astra::f(a); return astra::h<H>(expr); }
#define ASTRA_H2_UNARY(name, one)                                                              \
  template <class H, std::enable_if_t<astra::is_h2<H>, int> = 0> inline H name(H a) {          \
    return astra::map2(a, [](astra::lane_t<H> v) { return one(v); }); }
ASTRA_H1_UNARY(hexp, __expf(x))
ASTRA_H1_UNARY(hexp2, exp2f(x))
ASTRA_H1_UNARY(hexp10, __exp10f(x))
ASTRA_H1_UNARY(hlog, logf(x))
ASTRA_H1_UNARY(hlog2, log2f(x))
ASTRA_H1_UNARY(hlog10, log10f(x))
ASTRA_H1_UNARY(hsqrt, sqrtf(x))
ASTRA_H1_UNARY(hrsqrt, 1.0f / sqrtf(x))
ASTRA_H1_UNARY(hrcp, 1.0f / x)
ASTRA_H1_UNARY(hsin, sinf(x))
ASTRA_H1_UNARY(hcos, cosf(x))
ASTRA_H1_UNARY(htanh, tanhf(x))
ASTRA_H1_UNARY(htanh_approx, tanhf(x))
ASTRA_H1_UNARY(hfloor, floorf(x))
ASTRA_H1_UNARY(hceil, ceilf(x))
ASTRA_H1_UNARY(htrunc, truncf(x))
ASTRA_H1_UNARY(hrint, nearbyintf(x))
ASTRA_H2_UNARY(h2exp, hexp) ASTRA_H2_UNARY(h2exp2, hexp2) ASTRA_H2_UNARY(h2exp10, hexp10)
ASTRA_H2_UNARY(h2log, hlog) ASTRA_H2_UNARY(h2log2, hlog2) ASTRA_H2_UNARY(h2log10, hlog10)
ASTRA_H2_UNARY(h2sqrt, hsqrt) ASTRA_H2_UNARY(h2rsqrt, hrsqrt) ASTRA_H2_UNARY(h2rcp, hrcp)
ASTRA_H2_UNARY(h2sin, hsin) ASTRA_H2_UNARY(h2cos, hcos) ASTRA_H2_UNARY(h2tanh, htanh)
ASTRA_H2_UNARY(h2floor, hfloor) ASTRA_H2_UNARY(h2ceil, hceil) ASTRA_H2_UNARY(h2trunc, htrunc)
ASTRA_H2_UNARY(h2rint, hrint)
#undef ASTRA_H1_UNARY
#undef ASTRA_H2_UNARY
// fma.rn.f16: one rounding of the exact a*b+c (exact in float for half inputs; for bf16 the
// float fma rounds once to float then to bf16, a double rounding the GPU avoids only rarely).
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline H __hfma(H a, H b, H c) {
  return astra::h<H>((float)fma((double)astra::f(a) * astra::f(b), 1.0, (double)astra::f(c)));
}
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline H __hfma_sat(H a, H b, H c) {
  float r = astra::f(__hfma(a, b, c)); return astra::h<H>(__saturatef(r));
}
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline H __hfma_relu(H a, H b, H c) {
  float r = astra::f(__hfma(a, b, c)); return astra::h<H>(r < 0.0f ? 0.0f : r);
}
template <class H, std::enable_if_t<astra::is_h2<H>, int> = 0> inline H __hfma2(H a, H b, H c) {
  H r; r.x = __hfma(a.x, b.x, c.x); r.y = __hfma(a.y, b.y, c.y); return r;
}
template <class H, std::enable_if_t<astra::is_h2<H>, int> = 0> inline H __hfma2_relu(H a, H b, H c) {
  H r; r.x = __hfma_relu(a.x, b.x, c.x); r.y = __hfma_relu(a.y, b.y, c.y); return r;
}
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline int __half2int_rn(H a) { return (int)nearbyintf(astra::f(a)); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline int __half2int_rz(H a) { return (int)astra::f(a); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline int __half2int_rd(H a) { return (int)floorf(astra::f(a)); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline int __half2int_ru(H a) { return (int)ceilf(astra::f(a)); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline unsigned __half2uint_rn(H a) { return (unsigned)nearbyintf(astra::f(a)); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline long long __half2ll_rn(H a) { return (long long)nearbyintf(astra::f(a)); }
template <class H, std::enable_if_t<astra::is_h1<H>, int> = 0> inline unsigned long long __half2ull_rn(H a) { return (unsigned long long)nearbyintf(astra::f(a)); }
inline int __bfloat162int_rn(__nv_bfloat16 a) { return __half2int_rn(a); }
inline unsigned __bfloat162uint_rn(__nv_bfloat16 a) { return __half2uint_rn(a); }
inline long long __bfloat162ll_rn(__nv_bfloat16 a) { return __half2ll_rn(a); }
inline unsigned long long __bfloat162ull_rn(__nv_bfloat16 a) { return __half2ull_rn(a); }


// ---- Glue used by the generated launcher entries and the source rewrite.
namespace astra {
template <class... P, size_t... I>
inline void invoke_impl(void (*f)(P...), void** a, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<P>*>(a[I])...);
}
template <class... P> inline void invoke(void (*f)(P...), void** a) {
  invoke_impl(f, a, std::index_sequence_for<P...>{});
}
// Parameter sizes and kinds (1 = pointer) so the caller can check its arguments first.
template <class... P> inline int signature(void (*)(P...), unsigned long long* sizes, int* kinds, int max) {
  int i = 0;
  ((i < max ? (sizes[i] = sizeof(P), kinds[i] = std::is_pointer_v<P> ? 1 : 0) : 0, ++i), ...);
  return (int)sizeof...(P);
}
}  // namespace astra
#define ASTRA_POISON_SHARED(v)                                              \
  do {                                                                      \
    static thread_local unsigned long long astra_epoch_;                    \
    astra::poison_shared((void*)&(v), sizeof(v), &astra_epoch_);            \
  } while (0)

// A function-scope static __shared__ declaration, as the source screen rewrites it:
// `ASTRA_SHARED_OPEN(s) float s[64]; ASTRA_SHARED_CLOSE(s) ASTRA_SHARED_BIND(s, s)`. Plainly it is
// `static thread_local float s[64];`. Under AddressSanitizer the declaration becomes a member of a
// local struct between two redzones the runtime poisons, and `s` a reference to it: ASan keeps no
// redzones around thread_local storage, so an access past a shared array would land unseen in
// the next one.
#if defined(__SANITIZE_ADDRESS__)
#define ASTRA_SHARED_RZ 64
#define ASTRA_SHARED_OPEN(tag) struct astra_sh_##tag { char astra_lo_[ASTRA_SHARED_RZ];
#define ASTRA_SHARED_CLOSE(tag) \
  char astra_hi_[ASTRA_SHARED_RZ]; }; static thread_local astra_sh_##tag astra_shv_##tag;
#define ASTRA_SHARED_BIND(tag, v)                                                               \
  auto& v = astra_shv_##tag.v;                                                                 \
  do {                                                                                         \
    static thread_local bool astra_guarded_ = astra::guard_shared(                             \
        #v, (void*)&(v), sizeof(v), sizeof(std::remove_all_extents_t<std::remove_reference_t<decltype(v)>>), \
        astra_shv_##tag.astra_lo_, astra_shv_##tag.astra_hi_, ASTRA_SHARED_RZ);                \
    (void)astra_guarded_;                                                                      \
  } while (0);
#else
#define ASTRA_SHARED_OPEN(tag) static thread_local
#define ASTRA_SHARED_CLOSE(tag)
#define ASTRA_SHARED_BIND(tag, v)
#endif

// Shared-window addresses have no meaning here: declared only, so a kernel that reaches them is
// refused (inline_asm.DECLARED_ONLY reads the object's undefined symbols), one that does not compiles.
extern "C" size_t __cvta_generic_to_shared(const void* p);
extern "C" void* __cvta_shared_to_generic(size_t a);

// The inline PTX idioms the CPU build runs exactly (inline_asm.py writes the calls): an operand's
// bits move as a register's do, and an access faults where the GPU's would (misaligned).
namespace astra {
template <unsigned N, class T>
inline auto asm_bits(const T& v) {
  static_assert(sizeof(T) * 8 == N, "an inline PTX operand of another size than its register");
  using B = std::conditional_t<N == 16, unsigned short, std::conditional_t<N == 32, unsigned, unsigned long long>>;
  B b;
  __builtin_memcpy(&b, &v, sizeof b);
  return b;
}
template <class T, class B>
inline void asm_set(T& out, B bits) {
  static_assert(sizeof(T) == sizeof(B), "an inline PTX operand of another size than its register");
  __builtin_memcpy(&out, &bits, sizeof bits);
}
template <class P>
inline unsigned char* asm_addr(P p, unsigned long long align, const char* file, int line) {
  unsigned char* a;
  if constexpr (std::is_pointer_v<P>) a = (unsigned char*)(p);
  else a = (unsigned char*)(unsigned long long)(p);
  if ((unsigned long long)a % align != 0) misaligned(a, align, file, line);
  return a;
}
template <class T>
inline float asm_f32(T v) {
  static_assert(std::is_same_v<T, float>, "an inline PTX .f32 operand that is not a float");
  return v;
}
inline unsigned asm_laneid() { return (unsigned)astra::self()->lane; }
// cvt.rni.sat.{s8,s32}.f32: round to the nearest integer, ties to even (the default rounding
// mode), saturate to [lo, hi], NaN to 0; compared in float: (float)INT_MAX is 2^31, above it.
inline int cvt_rni_sat(float x, int lo, int hi) {
  if (x != x) return 0;
  float r = __builtin_nearbyintf(x);
  if (r <= (float)lo) return lo;
  if (r >= (float)hi) return hi;
  return (int)r;
}
inline int cvt_sat(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
}  // namespace astra

#define __CUDA_ARCH__ 900
#define __CUDA_ARCH_LIST__ 900
#endif  // ASTRA_CUDA_SHIM_H
