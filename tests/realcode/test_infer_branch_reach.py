"""A launcher that picks its instance by an `if`/`else if` chain over a size (DeepSpeed's
attn_softmax: `if (seq <= 8) k<2> … else if (seq <= 256) k<64> else k<128>`) is read at the launch
most sizes reach, not at the one with the smallest template arguments: the first branch pinned
the sequence to 2 (`seq * 4 <= 8` required), a length no model's attention has. Tests of a local
the launcher computes (DeepSpeed rotary's `threads_per_head`) are not counted: that instance's
shapes were not read and its spec failed check."""
from astra_cuda import api

from .conftest import inferred

CHAIN = """
template <int ITEMS>
__global__ void scale_rows(float* x, int len) {
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < len; i += blockDim.x) x[r * len + i] *= 2.0f;
}
void launch_scale(float* x, int rows, int len) {
  if (len <= 8)
    scale_rows<1><<<rows, 32>>>(x, len);
  else if (len <= 64)
    scale_rows<2><<<rows, 64>>>(x, len);
  else
    scale_rows<8><<<rows, 256>>>(x, len);
}
"""

HEADS = """
__host__ __device__ inline int pow2_up(int n) { int p = 1; while (p < n) p *= 2; return p; }
template <int TPH>
__global__ void per_head(float* q, int heads, int head_size) {
  const int h = blockIdx.x * (256 / TPH) + threadIdx.x / TPH;
  const int lane = threadIdx.x % TPH;
  if (h < heads)
    for (int i = lane; i < head_size; i += TPH) q[h * head_size + i] += 1.0f;
}
void launch_heads(float* q, int heads, int head_size) {
  const int per = pow2_up(head_size) / 4;
  if (per == 1) {
    per_head<1><<<(heads + 255) / 256, 256>>>(q, heads, head_size);
  } else if (per == 32) {
    per_head<32><<<(heads + 7) / 8, 256>>>(q, heads, head_size);
  }
}
"""


def test_a_size_chain_is_read_at_the_launch_most_sizes_reach(project):
    p, s = inferred(project, "chain.cu", CHAIN, "scale_rows")
    assert s.instantiate == "<8>", p.comment
    assert "len > 64" in s.require, p.comment
    assert all(v > 64 for v in s.bench["len"]), p.comment


def test_a_head_chain_through_a_computed_local_is_not_counted(project):
    # `per` is computed from head_size: its tests are no share of the sizes (narrowed: DeepSpeed
    # rotary's `threads_per_head == 32` instance failed check where its `== 4` one passed), so the
    # smallest instance is read, as before the ranking
    p, s = inferred(project, "heads.cu", HEADS, "per_head")
    assert s.instantiate == "<1>", p.comment


WIDTHS = """
template <int VEC>
__global__ void add_one(float* x, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  for (int j = 0; j < VEC; ++j)
    if (i + j < n) x[i + j] += 1.0f;
}
void launch_add(float* x, int n) {
  int width = 1;
  if (n % 8 == 0) {
    width = 8;
  } else if (n % 2 == 0) {
    width = 2;
  }
  const int per_block = 256 * width;
  if (width == 8) {
    add_one<8><<<(n + per_block - 1) / per_block, 256>>>(x, n);
  }
}
"""


def test_a_local_a_chain_sets_is_the_number_the_launchs_branch_pins(project):
    # `width` is set 8, 2 or 1 and the launch stands under `if (width == 8)`: that number, not a
    # size of its own in the grid (it was one, but where the number was 4: the run-time default)
    path = project("widths.cu", WIDTHS)
    p = api.infer_spec(api.snapshot(WIDTHS, str(path)), "add_one", run=False)
    assert p.valid, p.problems
    assert "width" not in p.comment.split("[args]")[0], p.comment


TILED = """
template <int TILE>
__global__ void tile_copy(float* out, const float* in, int w) {
  const int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  out[y * w + x] = in[y * w + x];
}
void launch_tiles(float* out, const float* in, int w, int h, int tile) {
  dim3 threads(tile, tile);
  dim3 grid(w / tile, h / tile);
  if (tile == 16) {
    tile_copy<16><<<grid, threads>>>(out, in, w);
  } else {
    tile_copy<32><<<grid, threads>>>(out, in, w);
  }
}
"""


def test_a_branch_over_the_block_size_is_no_share_of_the_sizes(project):
    # `tile` is the block's width, a setting the program picks (cuda-samples' MatrixMulCUDA), not a
    # size of the data: its `else` admitting 4095 values does not move the pick off the smallest instance
    p, s = inferred(project, "tiles.cu", TILED, "tile_copy")
    assert s.instantiate == "<16>", p.comment


SWITCH = """
template <int ITEMS>
__global__ void pick_k(float* x, int* ids, int rows, int k) {
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < k; i += blockDim.x) ids[r * k + i] = i + ITEMS * 0 + (x[r] > 0.f);
}
void launch_pick(float* x, int* ids, int rows, int k) {
  switch (k) {
    case 1 ... 16: pick_k<1><<<rows, 32>>>(x, ids, rows, k); break;
    case 17 ... 1024: pick_k<8><<<rows, 256>>>(x, ids, rows, k); break;
  }
}
"""


def test_a_switch_over_a_size_is_not_ranked_by_its_widest_case(project):
    p, s = inferred(project, "switch.cu", SWITCH, "pick_k")
    assert s.instantiate == "<1>", p.comment
