"""Issue 24, item 3: CUB's block and warp collectives on the CPU backend, each against NumPy,
under several thread orders (a stand-in that raced would differ between them)."""
import numpy as np
import pytest
from cpu_helpers import i32, run

from astra_cuda.backends.base import Schedule

SCHEDULES = (Schedule("forward"), Schedule("reverse"), Schedule("random", 7))
rng = np.random.default_rng(24)


def each_schedule(cpu, src, name, grid, block, args):
    outs = [run(cpu, src, name, grid, block, args, schedule=s) for s in SCHEDULES]
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            if a is not None:
                np.testing.assert_array_equal(a, b)
    return outs[0]


def test_warp_reduce_sum_max_and_logical_warps(cpu):
    src = r'''
#include <cub/warp/warp_reduce.cuh>
__global__ void k(const int* x, int* sums, int* maxs, int* part) {
  typedef cub::WarpReduce<int> WR;
  typedef cub::WarpReduce<int, 8> WR8;
  __shared__ typename WR::TempStorage t[4];
  __shared__ typename WR8::TempStorage t8[16];
  int v = x[blockIdx.x * 128 + threadIdx.x], w = threadIdx.x / 32;
  int s = WR(t[w]).Sum(v);
  int m = WR(t[w]).Reduce(v, cub::Max());
  int p = WR8(t8[threadIdx.x / 8]).Sum(v, 5);    // only the first 5 lanes of each 8 count
  if (threadIdx.x % 32 == 0) { sums[blockIdx.x * 4 + w] = s; maxs[blockIdx.x * 4 + w] = m; }
  if (threadIdx.x % 8 == 0) part[blockIdx.x * 16 + threadIdx.x / 8] = p;
}
'''
    x = rng.integers(-1000, 1000, 2 * 128).astype(np.int32)
    _, sums, maxs, part = each_schedule(cpu, src, "k", (2,), (128,), [x, np.zeros(8, np.int32), np.zeros(8, np.int32),
                                                                      np.zeros(32, np.int32)])
    np.testing.assert_array_equal(sums, x.reshape(8, 32).sum(1))
    np.testing.assert_array_equal(maxs, x.reshape(8, 32).max(1))
    np.testing.assert_array_equal(part, x.reshape(32, 8)[:, :5].sum(1))


def test_block_reduce_sum_items_and_partial_blocks(cpu):
    src = r'''
#include <cub/block/block_reduce.cuh>
template <int BLOCK>
__global__ void k(const float* x, float* out, int* mx, int n) {
  typedef cub::BlockReduce<float, BLOCK> BR;
  typedef cub::BlockReduce<int, BLOCK, cub::BLOCK_REDUCE_RAKING> BRI;
  __shared__ typename BR::TempStorage t;
  __shared__ typename BRI::TempStorage ti;
  float items[4];
  for (int i = 0; i < 4; ++i) items[i] = x[blockIdx.x * BLOCK * 4 + threadIdx.x * 4 + i];
  float s = BR(t).Sum(items);
  int m = BRI(ti).Reduce((int)(items[0] * 100), cub::Max(), n);   // only the first n threads count
  if (threadIdx.x == 0) { out[blockIdx.x] = s; mx[blockIdx.x] = m; }
}
template __global__ void k<96>(const float*, float*, int*, int);
'''
    x = (rng.integers(-50, 50, 3 * 96 * 4) / 4).astype(np.float32)   # exact in float: sums are exact
    _, out, mx, _ = each_schedule(cpu, src, "k<96>", (3,), (96,), [x, np.zeros(3, np.float32), np.zeros(3, np.int32),
                                                                   i32(70)])
    np.testing.assert_array_equal(out, x.reshape(3, -1).sum(1))
    first = (x.reshape(3, 96, 4)[:, :, 0] * 100).astype(np.int32)
    np.testing.assert_array_equal(mx, first[:, :70].max(1))


