// Astra CPU backend: CUB's block- and warp-wide collectives for kernels run as fibers, written
// here after CUB's documented interface (cub::WarpReduce, BlockReduce, BlockScan, BlockLoad,
// BlockStore, BlockRadixSort, the direct load/store helpers, KeyValuePair and the reduction
// functors). Every thread of the block (or logical warp) must call a collective, as with CUB;
// the barriers inside are the runtime's, so a kernel that forgets one between two uses of the
// same TempStorage races here as it would on the GPU. Results are where CUB documents them
// (thread 0 / lane 0 for reductions, every thread for scans, loads and sorts). Integer results
// are exact; floating-point scans and block reductions add in thread order, which may round
// differently from CUB's raking trees. Other CUB names are refused by the source screen as
// needing a GPU (backends/cpu/screen.py).
#ifndef ASTRA_CUB_CUH
#define ASTRA_CUB_CUH

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace cub {

#define ASTRA_CUB_SITE const char* astra_file_ = __builtin_FILE(), int astra_line_ = __builtin_LINE()
#define ASTRA_CUB_BAR() astra::bar_sync(astra::BAR_SYNC, 1, astra_file_, astra_line_)

struct NullType {};

struct Sum {
  template <class T, class U> auto operator()(const T& a, const U& b) const -> decltype(a + b) { return a + b; }
};
struct Max {
  template <class T> T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
  template <class T> T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

template <class K, class V> struct KeyValuePair {
  typedef K Key;
  typedef V Value;
  K key;
  V value;
  KeyValuePair() = default;
  KeyValuePair(const K& k, const V& v) : key(k), value(v) {}
  bool operator!=(const KeyValuePair& b) { return value != b.value || key != b.key; }
};
// The larger (smaller) value; on a tie, the smaller key: CUB's documented order.
struct ArgMax {
  template <class T, class O> KeyValuePair<O, T> operator()(const KeyValuePair<O, T>& a, const KeyValuePair<O, T>& b) const {
    return (b.value > a.value || (a.value == b.value && b.key < a.key)) ? b : a;
  }
};
struct ArgMin {
  template <class T, class O> KeyValuePair<O, T> operator()(const KeyValuePair<O, T>& a, const KeyValuePair<O, T>& b) const {
    return (b.value < a.value || (a.value == b.value && b.key < a.key)) ? b : a;
  }
};

namespace astra_detail {
inline int block_rank(int dim_x, int dim_y) {
  const uint3& t = astra::self()->tid;
  return (int)(t.x + t.y * dim_x + t.z * dim_x * dim_y);
}
template <class T, class Op, int N> inline T reduce_items(const T (&items)[N], Op op) {
  T v = items[0];
  for (int i = 1; i < N; ++i) v = op(v, items[i]);
  return v;
}
}  // namespace astra_detail

// ---- WarpReduce: shfl.down with offsets 1, 2, 4, ... as CUB's shuffle reduction; a lane adds
// its partner only if the partner is valid. Lane 0 of each logical warp holds the result.
template <class T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpReduce {
  static_assert(LOGICAL_WARP_THREADS >= 1 && LOGICAL_WARP_THREADS <= 32, "logical warps of 1..32 threads");

 public:
  struct TempStorage {};
  WarpReduce() {}
  explicit WarpReduce(TempStorage&) {}

  template <class Op> T Reduce(T input, Op op, ASTRA_CUB_SITE) {
    return reduce(input, op, LOGICAL_WARP_THREADS, astra_file_, astra_line_);
  }
  template <class Op> T Reduce(T input, Op op, int valid_items, ASTRA_CUB_SITE) {
    return reduce(input, op, valid_items, astra_file_, astra_line_);
  }
  T Sum(T input, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), LOGICAL_WARP_THREADS, astra_file_, astra_line_); }
  T Sum(T input, int valid_items, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), valid_items, astra_file_, astra_line_); }

 private:
  template <class Op> static T reduce(T v, Op op, int valid, const char* f, int l) {
    const int lane = astra::self()->lane;
    const int base = LOGICAL_WARP_THREADS == 32 ? 0 : lane / LOGICAL_WARP_THREADS * LOGICAL_WARP_THREADS;
    const unsigned mask = LOGICAL_WARP_THREADS == 32 ? 0xffffffffu
                                                     : (((1u << LOGICAL_WARP_THREADS) - 1) << base);
    const int last = (valid < LOGICAL_WARP_THREADS ? valid : LOGICAL_WARP_THREADS) - 1;
    const int me = lane - base;
    for (int offset = 1; offset < LOGICAL_WARP_THREADS; offset *= 2) {
      T other = astra::shfl(2, f, l, mask, v, offset, LOGICAL_WARP_THREADS);
      if (me + offset <= last) v = op(v, other);
    }
    return v;
  }
};

