"""Issue 25: a launch dimension the launcher picks through an `if`/`else if`/`else` chain over a
size — minimal case written here of TGI exllama's `q4_matmul_cuda` (`int block_size_z; if
(w->width == 4096) block_size_z = 384; else if (…) …; else block_size_z = 256;`, then the grid's z
`(dim + block_size_z - 1) / block_size_z` and the kernel's `block_size_z` argument). Left out as
undecided, block_size_z was a free size drawn 1 … 4096 and shapes were fitted to it; it is the
spec's conditional over the tests, the field a local copies (`w->width`) read as that local."""
import math

from astra_cuda.infer.launch_paths import path_locals
from astra_cuda.model.syntax import parser, walk

from astra_cuda.model import exprs

from tests.realcode.test_infer_asm_accesses import infer

Q4 = """#include <cuda_fp16.h>
#include <cstdint>
struct Q4Matrix { int height; int width; const uint32_t* qweight; };
__global__ void q4mm(const half* x, const uint32_t* w, half* out, const int height, const int dim, const int width,
                     const int block_size_z) {
  int k0 = block_size_z * blockIdx.z, k1 = min(dim, block_size_z * (blockIdx.z + 1));
  int n = blockIdx.x * 32 + threadIdx.x;
  if (n >= width) return;
  float acc = 0.f;
  for (int k = k0; k < k1; k++) acc += __half2float(x[blockIdx.y * dim + k]) * (float)w[k * width + n];
  atomicAdd(&out[blockIdx.y * width + n], __float2half(acc));
}
void q4_matmul(const half* x, int x_height, const Q4Matrix* w, half* out) {
  int height = x_height, dim = w->height, width = w->width;
  int block_size_z;
  if (w->width == 4096) block_size_z = 384;
  else if (w->width == 11008) block_size_z = 256;
  else block_size_z = 128;
  dim3 blocks((width + 31) / 32, height, (dim + block_size_z - 1) / block_size_z);
  q4mm<<<blocks, dim3(32, 1, 1)>>>(x, w->qweight, out, height, dim, width, block_size_z);
}
"""
CHOSEN = "384 if width == 4096 else 256 if width == 11008 else 128"


def _locals(src: str) -> dict[str, str]:
    fn = next(n for n in walk(parser().parse(src.encode()).root_node) if n.type == "function_definition"
              and b"q4_matmul" in n.child_by_field_name("declarator").text)
    call = next(n for n in walk(fn) if n.type == "call_expression" and b"<<<" in (n.text or b""))
    return path_locals(fn, call, {})


def test_a_local_every_branch_of_a_chain_sets_is_the_conditional_over_its_tests():
    assert _locals(Q4)["block_size_z"] == "((width == 4096) ? (384) : (((width == 11008) ? (256) : (128))))"
    # without the final `else` one path sets nothing: not known
    assert "block_size_z" not in _locals(Q4.replace("  else block_size_z = 128;\n", ""))


def test_the_chosen_launch_dimension_is_no_free_size(project):
    s, p = infer(project, "q4.cu", Q4, "q4mm")
    assert "block_size_z" not in s.sizes, s.sizes
    assert p.comment.count(CHOSEN) >= 2, p.comment   # the grid's z and the kernel's argument
    assert list(s.args["w"].shape) == ["dim", "width"], s.args["w"].shape


# the kernel itself, closer (views built over the scales and the packed zeros, `dim / groupsize` rows;
# no column guard: the program's widths, 4096 and the chain's others, are whole blocks of 32)
UNGUARDED = """#include <cuda_fp16.h>
#include <cstdint>
struct View { const half* d; const int h, w;
  __device__ View(const half* d, const int h, const int w) : d(d), h(h), w(w) {}
  __device__ float item(int r, int c) const { return __half2float(d[r * w + c]); } };
struct ViewQ4Row { const uint32_t* d; const int h, w;
  __device__ ViewQ4Row(const uint32_t* d, const int h, const int w) : d(d), h(h), w(w) {}
  __device__ int item(int r, int c) const { return (d[r * w / 8 + c / 8] >> ((c & 7) * 4)) & 15; } };
__global__ void q4mm(const half* x, const uint32_t* w, const half* scales, const uint32_t* zeros, half* out,
                     const int height, const int dim, const int width, const int groupsize, const int block_size_z) {
  int k0 = block_size_z * blockIdx.z, k1 = min(dim, block_size_z * (blockIdx.z + 1));
  int n = blockIdx.x * 32 + threadIdx.x;   // no column guard: the program's widths are whole blocks
  View s_(scales, dim / groupsize, width);
  ViewQ4Row z_(zeros, dim / groupsize, width);
  int iterations = (k1 - k0) / 8;
  float acc = 0.f;
  for (int k = k0; k < k0 + iterations * 8; k += 8) {
    int g = k / groupsize;
    float s = s_.item(g, n);
    int z = z_.item(g, n);
    uint32_t q = w[k / 8 * width + n];
    for (int j = 0; j < 8; j++) acc += __half2float(x[blockIdx.y * dim + k + j]) * s * (float)((int)((q >> (4 * j)) & 15) - z);
  }
  atomicAdd(&out[blockIdx.y * width + n], __float2half(acc));
}
void q4_matmul(const half* x, int height, int dim, int width, int groupsize, const uint32_t* w, const half* s,
               const uint32_t* z, half* out) {
  int block_size_z;
  if (width == 4096) block_size_z = 384;
  else block_size_z = 256;
  dim3 blocks((width + 31) / 32, height, (dim + block_size_z - 1) / block_size_z);
  q4mm<<<blocks, 32>>>(x, w, s, z, out, height, dim, width, groupsize, block_size_z);
}
"""


def test_unguarded_columns_are_whole_blocks_and_the_packed_zeros_are_read(project):
    s, p = infer(project, "q4z.cu", UNGUARDED, "q4mm")
    assert "block_size_z" not in s.sizes and "width % 32 == 0" in s.require, (s.sizes, s.require)
    assert not any("could not be read" in n for n in p.notes), p.notes
    # one value per group of rows and column; the zeros 8 to a word
    for c in s.cases():
        groups = -(-c["dim"] // c["groupsize"])
        count = {a: math.prod(exprs.evaluate_int(d, c) for d in s.args[a].shape) for a in ("scales", "zeros", "w")}
        assert count == {"scales": groups * c["width"], "zeros": groups * c["width"] // 8,
                         "w": c["dim"] * c["width"] // 8}, (c, count)