def test_block_scan_sums_scans_aggregates_and_prefix_callbacks(cpu):
    src = r'''
#include <cub/block/block_scan.cuh>
struct Running {   // CUB's documented callback: called by warp 0, lane 0's answer counts
  int total;
  __device__ explicit Running(int t) : total(t) {}
  __device__ int operator()(int block_aggregate) { int old = total; total += block_aggregate; return old; }
};
__global__ void k(const int* x, int* ex, int* in, int* mx, int* agg, int* tiles, int n) {
  typedef cub::BlockScan<int, 64> BS;
  __shared__ typename BS::TempStorage t;
  int items[3], out[3];
  for (int i = 0; i < 3; ++i) items[i] = x[threadIdx.x * 3 + i];
  int a;
  BS(t).ExclusiveSum(items, out, a);
  for (int i = 0; i < 3; ++i) ex[threadIdx.x * 3 + i] = out[i];
  __syncthreads();
  BS(t).InclusiveSum(items, out);
  for (int i = 0; i < 3; ++i) in[threadIdx.x * 3 + i] = out[i];
  __syncthreads();
  int m;
  BS(t).InclusiveScan(items[0], m, cub::Max());
  mx[threadIdx.x] = m;
  if (threadIdx.x == 0) agg[0] = a;
  Running prefix(1000);   // several tiles of 64 through one callback
  for (int base = 0; base < n; base += 64) {
    __syncthreads();
    int v = x[base + threadIdx.x], o;
    BS(t).ExclusiveSum(v, o, prefix);
    tiles[base + threadIdx.x] = o;
  }
}
'''
    n = 256
    x = rng.integers(-20, 20, n).astype(np.int32)
    z = np.zeros(n, np.int32)
    _, ex, inc, mx, agg, tiles, _ = each_schedule(cpu, src, "k", (1,), (64,),
                                                  [x, z, z, np.zeros(64, np.int32), np.zeros(1, np.int32), z, i32(n)])
    flat = x[:192]
    np.testing.assert_array_equal(ex[:192], np.concatenate([[0], np.cumsum(flat)[:-1]]))
    np.testing.assert_array_equal(inc[:192], np.cumsum(flat))
    np.testing.assert_array_equal(mx, np.maximum.accumulate(flat.reshape(64, 3)[:, 0]))
    assert agg[0] == flat.sum()
    np.testing.assert_array_equal(tiles, 1000 + np.concatenate([[0], np.cumsum(x)[:-1]]))


@pytest.mark.parametrize("load, store", [("BLOCK_LOAD_DIRECT", "BLOCK_STORE_DIRECT"),
                                         ("BLOCK_LOAD_TRANSPOSE", "BLOCK_STORE_TRANSPOSE"),
                                         ("BLOCK_LOAD_WARP_TRANSPOSE", "BLOCK_STORE_WARP_TRANSPOSE"),
                                         ("BLOCK_LOAD_STRIPED", "BLOCK_STORE_STRIPED")])
def test_block_load_and_store_arrangements_and_valid_items(cpu, load, store):
    src = r'''
#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>
__global__ void k(const float* x, float* y, int* owner, int valid) {
  typedef cub::BlockLoad<float, 64, 4, cub::LOAD> BL;
  typedef cub::BlockStore<float, 64, 4, cub::STORE> BSt;
  __shared__ typename BL::TempStorage tl;
  __shared__ typename BSt::TempStorage ts;
  float items[4];
  BL(tl).Load(x + blockIdx.x * 256, items, valid, -1.0f);
  for (int i = 0; i < 4; ++i) owner[blockIdx.x * 256 + threadIdx.x * 4 + i] = (int)items[i];
  for (int i = 0; i < 4; ++i) items[i] *= 2.0f;
  __syncthreads();
  BSt(ts).Store(y + blockIdx.x * 256, items, valid);
}
'''.replace("LOAD>", load + ">").replace("STORE>", store + ">")
    x = np.arange(512, dtype=np.float32)
    y0 = np.full(512, 7.0, np.float32)
    _, y, owner, _ = each_schedule(cpu, src, "k", (2,), (64,), [x, y0, np.zeros(512, np.int32), i32(200)])
    # thread t's items: blocked t*4..t*4+3, striped t, t+64, ...; past `valid` the default -1
    t, i = np.meshgrid(np.arange(64), np.arange(4), indexing="ij")
    idx = (t + 64 * i) if "STRIPED" in load else (t * 4 + i)
    want = np.where(idx < 200, idx, -1)
    np.testing.assert_array_equal(owner[:256].reshape(64, 4), want)
    np.testing.assert_array_equal(owner[256:].reshape(64, 4), np.where(idx < 200, idx + 256, -1))
    expect = y0.copy()
    for b in range(2):
        expect[b * 256:b * 256 + 200] = 2 * x[b * 256:b * 256 + 200]
    np.testing.assert_array_equal(y, expect)


