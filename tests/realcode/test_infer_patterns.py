"""Issue 25: patterns of public kernels that inference got wrong, each as a minimal case written
here: per-block partial results sized by the grid, the launcher's own asserts as requirements."""
from astra_cuda import api, source, spec


def infer(project, rel, kernel):
    path = project.root / rel
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)   # what is read, not run
    text = path.read_text()
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p   # raises unless the validator accepts it


def test_per_block_partial_results_are_one_row_per_block_of_the_grid(project):
    project("hist.cu", "#define BINS 64\n"
                       "__global__ void partial_hist(unsigned* partial, const unsigned* data, unsigned n) {\n"
                       "  __shared__ unsigned h[BINS];\n  if (threadIdx.x < BINS) h[threadIdx.x] = 0;\n"
                       "  __syncthreads();\n"
                       "  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
                       "    atomicAdd(&h[data[i] % BINS], 1u);\n  __syncthreads();\n"
                       "  if (threadIdx.x < BINS) partial[blockIdx.x * BINS + threadIdx.x] = h[threadIdx.x];\n}\n"
                       "void run(unsigned* p, const unsigned* d, unsigned n, unsigned blocks) {\n"
                       "  partial_hist<<<blocks, 128>>>(p, d, n);\n}\n")
    s, p = infer(project, "hist.cu", "partial_hist")
    assert s.args["partial"].shape == (s.grid[0], "64") and s.args["data"].shape == ("n",)


def test_the_launchers_asserts_are_required_and_the_bench_meets_them(project):
    project("scan.cu", "#include <cassert>\n#define TB 256\n"
                       "__global__ void tile_scan(unsigned* dst, const unsigned* src, unsigned len) {\n"
                       "  __shared__ unsigned s[TB];\n  unsigned pos = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  s[threadIdx.x % len] = src[pos];\n  __syncthreads();\n  dst[pos] = s[threadIdx.x % len];\n}\n"
                       "void scan(unsigned* d, const unsigned* s, unsigned batch, unsigned len) {\n"
                       "  assert(len >= 4 && (len <= TB));\n  assert((batch * len) % TB == 0);\n"
                       "  tile_scan<<<batch * len / TB, TB>>>(d, s, len);\n}\n")
    s, p = infer(project, "scan.cu", "tile_scan")
    assert {"len >= 4", "len <= 256", "batch * len % 256 == 0"} <= set(s.require)
    assert s.args["dst"].shape in (("batch", "len"), (s.grid[0], "256"))
    assert s.bench_cases() and all(c["len"] <= 256 for c in s.bench_cases())
