"""Issue 25: a row read through a pointer that moves as it reads (`*h_ptr++`) in a helper handed a
view object, over a block's slice of the columns — minimal case written here of the pattern of TGI's
exllama `q4_matmul_kernel` (`dot_product_8_h` reads eight halves of `x` so, `iterations = (x_column_end
- x_column) / 8` whole steps of 8 from `x_column`). The reads through `*h_ptr++` were not counted at
all and the slice's bound `x_column + iterations * 8` was unbounded, so `x`, `w` were guessed (the
packed weights `[block_size_z]`): on a GPU the reads past them made two runs disagree."""
from tests.realcode.test_infer_views import _inferred

Q4 = """#include <cuda_fp16.h>
#include <cstdint>
#define BLOCK_Z 256
class HalfView {
public:
  const half* data; const int height; const int width;
  __device__ HalfView(const half* data, const int height, const int width) : data(data), height(height), width(width) { }
  __device__ const half* item_ptr(int row, int column) const { return &data[row * width + column]; }
};
class Q4Column {
public:
  const uint32_t* data; const int height; const int width;
  __device__ Q4Column(const uint32_t* data, const int height, const int width) : data(data), height(height), width(width) { }
  __device__ const uint32_t* item_uint32_ptr(int row, int column) { return &data[row / 8 * width + column]; }
};
__device__ half dot8(half acc, HalfView& h_, int h_row, int h_column, Q4Column& v_, int v_row, int v_column, int count) {
  const half* h_ptr = h_.item_ptr(h_row, h_column);
  const uint32_t* v_ptr = v_.item_uint32_ptr(v_row, v_column);
  for (int i = 0; i < count; i++) {
    uint32_t v_read = *v_ptr; v_ptr += v_.width;
    half tmp = __hmul(*h_ptr++, __int2half_rn((int)(v_read & 0x0f) - 8));
    for (int j = 1; j < 8; j++) tmp = __hfma(*h_ptr++, __int2half_rn((int)((v_read >> (4 * j)) & 0x0f) - 8), tmp);
    acc = __hadd(acc, tmp);
  }
  return acc;
}
__global__ void q4_matmul(const half* x, const uint32_t* w, half* out, const int height, const int dim, const int width) {
  int x_column = BLOCK_Z * blockIdx.z;
  int x_column_end = min(dim, BLOCK_Z * (blockIdx.z + 1));
  int w_column = 32 * blockIdx.x + threadIdx.x;
  int x_row = blockIdx.y;
  int iterations = (x_column_end - x_column) / 8;
  HalfView x_(x, height, dim);
  Q4Column w_(w, dim, width);
  half acc = {};
  for (int k = x_column; k < x_column + iterations * 8; k += 8) acc = dot8(acc, x_, x_row, k, w_, k, w_column, 1);
  atomicAdd(&out[x_row * width + w_column], acc);
}
void q4_matmul_cuda(const half* x, const uint32_t* w, half* out, int height, int dim, int width) {
  dim3 blocks((width + 31) / 32, height, (dim + BLOCK_Z - 1) / BLOCK_Z);
  q4_matmul<<<blocks, 32>>>(x, w, out, height, dim, width);
}
"""


def test_reads_through_a_moving_pointer_over_a_blocks_slice_are_bounded(project):
    s, p = _inferred(project, Q4, "q4_matmul")
    assert s.args["x"].shape == ("height", "dim")
    assert s.args["out"].shape == ("height", "width")
    w = s.args["w"].shape   # eight 4-bit codes a word: dim / 8 words down each of the width columns
    assert sorted(w) == sorted(("dim / 8", "width")) or sorted(w) == sorted(("width / 8", "dim")), w
    assert not any("could not be read" in n for n in p.notes), p.notes
