"""Issue 29: minimal cases written here of the launch sgl-kernel's `topkGatingSoftmax` is made with
(csrc/moe/moe_topk_softmax_kernels.cu): the launcher sizes its grid by a constant of a traits struct
it names through a local alias over its own template arguments (`using Constants =
detail::TopkConstants<T, EXPERTS, BYTES_PER_LDG>; … ROWS_PER_WARP = Constants::ROWS_PER_WARP;
num_blocks = cdiv(cdiv(num_rows, ROWS_PER_WARP), WARPS_PER_TB)`), the struct's constants written
with the project's macros (`MAX(1, EXPERTS / (ELTS_PER_LDG * WARP_SIZE))`). The grid was not read,
so it was guessed one block per row: 127 of every 128 blocks left at once."""
from astra_cuda import api
from astra_cuda.model import exprs, source, spec

KERNEL = """#define WARP 32
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
template <typename T, int PER_THREAD, int COLS, int WARPS>
__global__ void gate_rows(const T* in, float* out, const int rows) {
  static constexpr int THREADS_PER_ROW = COLS / PER_THREAD;
  static constexpr int ROWS_PER_WARP = WARP / THREADS_PER_ROW;
  const int row = blockIdx.x * WARPS * ROWS_PER_WARP + threadIdx.y * ROWS_PER_WARP + threadIdx.x / THREADS_PER_ROW;
  if (row >= rows) return;
  const int col = (threadIdx.x % THREADS_PER_ROW) * PER_THREAD;
  for (int j = 0; j < PER_THREAD; ++j) out[row * COLS + col + j] = (float)in[row * COLS + col + j] * 2.0f;
}
namespace detail {
template <typename T, int COLS>
struct RowConstants {
  static constexpr int PER_THREAD = MAXI(1, COLS / WARP);
  static constexpr int THREADS_PER_ROW = COLS / PER_THREAD;
  static constexpr int ROWS_PER_WARP = WARP / THREADS_PER_ROW;
};
}  // namespace detail
"""

LAUNCHER = """template <typename T, int COLS, int WARPS>
void launch_rows(const T* in, float* out, const int rows, cudaStream_t stream) {
  %s
  static constexpr int PER_THREAD = Constants::PER_THREAD;
  static constexpr int ROWS_PER_WARP = Constants::ROWS_PER_WARP;
  const int num_warps = (rows + ROWS_PER_WARP - 1) / ROWS_PER_WARP;
  const int num_blocks = (num_warps + WARPS - 1) / WARPS;
  dim3 block_dim(WARP, WARPS);
  gate_rows<T, PER_THREAD, COLS, WARPS><<<num_blocks, block_dim, 0, stream>>>(in, out, rows);
}
void run(const float* in, float* out, int rows, int cols, cudaStream_t stream) {
  switch (cols) {
    case %d: launch_rows<float, %d, 4>(in, out, rows, stream); break;
    case 128: launch_rows<float, 128, 4>(in, out, rows, stream); break;
  }
}
"""


def _spec(project, alias: str, cols: int):
    text = KERNEL + LAUNCHER % (alias, cols, cols)
    path = project("rows.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "gate_rows", run=False)
    assert p.valid, p.problems
    k = source.parse(text).kernel("gate_rows")
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return p, spec.load(m.kernel("gate_rows"), m)


def _blocks(s, rows: int) -> int:
    return exprs.evaluate_int(s.grid[0], {"rows": rows})


def test_a_grid_sized_by_a_traits_constant_of_a_local_alias(project):
    # 8 columns: one float a thread, 8 threads a row, 4 rows a warp, 16 rows a block of 4 warps
    p, s = _spec(project, "using Constants = detail::RowConstants<T, COLS>;", 8)
    assert not [n for n in p.notes if "could not be read" in n], p.notes
    assert [_blocks(s, r) for r in (1, 16, 17, 333)] == [1, 1, 2, 21]
    assert s.instantiate == "<float, 1, 8, 4>"


def test_the_struct_constant_through_a_function_like_macro_and_a_typedef(project):
    # 32 columns: MAXI(1, 32 / 32) = 1 float a thread, 32 threads a row: 1 row a warp, 4 a block
    p, s = _spec(project, "typedef detail::RowConstants<T, COLS> Constants;", 32)
    assert not [n for n in p.notes if "could not be read" in n], p.notes
    assert s.instantiate == "<float, 1, 32, 4>"
    assert [_blocks(s, r) for r in (1, 4, 5, 333)] == [1, 1, 2, 84]
