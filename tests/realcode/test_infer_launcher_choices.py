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
struct Tensor { long size(int) const; void* data_ptr() const; };
void launch(const Tensor& _kernel, const Tensor& _scales, half* C, int thx, int thy) {
  int in_c = _kernel.size(0);
  int qout_c = _kernel.size(1);
  int G = in_c / _scales.size(0);
  const int* B = (const int*)_kernel.data_ptr();
  const half* s = (const half*)_scales.data_ptr();
  int x_thread = thx, y_thread = thy, x_blocks = 1, y_blocks = 1;
  if (thx == 0) x_thread = qout_c;
  if (thy == 0) y_thread = in_c;
  if (thx == 0 && thy == 0) {
    x_thread = 8;
    y_thread = 8;
    x_blocks = (int)(qout_c / 8);
    y_blocks = (int)(in_c / 8);
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


RANGES = """
#include <cuda_fp16.h>
#include <stdint.h>
__global__ void recon(const uint32_t* __restrict__ w, const int size_k, const int size_n, half* __restrict__ b,
                      const int rows_8, const int rows_4, const int rows_2, const int row_a, const int row_b) {
  int offset_k = 128 * blockIdx.y;
  int n = 128 * blockIdx.x + threadIdx.x;
  if (n >= size_n) return;
  int end_k = min(offset_k + 128, size_k);
  int k = offset_k;
  while (k < rows_8 && k < end_k) { for (int j = 0; j < 4; j++) b[(k + j) * size_n + n] = __uint2half_rn(w[(k / 4) * size_n + n] >> (8 * j)); k += 4; }
  while (k < rows_4 && k < end_k) { for (int j = 0; j < 8; j++) b[(k + j) * size_n + n] = __uint2half_rn(w[(k / 8) * size_n + n] >> (4 * j)); k += 8; }
  while (k < rows_2 && k < end_k) { for (int j = 0; j < 16; j++) b[(k + j) * size_n + n] = __uint2half_rn(w[(k / 16) * size_n + n] >> (2 * j)); k += 16; }
}
void reconstruct(const uint32_t* w, half* out, int height, int width, int rows_8, int rows_4, int rows_2,
                 int row_a, int row_b) {
  if (row_a == 0 && row_b == 0) row_b = height;
  dim3 grid((width + 127) / 128, (row_b - row_a + 127) / 128);
  recon<<<grid, 128>>>(w, height, width, out, rows_8, rows_4, rows_2, row_a, row_b);
}
"""


def test_thresholds_a_row_counter_walks_in_turn_end_at_its_bound(project):
    project("recon.cu", RANGES)
    s, p = infer(project, "recon.cu", "recon")
    assert {n: str(s.args[n].value) for n in ("rows_8", "rows_4", "rows_2", "row_a", "row_b")} == \
        {"rows_8": "size_k", "rows_4": "size_k", "rows_2": "size_k", "row_a": "0", "row_b": "size_k"}, p.comment
    assert s.grid[1].replace(" ", "") in ("(size_k-0+127)/128", "(size_k+127)/128"), p.comment
    # one loop up to a parameter is no chain of ranges: its bound stays a size
    project("one.cu", RANGES.replace("while (k < rows_4 && k < end_k)", "while (k < end_k)")
            .replace("while (k < rows_2 && k < end_k)", "if (k < end_k)"))
    s, p = infer(project, "one.cu", "recon")
    assert str(s.args["rows_8"].value) == "rows_8", p.comment


def test_optional_pointers_null_that_then_fault_on_a_partial_tile_are_tried_with_whole_tiles():
    # exllamav2's reconstruct_kernel: with its permutation given it leaves rows unwritten, with it null
    # it walks rows in whole steps of 32 past a partial tile; both changes together are what runs
    from astra_cuda.infer import Proposal, validate
    first, null, both = (Proposal(f"/* @astra {x} */\n") for x in "abc")
    asked = []

    def redo(decide):
        asked.append(decide)
        return both if "tiles" in decide and "optional" in decide else null if "optional" in decide else None

    def trial(p):
        return validate.Trial(True, True, "ran") if p is both else \
            validate.Trial(True, False, "launch: crashed", ("launch",)) if p is null else \
            validate.Trial(True, False, "poison: `b` left unwritten", ("poison",))
    chosen = validate.first_that_runs(first, trial, redo, "cpu")
    assert chosen.comment == both.comment and asked[:2] == [
        {"optional": "null", "sizes": "equal"}, {"optional": "null", "sizes": "equal", "tiles": "block"}]


# sgl-kernel's topkGatingSoftmax: its launcher helper counts warps over `ROWS_PER_WARP`, a
# `static constexpr` taken from a constants struct of its template arguments — one number of the
# instance the spec cannot read, never a size of the problem (it had become one, sized 1..333),
# nor is `num_warps`, unread only for it
TOPK = """
template <int EXPERTS> struct Consts { static constexpr int ROWS_PER_WARP = 32 / EXPERTS; };
template <int EXPERTS, int WARPS>
__global__ void gate(const float* in, float* out, int num_rows) {
  int row = (blockIdx.x * WARPS + threadIdx.y) * Consts<EXPERTS>::ROWS_PER_WARP + threadIdx.x / EXPERTS;
  if (row < num_rows) out[row * EXPERTS + threadIdx.x % EXPERTS] = in[row * EXPERTS + threadIdx.x % EXPERTS];
}
template <int EXPERTS, int WARPS>
void helper(const float* in, float* out, const int num_rows) {
  using C = Consts<EXPERTS>;
  static constexpr int ROWS_PER_WARP = C::ROWS_PER_WARP;
  const int num_warps = (num_rows + ROWS_PER_WARP - 1) / ROWS_PER_WARP;
  const int num_blocks = (num_warps + WARPS - 1) / WARPS;
  dim3 block(32, WARPS);
  gate<EXPERTS, WARPS><<<num_blocks, block>>>(in, out, num_rows);
}
void launch(const float* in, float* out, int n) { helper<8, 4>(in, out, n); }
"""


def test_a_compile_time_local_of_the_launcher_is_no_size(project):
    const = TOPK.replace("static constexpr int ROWS_PER_WARP = C::", "const int ROWS_PER_WARP = C::")   # from a member
    chained = TOPK.replace("(num_rows + ROWS_PER_WARP - 1) / ROWS_PER_WARP", "(num_rows + rpw - 1) / rpw") \
        .replace("  const int num_warps", "  const int rpw = ROWS_PER_WARP * 1;\n  const int num_warps")
    for name, text in (("constexpr.cu", TOPK), ("const.cu", const), ("chained.cu", chained)):
        project(name, text)
        s, p = infer(project, name, "gate")
        assert not {"ROWS_PER_WARP", "rpw", "num_warps"} & set(s.sizes), p.comment
    # a `const` the host computes from a runtime value it cannot read is still a size of its own
    project("runtime.cu", TOPK.replace("static constexpr int ROWS_PER_WARP = C::ROWS_PER_WARP",
                                       "const int ROWS_PER_WARP = in[0] > 0 ? num_rows : 1"))
    assert "ROWS_PER_WARP" in infer(project, "runtime.cu", "gate")[0].sizes
