"""Issue 25: an output the kernel stores to at positions it computed itself — a minimal case written
here of sgl-kernel's moe_align_block_size_kernel: `expert_ids[i]` for i below a total it summed
into shared memory (a prefix of block-rounded counts of its input's values). How long the caller
makes `expert_ids` (a padding rule in Python) no C++ states: a spec sized by names left it unwritten
or overran it, so it is refused, with the store and the buffer its position was read from."""
from astra_cuda import api
from astra_cuda.infer import data_positions
from astra_cuda.model import source

ALIGN = (
    "__global__ void align(const int* ids, int* expert_ids, int* total_out, int experts, int block_size, int numel) {\n"
    "  __shared__ int counts[1024];\n  __shared__ int total;\n"
    "  if (threadIdx.x < experts) counts[threadIdx.x] = 0;\n  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < numel; i += blockDim.x) atomicAdd(&counts[ids[i]], 1);\n  __syncthreads();\n"
    "  if (threadIdx.x == 0) {\n    int s = 0;\n"
    "    for (int e = 0; e < experts; ++e) s += (counts[e] + block_size - 1) / block_size * block_size;\n"
    "    total = s;\n    *total_out = s;\n  }\n  __syncthreads();\n"
    "  const int blocks = total / block_size;\n"
    "  for (int i = threadIdx.x; i < blocks; i += blockDim.x) expert_ids[i] = i % experts;\n}\n")


def test_stores_below_a_total_the_kernel_summed_are_found():
    k = source.parse(ALIGN).kernel("align")
    found = data_positions.data_placed(k, {}, {"expert_ids", "total_out"})
    assert set(found) == {"expert_ids"} and "`total`" in found["expert_ids"]   # `*total_out = s`: no position


def test_an_output_placed_by_the_kernels_own_total_is_refused(project):
    path = project("align.cu", ALIGN + "void run(const int* ids, int* e, int* t, int n) { align<<<1, 1024>>>(ids, e, t,"
                   " 64, 16, n); }\n")
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "align", run=False)
    assert not p.valid
    assert any(x.startswith("cannot be inferred: `expert_ids` is written at positions the kernel computes")
               for x in p.problems), p.problems


def test_a_fill_from_a_computed_start_up_to_a_size_is_bounded():
    # vLLM's `for (i = cumsum[E] / block_size + tid; i < max_blocks; ...) expert_ids[i] = -1`: only the
    # start is the kernel's own; the size bounds every store
    src = ("__global__ void fill(int* cumsum, int* out, int e, int max_blocks) {\n  cumsum[e] = 7;\n"
           "  for (int i = cumsum[e] + threadIdx.x; i < max_blocks; i += blockDim.x) out[i] = -1;\n}\n")
    assert data_positions.data_placed(source.parse(src).kernel("fill"), {}, {"out", "cumsum"}) == {}
    # a scatter through an input's indices is no position of the kernel's own (the spec draws them)
    src = "__global__ void scatter(const int* idx, float* out, int n) { out[idx[threadIdx.x]] = 1.f; }\n"
    assert data_positions.data_placed(source.parse(src).kernel("scatter"), {}, {"out"}) == {}
