"""Issue 29 item 1: the families fire on the shapes public kernels are written in, not only on
the shapes written here first. Each case is the shape only (written here, never third-party code):
NVIDIA's samples' interleaved tree over dynamic shared memory with cooperative-groups barriers
(warp_reduce), an elementwise index with casts and the block size spelled by a macro (coarsen), a
launcher holding its grid in a `dim3` declared beside another, and the samples' tiled-loop
transpose whose indices are checked as functions (transpose). What only looks like them is left
alone. The rewrites that change what threads do pass the real gate on the CPU backend."""
import pytest

from astra_cuda.model import source, spec as spec_mod
from astra_cuda.agents.offline import TRANSFORMS, context_from_text


def _apply(idea, text, kernel):
    return TRANSFORMS[idea].apply(text, context_from_text(kernel, text))


def _gate(text, kernel, candidate):
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    return local_evaluator("shape.cu", kernel, sp, backend, text, quick=True)(candidate)


REDUCE = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
template <class T> struct DynShared {
  __device__ operator T *() { extern __shared__ int raw[]; return (T *)raw; }
};
/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
shared_mem = "512"
instantiate = "<int>"
[sizes]
n = [1, 100, 1000]
[args]
in = { type = "int32", shape = ["n"] }
part = { type = "int32", shape = ["cdiv(n, 128)"], output = true }
n = "n"
*/
template <class T> __global__ void block_sums(T *in, T *part, unsigned int n) {
  cg::thread_block block = cg::this_thread_block();
  T *buf = DynShared<T>();
  unsigned int t = threadIdx.x;
  unsigned int g = blockIdx.x * blockDim.x + threadIdx.x;
  buf[t] = (g < n) ? in[g] : 0;
  cg::sync(block);
  for (unsigned int s = 1; s < blockDim.x; s *= 2) {
    if ((t % (2 * s)) == 0) {
      buf[t] += buf[t + s];
    }
    cg::sync(block);
  }
  if (t == 0) part[blockIdx.x] = buf[0];
}
"""


def test_an_interleaved_tree_over_dynamic_shared_memory_becomes_warp_shuffles():
    rw = _apply("warp_reduce", REDUCE, "block_sums")
    assert rw is not None
    k = source.parse(rw.text).kernel("block_sums").text
    assert "__shfl_down_sync" in k and "T astra_red0;" in k and "part[blockIdx.x] = astra_red0;" in k
    assert "DynShared" not in k and "buf[" not in k            # the view of shared memory went with the tree
    ev = _gate(REDUCE, "block_sums", rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    wrong = rw.text.replace("astra_red0 = astra_partial[32];", "astra_red0 = astra_partial[0];")
    assert wrong != rw.text and not _gate(REDUCE, "block_sums", wrong).passed


@pytest.mark.parametrize("change", [
    ("cg::sync(block);\n  }", "__syncwarp();\n  }"),                           # not a block-wide barrier
    ("if ((t % (2 * s)) == 0)", "if ((t % (4 * s)) == 0)"),                     # not the tree
    ("part[blockIdx.x] = buf[0];", "part[blockIdx.x] = buf[1];"),             # another element read
    ("T *buf = DynShared<T>();", "T *buf = in;"),                               # global memory, not shared
])
def test_what_only_looks_like_a_block_tree_is_left_alone(change):
    changed = REDUCE.replace(*change)
    assert changed != REDUCE
    assert _apply("warp_reduce", changed, "block_sums") is None


CAP = """#include <cstdint>
#define THREADS 256
/* @astra
grid = ["cdiv(count, 256)"]
block = ["256"]
[sizes]
count = [1, 1000, 4097]
[args]
v = { type = "float", shape = ["count"], inout = true }
count = "count"
k = 0.5
*/
__global__ void cap_kernel(float* __restrict__ v, const uint64_t count, const float k) {
  uint64_t e = (uint64_t)blockIdx.x * THREADS + (uint64_t)threadIdx.x;
  if (e >= count) return;
  v[e] = k * tanhf(v[e] / k);
}

void cap(float* v, uint64_t count, float k) {
  dim3 threads, blocks;
  threads.x = THREADS;
  blocks.x = (count + THREADS - 1) / THREADS;
  cap_kernel<<<blocks, threads>>>(v, count, k);
}
"""


def test_an_index_with_casts_and_the_block_size_by_macro_is_coarsened():
    rw = _apply("coarsen", CAP, "cap_kernel")
    assert rw is not None
    k = source.parse(rw.text).kernel("cap_kernel").text
    # the grid-stride loop steps by the launch it runs under: the macro became blockDim.x, casts kept
    assert "(uint64_t)blockIdx.x * blockDim.x + (uint64_t)threadIdx.x" in k and "THREADS" not in k
    assert "cap_kernel<<<(dim3(blocks).x + 3) / 4, threads>>>" in rw.text   # a dim3 declared beside another
    ev = _gate(CAP, "cap_kernel", rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


def test_a_macro_that_is_not_the_block_size_is_not_read_as_it():
    changed = CAP.replace("#define THREADS 256", "#define THREADS 128").replace(
        "(count + THREADS - 1) / THREADS", "(count + 255) / 256")
    assert _apply("coarsen", changed, "cap_kernel") is None


TILES = """#define T 32
#define R 8
/* @astra
grid = ["w / 32", "h / 32"]
block = ["32", "8"]
require = ["w % 32 == 0", "h % 32 == 0"]
[sizes]
w = [32, 64, 96]
h = [32, 96, 64]
[args]
dst = { type = "float", shape = ["w", "h"], output = true }
src = { type = "float", shape = ["h", "w"] }
w = "w"
h = "h"
*/
__global__ void flip(float *dst, float *src, int w, int h) {
  int col = blockIdx.x * T + threadIdx.x;
  int row = blockIdx.y * T + threadIdx.y;
  int from = col + w * row;
  int to = row + h * col;
  for (int k = 0; k < T; k += R) {
    dst[to + k] = src[from + k * w];
  }
}
"""


def test_the_tiled_loop_transpose_goes_through_shared_memory():
    rw = _apply("transpose", TILES, "flip")
    assert rw is not None
    k = source.parse(rw.text).kernel("flip").text
    assert "__shared__ float astra_tile[32][33];" in k and "__syncthreads();" in k
    assert 'block = ["32", "8"]' in rw.text                     # the launch is kept
    ev = _gate(TILES, "flip", rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("change", [
    ("dst[to + k] = src[from + k * w];", "dst[to + k * h] = src[from + k * w];"),   # k moves `to` along x
    ("dst[to + k] = src[from + k * w];", "dst[from + k * w] = src[to + k];"),       # writes already along x
    ("int to = row + h * col;", "int to = row * col;"),                             # not linear in row
    ("k < T; k += R", "k < T; k += 4"),                                             # rows not the block's
])
def test_what_is_not_a_tiled_loop_transpose_is_left_alone(change):
    changed = TILES.replace(*change)
    assert changed != TILES
    assert _apply("transpose", changed, "flip") is None
