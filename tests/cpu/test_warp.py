"""Warp collectives against NumPy models written from the CUDA programming guide."""
import numpy as np
import pytest
from cpu_helpers import i32, run, unit

SHFL = r'''
__global__ void shfl(const int* in, int* out, int mode, int b, int width) {
  int t = threadIdx.x;
  int v = in[t], r;
  if (mode == 0) r = __shfl_sync(0xffffffff, v, b, width);
  else if (mode == 1) r = __shfl_up_sync(0xffffffff, v, b, width);
  else if (mode == 2) r = __shfl_down_sync(0xffffffff, v, b, width);
  else r = __shfl_xor_sync(0xffffffff, v, b, width);
  out[t] = r;
}
'''


def shfl_model(vals, mode, b, width):
    """CUDA guide: lanes form segments of `width`; idx reads srcLane % width of the segment;
    up/down return the own value when the source leaves the segment; xor may read earlier
    segments but returns the own value for later ones."""
    out = np.empty_like(vals)
    for t in range(len(vals)):
        lane, base = t % 32, t - t % 32
        seg = lane - lane % width
        if mode == 0:
            src = seg + b % width
        elif mode == 1:
            src = lane - b if lane - seg >= b else lane
        elif mode == 2:
            src = lane + b if lane - seg + b < width else lane
        else:
            j = lane ^ b
            src = j if j < seg + width else lane
        out[t] = vals[base + src]
    return out


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("width", [32, 16, 8, 4, 2])
def test_shuffles_with_width(cpu, mode, width):
    rng = np.random.default_rng(mode * 100 + width)
    vals = rng.integers(-1000, 1000, 64).astype(np.int32)
    for b in ([0, 1, 3, 5, 17, 33] if mode == 0 else [1, 2, 3, 7, 16]):
        out = run(cpu, SHFL, "shfl", (1,), (64,), [vals, np.zeros(64, np.int32), i32(mode), i32(b), i32(width)])[1]
        np.testing.assert_array_equal(out, shfl_model(vals, mode, b, width), err_msg=f"mode {mode} b {b} width {width}")


def test_shuffle_types_half_double_float2(cpu):
    src = r'''
#include <cuda_fp16.h>
__global__ void k(const double* d, const __half* h, double* od, __half* oh) {
  int t = threadIdx.x;
  od[t] = __shfl_xor_sync(0xffffffff, d[t], 1);
  oh[t] = __shfl_down_sync(0xffffffff, h[t], 4);
}
'''
    d = np.random.default_rng(1).standard_normal(32)
    h = np.random.default_rng(2).standard_normal(32).astype(np.float16)
    _, _, od, oh = run(cpu, src, "k", (1,), (32,), [d, h, np.zeros(32), np.zeros(32, np.float16)])
    np.testing.assert_array_equal(od, d[np.arange(32) ^ 1])
    np.testing.assert_array_equal(oh, h[[i + 4 if i + 4 < 32 else i for i in range(32)]])


BALLOT = r'''
__global__ void vote(const int* p, unsigned* ballot, int* any, int* all, unsigned* active) {
  int t = threadIdx.x;
  unsigned m = __activemask();
  ballot[t] = __ballot_sync(m, p[t]);
  any[t] = __any_sync(m, p[t]);
  all[t] = __all_sync(m, p[t]);
  active[t] = m;
}
'''


def test_ballot_any_all_on_partial_warp(cpu):
    n = 40  # the second warp has 8 lanes
    p = (np.arange(n) % 3 == 0).astype(np.int32)
    p[32:] = 1
    _, ballot, any_, all_, active = run(cpu, BALLOT, "vote", (1,), (n,),
                                        [p, np.zeros(n, np.uint32), np.zeros(n, np.int32),
                                         np.zeros(n, np.int32), np.zeros(n, np.uint32)])
    want0 = sum(1 << i for i in range(32) if p[i])
    assert (ballot[:32] == want0).all()
    assert (ballot[32:] == 0xFF).all()
    assert (active[:32] == 0xFFFFFFFF).all() and (active[32:] == 0xFF).all()
    assert (any_ == 1).all()
    assert (all_[:32] == 0).all() and (all_[32:] == 1).all()


def test_ballot_after_early_exit(cpu):
    src = r'''
__global__ void k(unsigned* out) {
  if (threadIdx.x % 2) return;        // odd lanes exit: they no longer take part
  out[threadIdx.x] = __ballot_sync(__activemask(), 1);
}
'''
    out = run(cpu, src, "k", (1,), (32,), [np.zeros(32, np.uint32)])[0]
    assert (out[::2] == 0x55555555).all()


