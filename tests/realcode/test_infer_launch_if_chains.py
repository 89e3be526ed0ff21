"""Issue 25: a launch dimension the launcher picks through an `if`/`else if`/`else` chain over a
size — minimal case written here of TGI exllama's `q4_matmul_cuda` (`int block_size_z; if
(w->width == 4096) block_size_z = 384; else if (…) …; else block_size_z = 256;`, then the grid's z
`(dim + block_size_z - 1) / block_size_z` and the kernel's `block_size_z` argument). Left out as
undecided, block_size_z was a free size drawn 1 … 4096 and shapes were fitted to it; it is the
spec's conditional over the tests, the field a local copies (`w->width`) read as that local."""
from astra_cuda.infer.launch_paths import path_locals
from astra_cuda.model.syntax import parser, walk

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
