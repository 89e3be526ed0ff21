"""Issue 29: bench sizes shaped like the launches a program makes — a block of a realistic thread
count where a size shapes it alone, the sizes that drive the grid grown (and shrunk) together, no
thread looping serially over what more blocks would share. Kernels written here."""
import math

from astra_cuda.infer.bench_sizes import FULL_BLOCK, MIN_BLOCKS, SERIAL_TRIPS
from astra_cuda.model import exprs
from astra_cuda.model.floor_bytes import floor_bytes
from tests.realcode.test_infer_bench_traffic import proposed

LINE = 64 << 20

# each thread copies `x` consecutive elements of one head's row: `x` divides the block, and a
# larger `x` only moves the same bytes with fewer threads
CHUNKS = """
#include <algorithm>
__global__ void put_chunks(const float* src, float* dst, int heads, int dim, int x) {
  int chunks = dim / x;
  int t = threadIdx.x;
  if (t >= heads * chunks) return;
  int h = t / chunks, c = t % chunks;
  long base = (long)blockIdx.x * heads * dim + h * dim + c * x;
  for (int i = 0; i < x; ++i) dst[base + i] = src[base + i];
}
void run(const float* src, float* dst, int tokens, int heads, int dim, int x) {
  dim3 grid(tokens);
  dim3 block(std::min(heads * (dim / x), 512));
  put_chunks<<<grid, block>>>(src, dst, heads, dim, x);
}
"""

# a block per (position, batch) pair looping over the heads and the row: four sizes, two of them the grid's
PAIRS = """
__global__ void scale_pairs(const float* src, const float* f, float* dst, int h, int d) {
  int s = blockIdx.x, b = blockIdx.y;
  for (int hi = threadIdx.y; hi < h; hi += blockDim.y)
    for (int di = threadIdx.x; di < d; di += blockDim.x) {
      long o = (((long)s * gridDim.y + b) * h + hi) * d + di;
      dst[o] = src[o] * f[(long)s * d + di];
    }
}
void run(const float* src, const float* f, float* dst, int s, int b, int h, int d) {
  dim3 grid(s, b);
  dim3 block(32, 4);
  scale_pairs<<<grid, block>>>(src, f, dst, h, d);
}
"""

# a block a row; its first thread writes the row's `k` results one after another
SERIAL = """
__global__ void fill_row(const float* in, float* out, int* idx, int k) {
  long row = blockIdx.x;
  float v = in[row];
  if (threadIdx.x == 0)
    for (int j = 0; j < k; ++j) { out[row * k + j] = v; idx[row * k + j] = j; }
}
void run(const float* in, float* out, int* idx, int rows, int k) {
  fill_row<<<rows, 32>>>(in, out, idx, k);
}
"""

# a block a row; its first thread finds the row's `k` best of `experts` scores, one after another:
# both sizes lengthen its loop, and only halving them together keeps the bytes (scores and winners)
WINNERS = """
__global__ void pick_winners(const float* scores, float* best, int* which, int experts, int k) {
  long row = blockIdx.x;
  if (threadIdx.x != 0) return;
  for (int j = 0; j < k; ++j) {
    float m = -1e30f; int w = 0;
    for (int e = 0; e < experts; ++e) {
      float v = scores[row * experts + e] - 0.001f * j;
      if (v > m) { m = v; w = e; }
    }
    best[row * k + j] = m; which[row * k + j] = w;
  }
}
void run(const float* scores, float* best, int* which, int rows, int experts, int k) {
  pick_winners<<<rows, 32>>>(scores, best, which, experts, k);
}
"""


def _dims(exprs_: tuple[str, ...] | list[str], case: dict[str, int]) -> int:
    return math.prod(exprs.evaluate_int(e, case) for e in exprs_)


def test_a_size_that_only_divides_the_block_leaves_it_full(project):
    s, notes = proposed(project, "chunks.cu", CHUNKS, "put_chunks")
    cases = s.bench_cases()
    assert cases and all(_dims(s.block, c) >= FULL_BLOCK for c in cases), (s.block, cases, notes)
    assert all(floor_bytes(s, c) >= LINE for c in cases)


def test_the_sizes_of_the_grid_and_the_row_are_shrunk_together(project):
    s, notes = proposed(project, "pairs.cu", PAIRS, "scale_pairs")
    cases = s.bench_cases()
    assert cases, notes
    for c in cases:   # no size halved to its floor while another stays at 4096 (4096 x 2 x 2 x 4096)
        vals = [c[n] for n in ("s", "b", "h", "d")]
        assert max(vals) <= 16 * min(vals), (c, notes)
        assert _dims(s.grid, c) >= MIN_BLOCKS and floor_bytes(s, c) >= LINE


def test_a_threads_serial_loop_is_traded_for_rows(project):
    s, notes = proposed(project, "serial.cu", SERIAL, "fill_row")
    cases = s.bench_cases()
    assert cases, notes
    k = next(n for n in s.sizes if n != "rows" and n in str(s.args["out"].shape))
    for c in cases:
        assert c[k] <= SERIAL_TRIPS and _dims(s.grid, c) >= MIN_BLOCKS, (c, notes)
        assert floor_bytes(s, c) >= LINE


def test_two_sizes_of_a_threads_loop_are_halved_together_keeping_the_bytes(project):
    s, notes = proposed(project, "winners.cu", WINNERS, "pick_winners")
    cases = s.bench_cases()
    assert cases, notes
    for c in cases:   # on main: 16384 rows, each thread 1376 x 2048 trips
        assert c["k"] * c["experts"] <= 1 << 16 and _dims(s.grid, c) >= 1 << 17, (c, notes)
        assert LINE <= floor_bytes(s, c) <= 512 << 20


def test_a_block_size_that_keeps_its_threads_when_halved_is_traded_for_blocks():
    # a block of `min(ss, 32)` x 8 threads, one a feature (the shape of apex welford's launch): at
    # ss = 2^21 halving ss leaves the block as it was, so per-block work is traded for blocks
    from astra_cuda.infer.bench_sizes import size_bench
    from astra_cuda.infer.sizes import Draft
    d = Draft(grid=["fs"], block=["min(ss, 32)", "8"], shared=None, require=[], sizes={"fs": [1, 100], "ss": [1, 100]},
              bench={}, buffers={"x": (["fs", "ss"], 4, False), "y": (["fs", "ss"], 4, False)},
              args={"x": '{ type = "float", shape = ["fs", "ss"] }',
                    "y": '{ type = "float", shape = ["fs", "ss"], output = true }'})
    notes: list[str] = []
    size_bench(d, {"fs": [64], "ss": [1 << 22]}, notes)
    assert d.bench["fs"][0] >= MIN_BLOCKS and d.bench["fs"][0] * d.bench["ss"][0] >= 1 << 27, (d.bench, notes)