// ---- BlockReduce: every algorithm runs as BLOCK_REDUCE_WARP_REDUCTIONS (warp reductions, then
// thread 0 folds the warp aggregates in order). Thread 0 holds the result.
enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS };

template <class T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  static constexpr int WARPS = (THREADS + 31) / 32;

 public:
  struct TempStorage {
    T warp_aggregates[WARPS];
  };
  BlockReduce() : temp_(private_storage()) {}
  explicit BlockReduce(TempStorage& temp) : temp_(temp) {}

  template <class Op> T Reduce(T input, Op op, ASTRA_CUB_SITE) { return reduce(input, op, THREADS, astra_file_, astra_line_); }
  template <class Op> T Reduce(T input, Op op, int num_valid, ASTRA_CUB_SITE) {
    return reduce(input, op, num_valid, astra_file_, astra_line_);
  }
  template <int N, class Op> T Reduce(T (&inputs)[N], Op op, ASTRA_CUB_SITE) {
    return reduce(astra_detail::reduce_items(inputs, op), op, THREADS, astra_file_, astra_line_);
  }
  T Sum(T input, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), THREADS, astra_file_, astra_line_); }
  T Sum(T input, int num_valid, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), num_valid, astra_file_, astra_line_); }
  template <int N> T Sum(T (&inputs)[N], ASTRA_CUB_SITE) {
    return reduce(astra_detail::reduce_items(inputs, cub::Sum()), cub::Sum(), THREADS, astra_file_, astra_line_);
  }

 private:
  static TempStorage& private_storage() {
    static thread_local TempStorage storage;  // one block at a time per worker thread: the block's own
    return storage;
  }
  template <class Op> T reduce(T v, Op op, int num_valid, const char* f, int l) {
    const int tid = astra_detail::block_rank(BLOCK_DIM_X, BLOCK_DIM_Y), warp = tid / 32, lane = tid % 32;
    const int warp_valid = num_valid - warp * 32;
    const int last = (warp_valid < 32 ? warp_valid : 32) - 1;
    for (int offset = 1; offset < 32; offset *= 2) {
      T other = astra::shfl(2, f, l, 0xffffffffu, v, offset, 32);
      if (lane + offset <= last) v = op(v, other);
    }
    if (lane == 0) temp_.warp_aggregates[warp] = v;
    astra::bar_sync(astra::BAR_SYNC, 1, f, l);
    if (tid == 0) {
      for (int w = 1; w < WARPS && w * 32 < num_valid; ++w) v = op(v, temp_.warp_aggregates[w]);
    }
    return v;
  }
  TempStorage& temp_;
};

// ---- BlockScan: prefix scans over the block in thread order (items of a thread in a row, the
// blocked arrangement). A prefix callback is called by every thread of warp 0; lane 0's return
// value is the prefix of the whole block, as CUB documents.
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };

