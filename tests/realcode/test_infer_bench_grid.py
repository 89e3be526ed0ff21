"""Issue 29: bench sizes grow the launch's parallel work (its blocks), not per-thread work or
buffers the kernel never touches; the traffic that counts is what the launch touches
(`floor_bytes`: of a table reached through a scatter's distinct slots, only those rows)."""
import math

from astra_cuda.infer.bench_sizes import MIN_BLOCKS
from astra_cuda.model import exprs, source, spec
from astra_cuda.model.floor_bytes import floor_bytes
from tests.realcode.test_infer_bench_traffic import proposed

LINE = 64 << 20

# groups of `group_size` values, 16 threads a group, `per_block` groups a block: a group's length
# grows each thread's loop, the groups grow the grid
GROUPED = """
__global__ void group_absmax(const float* in, float* out, int group_size, int groups, int per_block) {
  int lane = threadIdx.x % 16;
  long g = (long)blockIdx.x * per_block + threadIdx.x / 16;
  float m = 0.0f;
  for (int i = lane; i < group_size; i += 16) m = fmaxf(m, fabsf(in[g * group_size + i]));
  for (int s = 8; s > 0; s /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, s, 16));
  if (lane == 0) out[g] = m;
}
void run(const float* in, float* out, int group_size, int groups, int per_block) {
  group_absmax<<<groups / per_block, per_block * 16>>>(in, out, group_size, groups, per_block);
}
"""

# one token's row a block, written to the cache row its slot names: the cache holds far more
# rows than the tokens reach
SCATTER = """
__global__ void put_rows(const float* key, float* cache, const long* slots, int width, int block_size) {
  long slot = slots[blockIdx.x];
  if (slot < 0) return;
  long blk = slot / block_size, off = slot % block_size;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    cache[(blk * block_size + off) * width + i] = key[(long)blockIdx.x * width + i];
}
void run(const float* key, float* cache, const long* slots, int num_tokens, int width, int block_size) {
  put_rows<<<num_tokens, 128>>>(key, cache, slots, width, block_size);
}
"""


def blocks(s, case: dict[str, int]) -> int:
    return math.prod(exprs.evaluate_int(e, case) for e in s.grid)


def test_grouped_work_is_timed_over_many_blocks_not_long_groups(project):
    s, notes = proposed(project, "groups.cu", GROUPED, "group_absmax")
    cases = s.bench_cases()
    assert cases and all(blocks(s, c) >= MIN_BLOCKS for c in cases), (s.grid, cases, notes)
    assert all(floor_bytes(s, c) >= LINE for c in cases)


def test_a_scatter_is_timed_over_many_tokens_not_a_larger_cache(project):
    s, notes = proposed(project, "scatter.cu", SCATTER, "put_rows")
    assert "permutation" in str(s.args["slots"].init), s.args["slots"].init
    cases = s.bench_cases()
    assert cases and all(blocks(s, c) >= MIN_BLOCKS for c in cases), (s.grid, cases, notes)
    assert all(floor_bytes(s, c) >= LINE for c in cases)


def test_a_scatters_distinct_slots_count_only_the_rows_they_reach():
    text = ('/* @astra\ngrid = ["n"]\nblock = ["128"]\n[sizes]\nn = [8]\nV = [1000]\n[args]\n'
            'src = { type = "float", shape = ["n", "64"] }\n'
            'table = { type = "float", shape = ["V", "64"], inout = true }\n'
            'slots = { type = "int64", shape = ["n"], init = "permutation(V)" }\n*/\n'
            '__global__ void k(const float* src, float* table, const long* slots) {}\n')
    m = source.parse(text)
    s = spec.load(m.kernel("k"), m)
    # src read, 8 of the table's 1000 rows read and written, the slots read
    assert floor_bytes(s, {"n": 8, "V": 1000}) == 8 * 64 * 4 + 2 * 8 * 64 * 4 + 8 * 8
