"""Issue 25: a kernel no launch site shows gets a guessed grid; where it reads `blockIdx.y`
(vLLM copy_blocks: `pair_idx = blockIdx.y` picks a pair of block numbers), the grid's y is a size
of its own — with y left 1 the pair table was measured one pair long and the bench moved
under 1 MiB whatever the other sizes."""
from .test_infer_asm_accesses import infer

PAIRS = (
    "__global__ void copy_pairs(float* data, const long* pairs, int width) {\n"
    "  const int pair_idx = blockIdx.y;\n"
    "  const long src = pairs[2 * pair_idx], dst = pairs[2 * pair_idx + 1];\n"
    "  for (int i = threadIdx.x; i < width; i += blockDim.x) data[dst * width + i] = data[src * width + i];\n"
    "}\n")


def test_a_guessed_grid_gives_the_y_the_kernel_reads_a_size(project):
    s, p = infer(project, "pairs.cu", PAIRS, "copy_pairs")
    assert s.grid[1:] == ("num_pairs",), s.grid
    assert "num_pairs" in s.args["pairs"].shape[0], s.args["pairs"].shape
    assert max(s.bench["num_pairs"]) > 1
    assert s.block == ("256",)   # the block's guess stays the one size's


def test_a_size_parameter_named_for_the_index_is_the_count(project):
    """`head_idx = blockIdx.y` beside a parameter `num_heads`: the grid's y is that size."""
    s, p = infer(project, "heads.cu",
                 "__global__ void per_head(float* out, const float* in, int width, int num_heads) {\n"
                 "  const int head_idx = blockIdx.y;\n"
                 "  for (int i = threadIdx.x; i < width; i += blockDim.x)\n"
                 "    out[head_idx * width + i] = in[head_idx * width + i];\n}\n", "per_head")
    assert s.grid[-1] == "num_heads", s.grid
    assert "num_heads_" not in "".join(s.sizes)