REDUCE = r'''
__global__ void red(const unsigned* u, const int* s, unsigned* o) {
  int t = threadIdx.x;
  o[t * 6 + 0] = __reduce_add_sync(0xffffffff, u[t]);
  o[t * 6 + 1] = __reduce_min_sync(0xffffffff, u[t]);
  o[t * 6 + 2] = __reduce_max_sync(0xffffffff, u[t]);
  o[t * 6 + 3] = (unsigned)__reduce_min_sync(0xffffffff, s[t]);
  o[t * 6 + 4] = (unsigned)__reduce_max_sync(0xffffffff, s[t]);
  o[t * 6 + 5] = __reduce_xor_sync(0xffffffff, u[t]);
}
'''


def test_reduce_sync(cpu):
    rng = np.random.default_rng(5)
    u = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(-2**31, 2**31, 64).astype(np.int32)
    o = run(cpu, REDUCE, "red", (1,), (64,), [u, s, np.zeros(64 * 6, np.uint32)])[2].reshape(64, 6)
    for w in range(2):
        uu, ss = u[w * 32:(w + 1) * 32], s[w * 32:(w + 1) * 32]
        rows = o[w * 32:(w + 1) * 32]
        assert (rows[:, 0] == np.uint32(uu.astype(np.uint64).sum() % 2**32)).all()
        assert (rows[:, 1] == uu.min()).all() and (rows[:, 2] == uu.max()).all()
        assert (rows[:, 3].view(np.int32) == ss.min()).all() and (rows[:, 4].view(np.int32) == ss.max()).all()
        assert (rows[:, 5] == np.bitwise_xor.reduce(uu)).all()


def test_match_any_and_syncwarp_with_submask(cpu):
    src = r'''
__global__ void k(const int* v, unsigned* o) {
  int t = threadIdx.x;
  o[t] = __match_any_sync(0xffffffff, v[t]);
  if (t < 16) { __syncwarp(0x0000ffff); o[32 + t] = __shfl_sync(0x0000ffff, v[t], 15); }
}
'''
    v = (np.arange(32) % 4).astype(np.int32)
    o = run(cpu, src, "k", (1,), (32,), [v, np.zeros(48, np.uint32)])[1]
    for t in range(32):
        assert o[t] == sum(1 << j for j in range(32) if v[j] == v[t])
    assert (o[32:48] == v[15]).all()


def test_cooperative_groups_tiles_and_reduce(cpu):
    src = r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* sums8, float* bsum, unsigned* ballots, int* ranks) {
  cg::thread_block block = cg::this_thread_block();
  auto tile = cg::tiled_partition<8>(block);
  auto warp = cg::tiled_partition<32>(block);
  float v = x[block.thread_rank()];
  float s8 = cg::reduce(tile, v, cg::plus<float>());
  __shared__ float part[4];
  float s32 = cg::reduce(warp, v, cg::plus<float>());
  if (warp.thread_rank() == 0) part[warp.meta_group_rank()] = s32;
  block.sync();
  sums8[block.thread_rank()] = s8;
  if (block.thread_rank() == 0) *bsum = part[0] + part[1] + part[2] + part[3];
  ballots[block.thread_rank()] = tile.ballot(v > 0);
  ranks[block.thread_rank()] = (int)(tile.meta_group_rank() * 100 + tile.thread_rank());
  int d = tile.shfl_down((int)block.thread_rank(), 1);
  ranks[128 + block.thread_rank()] = d;
}
'''
    x = np.random.default_rng(9).integers(-5, 6, 128).astype(np.float32)  # exact sums
    _, s8, bsum, ballots, ranks = run(cpu, src, "k", (1,), (128,), [x, np.zeros(128, np.float32),
                                                                    np.zeros(1, np.float32), np.zeros(128, np.uint32),
                                                                    np.zeros(256, np.int32)])
    np.testing.assert_array_equal(s8, np.repeat(x.reshape(16, 8).sum(1), 8))
    assert bsum[0] == x.sum()
    want_ballot = [sum(1 << j for j in range(8) if x[t // 8 * 8 + j] > 0) for t in range(128)]
    np.testing.assert_array_equal(ballots, want_ballot)
    np.testing.assert_array_equal(ranks[:128], [t // 8 * 100 + t % 8 for t in range(128)])
    np.testing.assert_array_equal(ranks[128:], [t + 1 if t % 8 < 7 else t for t in range(128)])


def test_cub_block_and_warp_reduce_stand_ins(cpu):
    src = r'''
