"""A block count the caller chooses over a grid-stride loop (issue 29): a size of its own, tested
at a few blocks and timed with enough blocks to fill a GPU — not one thread per element, which
leaves the loop a single trip and times a whole-array reduction as thousands of tiny blocks."""
import pytest

from astra_cuda import infer
from astra_cuda.infer.grid_stride import strides_over_grid
from astra_cuda.infer.bench_sizes import MIN_BLOCKS
from astra_cuda.infer.sizes import GRID_COUNT_TESTS
from astra_cuda.model import source, spec

TREE = """
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""

FOR_STEP = """__global__ void sums(const float* in, float* out, unsigned int n) {
  __shared__ float part[256];
  float acc = 0.f;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    acc += in[i];
""" + TREE

LOCAL_STEP = """__global__ void sums(const float* in, float* out, unsigned int n) {
  __shared__ float part[256];
  unsigned int blocks_now = gridDim.x;
  unsigned int step = blocks_now * blockDim.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.f;
  while (i < n) { acc += in[i]; i = i + step; }
""" + TREE

ONE_EACH = """__global__ void sums(const float* in, float* out, unsigned int n) {
  __shared__ float part[256];
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = i < n ? in[i] : 0.f;
  if (blockIdx.x == gridDim.x - 1) acc += 0.f;
""" + TREE

HOST = """
void run_sums(const float* in, float* out, unsigned int n, int blocks) {
  dim3 grid(blocks, 1, 1);
  sums<<<grid, 256, 256 * sizeof(float)>>>(in, out, n);
}
"""


def proposed(kernel_text: str) -> tuple[infer.Proposal, spec.Spec]:
    text = kernel_text + HOST
    m = source.parse(text)
    p = infer.infer(m.kernel("sums"), m)
    k = m.kernel("sums")
    with_spec = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return p, spec.load(with_spec.kernel("sums"), with_spec)


@pytest.mark.parametrize("kernel", [FOR_STEP, LOCAL_STEP])
def test_a_callers_block_count_over_a_grid_stride_loop_is_a_size_timed_filling_the_gpu(kernel):
    p, s = proposed(kernel)
    assert s.grid[0] == "blocks", p.comment
    assert s.sizes["blocks"] == GRID_COUNT_TESTS
    assert s.bench["blocks"] == [MIN_BLOCKS]
    assert s.args["out"].shape == ("blocks",)      # one partial sum a block
    # the elements are what grows the traffic; a thread makes many trips at the bench sizes
    assert s.bench["n"][0] >= 64 * MIN_BLOCKS * 256
    assert any("strides over the grid" in n for n in p.notes)


def test_one_element_per_thread_keeps_one_thread_per_element():
    p, s = proposed(ONE_EACH)
    assert s.grid[0] == "cdiv(n, 256)", p.comment
    assert "blocks" not in s.sizes


@pytest.mark.parametrize("body, strided", [
    ("for (int i = threadIdx.x; i < n; i += blockDim.x * gridDim.x) o[i] = 0;", True),
    ("int s = gridDim.x * 32; int i = 0; do { o[i] = 0; i += s; } while (i < n);", True),
    ("int g = gridDim.x; int s = g * blockDim.x; for (int i = 0; i < n; i = i + s) o[i] = 0;", True),
    ("for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = gridDim.x;", False),
    ("int last = gridDim.x - 1; if (blockIdx.x == last) o[0] = 1;", False),
    ("int i = 0; for (int j = 0; j < n; ++j) { i = gridDim.x; o[j] = i; }", False),
])
def test_strides_over_grid(body, strided):
    text = f"__global__ void k(int* o, int n) {{ {body} }}"
    assert strides_over_grid(text) is strided


COMPUTED = """
template <int MODE> void run_sums(const float* in, float* out, unsigned int n) {
  int blocks = 0;
  switch (MODE) {
  case 1:
    blocks = n / 256;
    blocks = n % 256 == 0 ? blocks : blocks + 1;
    sums<<<blocks, 256, 256 * sizeof(float)>>>(in, out, n);
    break;
  }
}
"""


def test_a_block_count_the_launcher_computes_is_not_a_size_of_its_own():
    # the launcher sizes the grid from `n` (unreadably: assigned twice in a `case`): the program runs
    # one trip a thread, so the spec keeps one thread per element rather than a count of its own
    text = FOR_STEP + COMPUTED
    m = source.parse(text)
    p = infer.infer(m.kernel("sums"), m)
    assert 'grid = ["cdiv(n, 256)"' in p.comment, p.comment
