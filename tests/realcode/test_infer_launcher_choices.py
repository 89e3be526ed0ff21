"""Issue 25: launches the program itself makes — minimal cases written here of vLLM's AWQ
`dequantize_weights` (its launcher `awq_dequantize(…, thx, thy)`, called with 0 and 0, then sizes
the block and grid itself under `if (thx == 0 && thy == 0)`: read as a block the caller chooses, the
grid covered the wrong size and the kernel read past its buffers on a GPU) and exllamav2's
`reconstruct_kernel` (loops over one row counter up to `rows_8`, then `rows_4`, …, the host's
running sums ending at the height, and `row_b = 0` asking for every row: drawn apart, the rows past
the largest threshold were never written)."""
from .test_infer_patterns import infer

AWQ = """
#include <cuda_fp16.h>
__global__ void dequant(const int* __restrict__ B, const half* __restrict__ s, half* __restrict__ C, int G) {
  int N = blockDim.x * gridDim.x;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int q = B[col + row * N];
  for (int i = 0; i < 8; ++i)
    C[8 * col + 8 * row * N + i] = __hmul(__int2half_rn((q >> (4 * i)) & 15), s[8 * col + (row / G) * N * 8 + i]);
}
void launch(const int* B, const half* s, half* C, int in_c, int qout_c, int groups, int thx, int thy) {
  int G = in_c / groups;
  int x_thread = thx, y_thread = thy, x_blocks = 1, y_blocks = 1;
  if (thx == 0) x_thread = qout_c;
  if (thy == 0) y_thread = in_c;
  if (thx == 0 && thy == 0) {
    x_thread = 8;
    y_thread = 8;
    x_blocks = qout_c / 8;
    y_blocks = in_c / 8;
  }
  dim3 num_blocks(x_blocks, y_blocks);
  dim3 threads_per_block(x_thread, y_thread);
  dequant<<<num_blocks, threads_per_block>>>(B, s, C, G);
}
"""


def test_a_launcher_parameter_whose_zero_asks_it_to_choose_is_read_as_zero(project):
    project("awq.cu", AWQ)
    s, p = infer(project, "awq.cu", "dequant")
    assert (list(s.grid), list(s.block)) == (["qout_c / 8", "in_c / 8"], ["8", "8"]), p.comment
    assert s.args["C"].shape in (("qout_c", "8 * in_c"), ("in_c", "8 * qout_c")), p.comment
    assert any("`thx` taken as 0" in n for n in p.notes), p.notes
    # a launcher that only passes its parameter on has no choice of its own: still the caller's block
    project("plain.cu", AWQ.replace("if (thx == 0 && thy == 0)", "if (in_c == 0 && qout_c == 0)")
            .replace("if (thx == 0) x_thread = qout_c;", "").replace("if (thy == 0) y_thread = in_c;", ""))
    s, p = infer(project, "plain.cu", "dequant")
    assert not any("taken as 0" in n for n in p.notes) and list(s.block) != ["8", "8"], p.comment

