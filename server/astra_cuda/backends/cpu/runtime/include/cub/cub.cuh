// Astra CPU backend: a stand-in for the block/warp reductions of CUB (cub::BlockReduce,
// cub::WarpReduce). Other CUB algorithms are reported by the source screen as needing a GPU.
#ifndef ASTRA_CUB_CUH
#define ASTRA_CUB_CUH

namespace cub {

#define ASTRA_CUB_SITE const char* astra_file_ = __builtin_FILE(), int astra_line_ = __builtin_LINE()

struct Sum {
  template <class T> T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
  template <class T> T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
  template <class T> T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

// Same order of operations as CUB's shuffle-based warp reduction: shfl.down with offsets
// 1, 2, 4, ...; a lane adds its partner only if the partner is a valid lane. Lane 0 of the
// logical warp holds the result.
template <class T, int LOGICAL_WARP_THREADS = 32>
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

enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS };

// Every algorithm runs as BLOCK_REDUCE_WARP_REDUCTIONS (warp reductions, then thread 0 folds
// the warp aggregates in order); for floats the GPU's raking variants may round differently.
// Thread 0 holds the result.
template <class T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  static constexpr int WARPS = (THREADS + 31) / 32;

 public:
  struct TempStorage {
    T warp_aggregates[WARPS];
  };
  explicit BlockReduce(TempStorage& temp) : temp_(temp) {}

  template <class Op> T Reduce(T input, Op op, ASTRA_CUB_SITE) { return reduce(input, op, THREADS, astra_file_, astra_line_); }
  template <class Op> T Reduce(T input, Op op, int num_valid, ASTRA_CUB_SITE) {
    return reduce(input, op, num_valid, astra_file_, astra_line_);
  }
  T Sum(T input, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), THREADS, astra_file_, astra_line_); }
  T Sum(T input, int num_valid, ASTRA_CUB_SITE) { return reduce(input, cub::Sum(), num_valid, astra_file_, astra_line_); }

 private:
  template <class Op> T reduce(T v, Op op, int num_valid, const char* f, int l) {
    const int tid = astra::self()->linear, warp = tid / 32, lane = tid % 32;
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

#undef ASTRA_CUB_SITE
}  // namespace cub

#endif
