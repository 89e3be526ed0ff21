// Astra CPU backend: a stand-in for the block- and warp-level part of CUDA cooperative groups
// (thread_block, thread_block_tile<N> for N <= 32, tiled_partition, coalesced_threads,
// cg::reduce). It is found ahead of the toolkit's header on the include path. Grid groups,
// clusters and memcpy_async are not here: the source screen reports them as needing a GPU.
#ifndef ASTRA_COOPERATIVE_GROUPS_H
#define ASTRA_COOPERATIVE_GROUPS_H

namespace cooperative_groups {

// Call sites' lines (for barrier diagnostics) come from default arguments.
#define ASTRA_CG_SITE const char* astra_file_ = __builtin_FILE(), int astra_line_ = __builtin_LINE()

class thread_block {
 public:
  void sync(ASTRA_CG_SITE) const { astra::bar_sync(astra::BAR_SYNC, 1, astra_file_, astra_line_); }
  unsigned long long thread_rank() const { return (unsigned)astra::self()->linear; }
  unsigned long long size() const { return (unsigned long long)blockDim.x * blockDim.y * blockDim.z; }
  unsigned long long num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block(); }

template <unsigned N, class Parent = void>
class thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "the CPU backend supports tiles of 1, 2, 4, 8, 16 or 32 threads");

 public:
  thread_block_tile() = default;
  // `thread_block_tile<32> warp = tiled_partition<32>(block)`: a tile of a known parent converts
  // to the parent-erased one, as in CUDA (the tile holds no state here)
  template <class P> thread_block_tile(const thread_block_tile<N, P>&) {}
  static constexpr unsigned num_threads_v = N;
  static unsigned mask() {
    unsigned lane = (unsigned)astra::self()->lane;
    unsigned base = lane / N * N;
    return N == 32 ? 0xffffffffu : (((1u << N) - 1) << base);
  }
  void sync(ASTRA_CG_SITE) const {
    astra::warp_op(astra::OP_SYNCWARP, mask(), 0, 0, astra_file_, astra_line_, nullptr);
  }
  unsigned long long thread_rank() const { return (unsigned)astra::self()->linear % N; }
  unsigned long long meta_group_rank() const { return (unsigned)astra::self()->linear / N; }
  unsigned long long meta_group_size() const {
    unsigned long long n = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
    return (n + N - 1) / N;
  }
  static constexpr unsigned long long size() { return N; }
  static constexpr unsigned long long num_threads() { return N; }
  template <class T> T shfl(T v, int src, ASTRA_CG_SITE) const { return astra::shfl(0, astra_file_, astra_line_, mask(), v, src, (int)N); }
  template <class T> T shfl_up(T v, unsigned d, ASTRA_CG_SITE) const { return astra::shfl(1, astra_file_, astra_line_, mask(), v, (int)d, (int)N); }
  template <class T> T shfl_down(T v, unsigned d, ASTRA_CG_SITE) const { return astra::shfl(2, astra_file_, astra_line_, mask(), v, (int)d, (int)N); }
  template <class T> T shfl_xor(T v, unsigned m, ASTRA_CG_SITE) const { return astra::shfl(3, astra_file_, astra_line_, mask(), v, (int)m, (int)N); }
  unsigned ballot(int p, ASTRA_CG_SITE) const {
    unsigned b = (unsigned)astra::warp_op(astra::OP_BALLOT, mask(), p ? 1 : 0, 0, astra_file_, astra_line_, nullptr);
    unsigned lane = (unsigned)astra::self()->lane;
    return N == 32 ? b : (b >> (lane / N * N)) & ((1u << N) - 1);  // relative to the tile
  }
  int any(int p, ASTRA_CG_SITE) const { return (int)astra::warp_op(astra::OP_ANY, mask(), p ? 1 : 0, 0, astra_file_, astra_line_, nullptr); }
  int all(int p, ASTRA_CG_SITE) const { return (int)astra::warp_op(astra::OP_ALL, mask(), p ? 1 : 0, 0, astra_file_, astra_line_, nullptr); }
};

template <unsigned N, class Parent>
inline thread_block_tile<N, Parent> tiled_partition(const Parent&) { return thread_block_tile<N, Parent>(); }

// The lanes of the warp that reach coalesced_threads() together (as __activemask()).
class coalesced_group {
 public:
  explicit coalesced_group(unsigned mask) : mask_(mask) {}
  unsigned long long size() const { return (unsigned)__builtin_popcount(mask_); }
  unsigned long long num_threads() const { return size(); }
  unsigned long long thread_rank() const {
    return (unsigned)__builtin_popcount(mask_ & ((1u << astra::self()->lane) - 1));
  }
  void sync(ASTRA_CG_SITE) const { astra::warp_op(astra::OP_SYNCWARP, mask_, 0, 0, astra_file_, astra_line_, nullptr); }
  template <class T> T shfl(T v, int rank, ASTRA_CG_SITE) const {
    return astra::from_bits<T>(astra::warp_op(astra::OP_SHFL, mask_, astra::to_bits(v), lane_of(rank), astra_file_,
                                              astra_line_, nullptr));
  }
  unsigned ballot(int p, ASTRA_CG_SITE) const {  // bit i: the thread of rank i
    unsigned b = (unsigned)astra::warp_op(astra::OP_BALLOT, mask_, p ? 1 : 0, 0, astra_file_, astra_line_, nullptr);
    unsigned r = 0;
    for (unsigned m = mask_, i = 0; m; m &= m - 1, ++i)
      if (b >> __builtin_ctz(m) & 1) r |= 1u << i;
    return r;
  }
  int any(int p, ASTRA_CG_SITE) const { return (int)astra::warp_op(astra::OP_ANY, mask_, p ? 1 : 0, 0, astra_file_, astra_line_, nullptr); }
  int all(int p, ASTRA_CG_SITE) const { return (int)astra::warp_op(astra::OP_ALL, mask_, p ? 1 : 0, 0, astra_file_, astra_line_, nullptr); }

 private:
  int lane_of(int rank) const {
    unsigned m = mask_;
    for (int i = 0; m; m &= m - 1, ++i)
      if (i == rank) return __builtin_ctz(m);
    return astra::self()->lane;  // out of range: undefined on the GPU; own value here
  }
  unsigned mask_;
};
inline coalesced_group coalesced_threads(ASTRA_CG_SITE) { return coalesced_group(astra::active_mask(astra_file_, astra_line_)); }

template <class Group> inline void sync(const Group& g, ASTRA_CG_SITE) { g.sync(astra_file_, astra_line_); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

// A butterfly over the tile: every thread gets the result, as with cg::reduce.
template <unsigned N, class P, class T, class Op>
inline T reduce(const thread_block_tile<N, P>& g, T v, Op op, ASTRA_CG_SITE) {
  for (unsigned m = N / 2; m > 0; m >>= 1) v = op(v, g.shfl_xor(v, m, astra_file_, astra_line_));
  return v;
}

#undef ASTRA_CG_SITE
}  // namespace cooperative_groups

#endif