template <class T, int BLOCK_DIM_X, BlockScanAlgorithm ALGORITHM = BLOCK_SCAN_RAKING, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T partial[THREADS];
    T aggregate;
    T prefix;
  };
  BlockScan() : temp_(private_storage()) {}
  explicit BlockScan(TempStorage& temp) : temp_(temp) {}

  // exclusive sums
  void ExclusiveSum(T input, T& output, ASTRA_CUB_SITE) { T a; ExclusiveSum(input, output, a, astra_file_, astra_line_); }
  void ExclusiveSum(T input, T& output, T& block_aggregate, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1];
    scan<false, true>(in, out, T(0), cub::Sum(), block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
    output = out[0];
  }
  template <class Callback> void ExclusiveSum(T input, T& output, Callback& prefix_op, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1], a;
    scan<false, true>(in, out, T(0), cub::Sum(), a, &prefix_op, astra_file_, astra_line_);
    output = out[0];
  }
  template <int N> void ExclusiveSum(T (&input)[N], T (&output)[N], ASTRA_CUB_SITE) {
    T a; scan<false, true>(input, output, T(0), cub::Sum(), a, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N> void ExclusiveSum(T (&input)[N], T (&output)[N], T& block_aggregate, ASTRA_CUB_SITE) {
    scan<false, true>(input, output, T(0), cub::Sum(), block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Callback> void ExclusiveSum(T (&input)[N], T (&output)[N], Callback& prefix_op, ASTRA_CUB_SITE) {
    T a; scan<false, true>(input, output, T(0), cub::Sum(), a, &prefix_op, astra_file_, astra_line_);
  }
  // exclusive scans with an initial value (thread 0 gets it), or without (thread 0's is undefined)
  template <class Op> void ExclusiveScan(T input, T& output, T initial_value, Op op, ASTRA_CUB_SITE) {
    T a; ExclusiveScan(input, output, initial_value, op, a, astra_file_, astra_line_);
  }
  template <class Op> void ExclusiveScan(T input, T& output, T initial_value, Op op, T& block_aggregate, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1];
    scan<false, true>(in, out, initial_value, op, block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
    output = out[0];
  }
  template <class Op> void ExclusiveScan(T input, T& output, Op op, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1] = {input}, a;
    scan<false, false>(in, out, T(), op, a, (NoCallback*)nullptr, astra_file_, astra_line_);
    output = out[0];
  }
  template <class Op, class Callback> void ExclusiveScan(T input, T& output, Op op, Callback& prefix_op, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1], a;
    scan<false, false>(in, out, T(), op, a, &prefix_op, astra_file_, astra_line_);
    output = out[0];
  }
  template <int N, class Op> void ExclusiveScan(T (&input)[N], T (&output)[N], T initial_value, Op op, ASTRA_CUB_SITE) {
    T a; scan<false, true>(input, output, initial_value, op, a, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Op>
  void ExclusiveScan(T (&input)[N], T (&output)[N], T initial_value, Op op, T& block_aggregate, ASTRA_CUB_SITE) {
    scan<false, true>(input, output, initial_value, op, block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Op> void ExclusiveScan(T (&input)[N], T (&output)[N], Op op, ASTRA_CUB_SITE) {
    T a; scan<false, false>(input, output, T(), op, a, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Op, class Callback>
  void ExclusiveScan(T (&input)[N], T (&output)[N], Op op, Callback& prefix_op, ASTRA_CUB_SITE) {
    T a; scan<false, false>(input, output, T(), op, a, &prefix_op, astra_file_, astra_line_);
  }
  // inclusive
  void InclusiveSum(T input, T& output, ASTRA_CUB_SITE) { T a; InclusiveSum(input, output, a, astra_file_, astra_line_); }
  void InclusiveSum(T input, T& output, T& block_aggregate, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1];
    scan<true, false>(in, out, T(), cub::Sum(), block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
    output = out[0];
  }
  template <class Callback> void InclusiveSum(T input, T& output, Callback& prefix_op, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1], a;
    scan<true, false>(in, out, T(), cub::Sum(), a, &prefix_op, astra_file_, astra_line_);
    output = out[0];
  }
  template <int N> void InclusiveSum(T (&input)[N], T (&output)[N], ASTRA_CUB_SITE) {
    T a; scan<true, false>(input, output, T(), cub::Sum(), a, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N> void InclusiveSum(T (&input)[N], T (&output)[N], T& block_aggregate, ASTRA_CUB_SITE) {
    scan<true, false>(input, output, T(), cub::Sum(), block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Callback> void InclusiveSum(T (&input)[N], T (&output)[N], Callback& prefix_op, ASTRA_CUB_SITE) {
    T a; scan<true, false>(input, output, T(), cub::Sum(), a, &prefix_op, astra_file_, astra_line_);
  }
  template <class Op> void InclusiveScan(T input, T& output, Op op, ASTRA_CUB_SITE) {
    T a; InclusiveScan(input, output, op, a, astra_file_, astra_line_);
  }
  template <class Op> void InclusiveScan(T input, T& output, Op op, T& block_aggregate, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1];
    scan<true, false>(in, out, T(), op, block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
    output = out[0];
  }
  template <class Op, class Callback> void InclusiveScan(T input, T& output, Op op, Callback& prefix_op, ASTRA_CUB_SITE) {
    T in[1] = {input}, out[1], a;
    scan<true, false>(in, out, T(), op, a, &prefix_op, astra_file_, astra_line_);
    output = out[0];
  }
  template <int N, class Op> void InclusiveScan(T (&input)[N], T (&output)[N], Op op, ASTRA_CUB_SITE) {
    T a; scan<true, false>(input, output, T(), op, a, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Op> void InclusiveScan(T (&input)[N], T (&output)[N], Op op, T& block_aggregate, ASTRA_CUB_SITE) {
    scan<true, false>(input, output, T(), op, block_aggregate, (NoCallback*)nullptr, astra_file_, astra_line_);
  }
  template <int N, class Op, class Callback>
  void InclusiveScan(T (&input)[N], T (&output)[N], Op op, Callback& prefix_op, ASTRA_CUB_SITE) {
    T a; scan<true, false>(input, output, T(), op, a, &prefix_op, astra_file_, astra_line_);
  }

 private:
  struct NoCallback {
    T operator()(const T& a) { return a; }
  };
  static TempStorage& private_storage() {
    static thread_local TempStorage storage;
    return storage;
  }
  // One scan: each thread folds its items, thread 0 scans the partials in thread order (the
  // block's exclusive prefixes, seeded by `init` when there is one), the callback (warp 0) adds
  // the block's prefix, then each thread scans its own items from its prefix.
  template <bool INCLUSIVE, bool HAS_INIT, int N, class Op, class Callback>
  void scan(const T (&in)[N], T (&out)[N], T init, Op op, T& block_aggregate, Callback* prefix_op,
            const char* astra_file_, int astra_line_) {
    const int tid = astra_detail::block_rank(BLOCK_DIM_X, BLOCK_DIM_Y);
    T local = astra_detail::reduce_items(in, op);
    temp_.partial[tid] = local;
    ASTRA_CUB_BAR();
    if (tid == 0) {
      T run = temp_.partial[0];
      for (int i = 1; i < THREADS; ++i) {
        T x = temp_.partial[i];
        temp_.partial[i] = run;  // exclusive prefix of thread i (thread 0's is fixed below)
        run = op(run, x);
      }
      temp_.aggregate = run;
    }
    ASTRA_CUB_BAR();
    block_aggregate = temp_.aggregate;
    bool have_prefix = HAS_INIT || tid > 0;
    T prefix = tid > 0 ? temp_.partial[tid] : init;
    if (HAS_INIT && tid > 0) prefix = op(init, prefix);
    if (prefix_op != nullptr) {
      if (tid < 32) {
        T p = (*prefix_op)(block_aggregate);
        if (tid == 0) temp_.prefix = p;
      }
      ASTRA_CUB_BAR();
      prefix = have_prefix ? op(temp_.prefix, prefix) : temp_.prefix;
      have_prefix = true;
    }
    T run = prefix;
    for (int i = 0; i < N; ++i) {
      if (INCLUSIVE) {
        run = (have_prefix || i > 0) ? op(run, in[i]) : in[i];
        out[i] = run;
      } else {
        if (have_prefix || i > 0) out[i] = run;
        run = (have_prefix || i > 0) ? op(run, in[i]) : in[i];
      }
    }
  }
  TempStorage& temp_;
};

// ---- Direct loads and stores (no shared memory): blocked (thread t holds items t*N .. t*N+N-1)
// or striped (thread t holds items t, t + THREADS, ...). Out-of-range items are not touched
// (or get `oob_default`).
template <class T, int N, class It> void LoadDirectBlocked(int linear_tid, It block_itr, T (&items)[N]) {
  for (int i = 0; i < N; ++i) items[i] = block_itr[linear_tid * N + i];
}
template <class T, int N, class It> void LoadDirectBlocked(int linear_tid, It block_itr, T (&items)[N], int valid_items) {
  for (int i = 0; i < N; ++i)
    if (linear_tid * N + i < valid_items) items[i] = block_itr[linear_tid * N + i];
}
template <class T, class D, int N, class It>
void LoadDirectBlocked(int linear_tid, It block_itr, T (&items)[N], int valid_items, D oob_default) {
  for (int i = 0; i < N; ++i) items[i] = (T)oob_default;
  LoadDirectBlocked(linear_tid, block_itr, items, valid_items);
}
template <int BLOCK_THREADS, class T, int N, class It> void LoadDirectStriped(int linear_tid, It block_itr, T (&items)[N]) {
  for (int i = 0; i < N; ++i) items[i] = block_itr[linear_tid + i * BLOCK_THREADS];
}
template <int BLOCK_THREADS, class T, int N, class It>
void LoadDirectStriped(int linear_tid, It block_itr, T (&items)[N], int valid_items) {
  for (int i = 0; i < N; ++i)
    if (linear_tid + i * BLOCK_THREADS < valid_items) items[i] = block_itr[linear_tid + i * BLOCK_THREADS];
}
template <int BLOCK_THREADS, class T, class D, int N, class It>
void LoadDirectStriped(int linear_tid, It block_itr, T (&items)[N], int valid_items, D oob_default) {
  for (int i = 0; i < N; ++i) items[i] = (T)oob_default;
  LoadDirectStriped<BLOCK_THREADS>(linear_tid, block_itr, items, valid_items);
}
template <class T, int N, class It> void StoreDirectBlocked(int linear_tid, It block_itr, T (&items)[N]) {
  for (int i = 0; i < N; ++i) block_itr[linear_tid * N + i] = items[i];
}
template <class T, int N, class It> void StoreDirectBlocked(int linear_tid, It block_itr, T (&items)[N], int valid_items) {
  for (int i = 0; i < N; ++i)
    if (linear_tid * N + i < valid_items) block_itr[linear_tid * N + i] = items[i];
}
template <int BLOCK_THREADS, class T, int N, class It> void StoreDirectStriped(int linear_tid, It block_itr, T (&items)[N]) {
  for (int i = 0; i < N; ++i) block_itr[linear_tid + i * BLOCK_THREADS] = items[i];
}
template <int BLOCK_THREADS, class T, int N, class It>
void StoreDirectStriped(int linear_tid, It block_itr, T (&items)[N], int valid_items) {
  for (int i = 0; i < N; ++i)
    if (linear_tid + i * BLOCK_THREADS < valid_items) block_itr[linear_tid + i * BLOCK_THREADS] = items[i];
}

// ---- BlockLoad / BlockStore: every algorithm but *_STRIPED gives (takes) the blocked
// arrangement; the transposing ones pass through shared memory with a barrier, as CUB's do.
enum BlockLoadAlgorithm { BLOCK_LOAD_DIRECT, BLOCK_LOAD_STRIPED, BLOCK_LOAD_VECTORIZE, BLOCK_LOAD_TRANSPOSE,
                          BLOCK_LOAD_WARP_TRANSPOSE, BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED };
enum BlockStoreAlgorithm { BLOCK_STORE_DIRECT, BLOCK_STORE_STRIPED, BLOCK_STORE_VECTORIZE, BLOCK_STORE_TRANSPOSE,
                           BLOCK_STORE_WARP_TRANSPOSE, BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED };

template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD, BlockLoadAlgorithm ALGORITHM = BLOCK_LOAD_DIRECT,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockLoad {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T items[ALGORITHM == BLOCK_LOAD_TRANSPOSE ? THREADS * ITEMS_PER_THREAD : 1];
  };
  BlockLoad() : temp_(private_storage()) {}
  explicit BlockLoad(TempStorage& temp) : temp_(temp) {}

  template <class It> void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], ASTRA_CUB_SITE) {
    load(block_itr, items, THREADS * ITEMS_PER_THREAD, astra_file_, astra_line_);
  }
  template <class It> void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items, ASTRA_CUB_SITE) {
    load(block_itr, items, valid_items, astra_file_, astra_line_);
  }
  template <class It, class D>
  void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items, D oob_default, ASTRA_CUB_SITE) {
    for (int i = 0; i < ITEMS_PER_THREAD; ++i) items[i] = (T)oob_default;
    load(block_itr, items, valid_items, astra_file_, astra_line_);
  }

 private:
  static TempStorage& private_storage() {
    static thread_local TempStorage storage;
    return storage;
  }
  template <class It> void load(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid, const char* astra_file_,
                                int astra_line_) {
    const int tid = astra_detail::block_rank(BLOCK_DIM_X, BLOCK_DIM_Y);
    if (ALGORITHM == BLOCK_LOAD_STRIPED) {
      LoadDirectStriped<THREADS>(tid, block_itr, items, valid);
    } else if (ALGORITHM == BLOCK_LOAD_TRANSPOSE) {  // striped reads, then an exchange in shared memory
      for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
        const int at = tid + i * THREADS;
        if (at < valid) temp_.items[at] = block_itr[at];
      }
      ASTRA_CUB_BAR();
      for (int i = 0; i < ITEMS_PER_THREAD; ++i)
        if (tid * ITEMS_PER_THREAD + i < valid) items[i] = temp_.items[tid * ITEMS_PER_THREAD + i];
    } else {
      LoadDirectBlocked(tid, block_itr, items, valid);
    }
  }
  TempStorage& temp_;
};

template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD, BlockStoreAlgorithm ALGORITHM = BLOCK_STORE_DIRECT,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockStore {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T items[ALGORITHM == BLOCK_STORE_TRANSPOSE ? THREADS * ITEMS_PER_THREAD : 1];
  };
  BlockStore() : temp_(private_storage()) {}
  explicit BlockStore(TempStorage& temp) : temp_(temp) {}

  template <class It> void Store(It block_itr, T (&items)[ITEMS_PER_THREAD], ASTRA_CUB_SITE) {
    store(block_itr, items, THREADS * ITEMS_PER_THREAD, astra_file_, astra_line_);
  }
  template <class It> void Store(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items, ASTRA_CUB_SITE) {
    store(block_itr, items, valid_items, astra_file_, astra_line_);
  }

 private:
  static TempStorage& private_storage() {
    static thread_local TempStorage storage;
    return storage;
  }
  template <class It> void store(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid, const char* astra_file_,
                                 int astra_line_) {
    const int tid = astra_detail::block_rank(BLOCK_DIM_X, BLOCK_DIM_Y);
    if (ALGORITHM == BLOCK_STORE_STRIPED) {
      StoreDirectStriped<THREADS>(tid, block_itr, items, valid);
    } else if (ALGORITHM == BLOCK_STORE_TRANSPOSE) {  // an exchange in shared memory, then striped writes
      for (int i = 0; i < ITEMS_PER_THREAD; ++i) temp_.items[tid * ITEMS_PER_THREAD + i] = items[i];
      ASTRA_CUB_BAR();
      for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
        const int at = tid + i * THREADS;
        if (at < valid) block_itr[at] = temp_.items[at];
      }
    } else {
      StoreDirectBlocked(tid, block_itr, items, valid);
    }
  }
  TempStorage& temp_;
};

// ---- BlockRadixSort: a stable sort of the block's keys (and values) by bits [begin_bit,
// end_bit) of CUB's radix order: unsigned as is, signed with the sign bit flipped, floating
// point by sign and magnitude (-0.0 before +0.0, NaNs by their bits at the ends). Keys come
// back in the blocked arrangement, or striped for the *BlockedToStriped variants.
namespace astra_detail {
template <class K> struct RadixBits {
  typedef std::conditional_t<sizeof(K) == 1, unsigned char, std::conditional_t<sizeof(K) == 2, unsigned short,
          std::conditional_t<sizeof(K) == 4, unsigned int, unsigned long long>>> U;
  static constexpr bool FLOATING = std::is_floating_point<K>::value || std::is_same<K, __half>::value ||
                                   std::is_same<K, __nv_bfloat16>::value;
  static U of(const K& k) {
    U u;
    std::memcpy(&u, &k, sizeof(K));
    const U high = (U)((U)1 << (sizeof(K) * 8 - 1));
    if (FLOATING) return (u & high) ? (U)~u : (U)(u ^ high);
    if (std::is_signed<K>::value) return (U)(u ^ high);
    return u;
  }
};
}  // namespace astra_detail

template <class KeyT, int BLOCK_DIM_X, int ITEMS_PER_THREAD, class ValueT = NullType, int RADIX_BITS = 4,
          bool MEMOIZE_OUTER_SCAN = true, BlockScanAlgorithm INNER_SCAN_ALGORITHM = BLOCK_SCAN_WARP_SCANS,
          int SMEM_CONFIG = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockRadixSort {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  static constexpr int ITEMS = THREADS * ITEMS_PER_THREAD;
  static constexpr bool KEYS_ONLY = std::is_same<ValueT, NullType>::value;
  typedef std::conditional_t<KEYS_ONLY, char, ValueT> V;

 public:
  struct TempStorage {
    KeyT keys[ITEMS];
    V values[KEYS_ONLY ? 1 : ITEMS];
    int order[ITEMS];
  };
  BlockRadixSort() : temp_(private_storage()) {}
  explicit BlockRadixSort(TempStorage& temp) : temp_(temp) {}

  void Sort(KeyT (&keys)[ITEMS_PER_THREAD], int begin_bit = 0, int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, nullptr, begin_bit, end_bit, false, false, astra_file_, astra_line_);
  }
  void Sort(KeyT (&keys)[ITEMS_PER_THREAD], V (&values)[ITEMS_PER_THREAD], int begin_bit = 0,
            int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, &values, begin_bit, end_bit, false, false, astra_file_, astra_line_);
  }
  void SortDescending(KeyT (&keys)[ITEMS_PER_THREAD], int begin_bit = 0, int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, nullptr, begin_bit, end_bit, true, false, astra_file_, astra_line_);
  }
  void SortDescending(KeyT (&keys)[ITEMS_PER_THREAD], V (&values)[ITEMS_PER_THREAD], int begin_bit = 0,
                      int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, &values, begin_bit, end_bit, true, false, astra_file_, astra_line_);
  }
  void SortBlockedToStriped(KeyT (&keys)[ITEMS_PER_THREAD], int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
                            ASTRA_CUB_SITE) {
    sort(keys, nullptr, begin_bit, end_bit, false, true, astra_file_, astra_line_);
  }
  void SortBlockedToStriped(KeyT (&keys)[ITEMS_PER_THREAD], V (&values)[ITEMS_PER_THREAD], int begin_bit = 0,
                            int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, &values, begin_bit, end_bit, false, true, astra_file_, astra_line_);
  }
  void SortDescendingBlockedToStriped(KeyT (&keys)[ITEMS_PER_THREAD], int begin_bit = 0,
                                      int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, nullptr, begin_bit, end_bit, true, true, astra_file_, astra_line_);
  }
  void SortDescendingBlockedToStriped(KeyT (&keys)[ITEMS_PER_THREAD], V (&values)[ITEMS_PER_THREAD],
                                      int begin_bit = 0, int end_bit = sizeof(KeyT) * 8, ASTRA_CUB_SITE) {
    sort(keys, &values, begin_bit, end_bit, true, true, astra_file_, astra_line_);
  }

 private:
  static TempStorage& private_storage() {
    static thread_local TempStorage storage;
    return storage;
  }
  void sort(KeyT (&keys)[ITEMS_PER_THREAD], V (*values)[ITEMS_PER_THREAD], int begin_bit, int end_bit,
            bool descending, bool striped, const char* astra_file_, int astra_line_) {
    const int tid = astra_detail::block_rank(BLOCK_DIM_X, BLOCK_DIM_Y);
    for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
      temp_.keys[tid * ITEMS_PER_THREAD + i] = keys[i];
      if (values != nullptr) temp_.values[tid * ITEMS_PER_THREAD + i] = (*values)[i];
    }
    ASTRA_CUB_BAR();
    if (tid == 0) {
      typedef typename astra_detail::RadixBits<KeyT>::U U;
      const int bits = end_bit - begin_bit;
      const U mask = bits >= (int)(sizeof(U) * 8) ? (U)~(U)0 : (U)(((U)1 << bits) - 1);
      auto digit = [&](int i) {
        U u = astra_detail::RadixBits<KeyT>::of(temp_.keys[i]);
        if (descending) u = (U)~u;
        return (U)((u >> begin_bit) & mask);
      };
      for (int i = 0; i < ITEMS; ++i) temp_.order[i] = i;
      std::stable_sort(temp_.order, temp_.order + ITEMS, [&](int a, int b) { return digit(a) < digit(b); });
      static thread_local KeyT k[ITEMS];
      static thread_local V v[KEYS_ONLY ? 1 : ITEMS];
      for (int i = 0; i < ITEMS; ++i) {
        k[i] = temp_.keys[temp_.order[i]];
        if (!KEYS_ONLY) v[i] = temp_.values[temp_.order[i]];
      }
      for (int i = 0; i < ITEMS; ++i) {
        temp_.keys[i] = k[i];
        if (!KEYS_ONLY) temp_.values[i] = v[i];
      }
    }
    ASTRA_CUB_BAR();
    for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
      const int at = striped ? tid + i * THREADS : tid * ITEMS_PER_THREAD + i;
      keys[i] = temp_.keys[at];
      if (values != nullptr) (*values)[i] = temp_.values[at];
    }
  }
  TempStorage& temp_;
};

#undef ASTRA_CUB_BAR
#undef ASTRA_CUB_SITE
}  // namespace cub

#endif
