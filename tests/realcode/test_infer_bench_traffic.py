"""Issue 25: every inferred bench size of a memory-bound kernel moves >=64 MiB by the profiler's
own byte count (`profiler.model.floor_bytes`), or is the size the program itself uses."""
from astra_cuda import api
from astra_cuda.model import source, spec
from astra_cuda.profiler.model import floor_bytes

LINE = 64 << 20
SCALE = "__global__ void scale(float* out, const float* in, int n) {\n" \
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = 2.0f * in[i];\n}\n"


def proposed(project, rel: str, text: str, kernel: str):
    path = project(rel, text)
    p = api.infer_spec(api.snapshot(text, str(path)), kernel, run=False)   # what is read, not run
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p.notes   # raises unless the validator accepts it


def test_a_flat_elementwise_kernel_is_timed_past_the_line(project):
    s, _ = proposed(project, "flat.cu", SCALE + "void run(float* o, const float* i, int n) {\n"
                                               "  scale<<<(n + 255) / 256, 256>>>(o, i, n);\n}\n", "scale")
    cases = s.bench_cases()
    assert cases and all(floor_bytes(s, c) >= LINE for c in cases)


def test_the_programs_own_size_moving_enough_is_timed_as_it_is(project):
    # 2^24 floats in and out: 128 MiB, past the line but short of the 256 MiB a guessed size gets
    s, notes = proposed(project, "own.cu", SCALE + "int main() {\n  int n = 16777216;\n"
                                                  "  scale<<<(n + 255) / 256, 256>>>(0, 0, n);\n}\n", "scale")
    assert any("the program itself uses 16777216" in n for n in notes)
    assert [c["n"] for c in s.bench_cases()] == [16777216]
    assert floor_bytes(s, s.bench_cases()[0]) >= LINE


def test_a_bounded_row_count_grows_the_row_length_instead(project):
    # the launcher caps the rows (one block each, `require = ["nrows <= 64"]`): the bytes come from
    # the row length
    text = ("__global__ void rows(float* out, const float* in, int cols) {\n"
            "  for (int j = threadIdx.x; j < cols; j += blockDim.x)\n"
            "    out[blockIdx.x * cols + j] = in[blockIdx.x * cols + j] + 1.0f;\n}\n"
            "void run(float* o, const float* i, int nrows, int cols) {\n"
            "  assert(nrows <= 64);\n  rows<<<nrows, 128>>>(o, i, cols);\n}\n")
    s, _ = proposed(project, "rows.cu", text, "rows")
    cases = s.bench_cases()
    assert cases and all(floor_bytes(s, c) >= LINE for c in cases), (s.require, cases)