def test_block_radix_sort_keys_values_descending_and_bit_ranges(cpu):
    src = r'''
#include <cub/block/block_radix_sort.cuh>
__global__ void k(const float* kf, const int* ki, float* sf, int* order, int* desc, int* low, float* striped) {
  typedef cub::BlockRadixSort<float, 32, 4, int> SortF;
  typedef cub::BlockRadixSort<int, 32, 4> SortI;
  __shared__ typename SortF::TempStorage tf;
  __shared__ typename SortI::TempStorage ti;
  float keys[4]; int vals[4], ik[4], ik2[4];
  for (int i = 0; i < 4; ++i) {
    keys[i] = kf[threadIdx.x * 4 + i]; vals[i] = threadIdx.x * 4 + i;
    ik[i] = ki[threadIdx.x * 4 + i]; ik2[i] = ik[i];
  }
  SortF(tf).Sort(keys, vals);
  for (int i = 0; i < 4; ++i) { sf[threadIdx.x * 4 + i] = keys[i]; order[threadIdx.x * 4 + i] = vals[i]; }
  __syncthreads();
  SortI(ti).SortDescending(ik);
  for (int i = 0; i < 4; ++i) desc[threadIdx.x * 4 + i] = ik[i];
  __syncthreads();
  SortI(ti).Sort(ik2, 0, 4);   // only the low 4 bits: stable within equal digits
  for (int i = 0; i < 4; ++i) low[threadIdx.x * 4 + i] = ik2[i];
  __syncthreads();
  for (int i = 0; i < 4; ++i) keys[i] = kf[threadIdx.x * 4 + i];
  SortF(tf).SortBlockedToStriped(keys, vals);
  for (int i = 0; i < 4; ++i) striped[threadIdx.x + 32 * i] = keys[i];
}
'''
    kf = rng.integers(-8, 8, 128).astype(np.float32)   # ties: the sort must be stable
    kf[:3] = [-0.0, 0.0, -np.inf]
    ki = rng.integers(-500, 500, 128).astype(np.int32)
    z = np.zeros(128, np.int32)
    _, _, sf, order, desc, low, striped = each_schedule(
        cpu, src, "k", (1,), (32,), [kf, ki, np.zeros(128, np.float32), z, z, z, np.zeros(128, np.float32)])
    by = sorted(range(128), key=lambda j: (kf[j], 0 if np.signbit(kf[j]) else 1, j))   # -0.0 before +0.0
    np.testing.assert_array_equal(order, by)
    np.testing.assert_array_equal(sf.view(np.uint32), kf[by].view(np.uint32))
    np.testing.assert_array_equal(desc, np.sort(ki)[::-1])
    np.testing.assert_array_equal(low, ki[np.argsort(ki.view(np.uint32) & 0xF, kind="stable")])
    np.testing.assert_array_equal(striped.view(np.uint32), kf[by].view(np.uint32))


def test_arg_max_of_key_value_pairs_as_in_moe_top_k(cpu):
    src = r'''
#include <cub/cub.cuh>
__global__ void k(const float* x, int* best) {
  typedef cub::BlockReduce<cub::KeyValuePair<int, float>, 64> BR;
  __shared__ typename BR::TempStorage t;
  cub::KeyValuePair<int, float> kv(threadIdx.x, x[threadIdx.x]);
  kv = BR(t).Reduce(kv, cub::ArgMax());
  if (threadIdx.x == 0) best[0] = kv.key;
}
'''
    x = rng.integers(0, 5, 64).astype(np.float32)   # ties: the smaller key wins
    _, best = each_schedule(cpu, src, "k", (1,), (64,), [x, np.zeros(1, np.int32)])
    assert best[0] == int(np.argmax(x))


def test_a_header_that_includes_cub_costs_a_kernel_that_uses_none_of_it_nothing(cpu):
    src = r'''
#include <cub/device/device_radix_sort.cuh>
#include <cub/util_type.cuh>
__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }
'''
    out = run(cpu, src, "k", (1,), (8,), [np.ones(8, np.float32)])[0]
    np.testing.assert_array_equal(out, 2.0)