#include <cub/cub.cuh>
template <int BLOCK>
__global__ void k(const float* x, float* block_sums, float* warp_max, float* partial, int n_valid) {
  typedef cub::BlockReduce<float, BLOCK> BlockReduce;
  typedef cub::WarpReduce<float> WarpReduce;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ typename WarpReduce::TempStorage wtemp[BLOCK / 32];
  float v = x[blockIdx.x * BLOCK + threadIdx.x];
  float s = BlockReduce(temp).Sum(v);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = s;
  __syncthreads();
  float m = WarpReduce(wtemp[threadIdx.x / 32]).Reduce(v, cub::Max());
  if (threadIdx.x % 32 == 0) warp_max[blockIdx.x * (BLOCK / 32) + threadIdx.x / 32] = m;
  __syncthreads();
  float p = BlockReduce(temp).Sum(v, n_valid);
  if (threadIdx.x == 0) partial[blockIdx.x] = p;
}
'''
    from astra_cuda.backends.base import Launch

    x = np.random.default_rng(4).integers(-9, 10, (3, 128)).astype(np.float32)  # exact sums
    m = cpu.compile(unit(src), ["k<128>"], filename="user.cu")
    bufs = [cpu.upload(x), cpu.upload(np.zeros(3, np.float32)), cpu.upload(np.zeros(12, np.float32)),
            cpu.upload(np.zeros(3, np.float32)), i32(77)]
    cpu.launch(m, "k<128>", Launch((3, 1, 1), (128, 1, 1)), bufs)
    np.testing.assert_array_equal(cpu.download(bufs[1]), x.sum(1))
    np.testing.assert_array_equal(cpu.download(bufs[2]), x.reshape(3, 4, 32).max(2).reshape(-1))
    np.testing.assert_array_equal(cpu.download(bufs[3]), x[:, :77].sum(1))


def test_activemask_is_the_set_of_lanes_in_the_branch(cpu):
    # warp-aggregated atomics: one atomic per warp for the lanes that take the branch
    src = r'''
__global__ void k(const int* flag, int* counter, int* slot, unsigned* masks) {
  int lane = threadIdx.x % 32;
  if (flag[threadIdx.x]) {
    unsigned active = __activemask();
    int leader = __ffs(active) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(counter, __popc(active));
    base = __shfl_sync(active, base, leader);
    slot[threadIdx.x] = base + __popc(active & ((1u << lane) - 1));
    masks[threadIdx.x] = active;
  }
  __syncthreads();   // lanes that skipped the branch wait here: no deadlock
}
'''
    flag = (np.random.default_rng(3).random(64) < 0.4).astype(np.int32)
    _, counter, slot, masks = run(cpu, src, "k", (1,), (64,), [flag, np.zeros(1, np.int32),
                                                              np.full(64, -1, np.int32), np.zeros(64, np.uint32)])
    assert counter[0] == flag.sum()
    taken = np.flatnonzero(flag)
    assert sorted(slot[taken]) == list(range(flag.sum()))          # every lane got its own slot
    for w in range(2):
        want = sum(1 << (t - 32 * w) for t in taken if t // 32 == w)
        assert (masks[taken[taken // 32 == w]] == want).all()


def test_cooperative_groups_coalesced_threads(cpu):
    src = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(const int* flag, int* counter, int* slot) {
  if (flag[threadIdx.x]) {
    cg::coalesced_group g = cg::coalesced_threads();
    int base = 0;
    if (g.thread_rank() == 0) base = atomicAdd(counter, (int)g.size());
    slot[threadIdx.x] = g.shfl(base, 0) + (int)g.thread_rank();
  }
}
'''
    flag = (np.random.default_rng(5).random(96) < 0.5).astype(np.int32)
    _, counter, slot = run(cpu, src, "k", (1,), (96,), [flag, np.zeros(1, np.int32), np.full(96, -1, np.int32)])
    taken = np.flatnonzero(flag)
    assert counter[0] == len(taken) and sorted(slot[taken]) == list(range(len(taken)))


def test_builtin_assume_is_a_hint_never_evaluated(cpu):
    # TransformerEngine's utils.cuh warp_reduce_max: `__builtin_assume(tmp >= 0)` beside a shuffle,
    # which nvcc compiles and g++ did not know
    src = r'''
template <int N> __device__ float warp_max(float m) {
  for (int d = N / 2; d > 0; d /= 2) {
    const float o = __shfl_down_sync(0xffffffff, m, d);
    __builtin_assume(m >= 0);
    __builtin_assume(o >= 0);
    m = fmaxf(m, o);
  }
  return m;
}
__global__ void k(const float* in, float* out, int* count) {
  int c = 0;
  __builtin_assume(++c > 0);   // not evaluated: the count stays 0
  float m = warp_max<32>(in[threadIdx.x]);
  if (threadIdx.x == 0) { out[0] = m; count[0] = c; }
}
'''
    vals = np.random.default_rng(3).random(32).astype(np.float32)
    _, out, count = run(cpu, src, "k", (1,), (32,), [vals, np.zeros(1, np.float32), np.zeros(1, np.int32)])
    assert out[0] == vals.max() and count[0] == 0
