"""Issue 25: a pointer parameter moved to its block's row once (`input += blockIdx.x * classes`,
apex xentropy) is read from there, and an index the kernel loads from its labels into that row
(`input[labels[row]]`) is drawn within the row, not from a table of its own."""
from astra_cuda import api
from astra_cuda.model import access, access_values, source

from .conftest import needs_gxx

XENT = ("#include <cstdint>\n"
        "__global__ void xent(float* losses, float* input, int64_t* labels, int64_t classes) {\n"
        "  input += blockIdx.x * classes;\n"
        "  int64_t label = labels[blockIdx.x];\n"
        "  float m = 0;\n"
        "  for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) m += input[i];\n"
        "  if (threadIdx.x == 0) losses[blockIdx.x] = m - input[label];\n}\n"
        "void run(float* l, float* in, int64_t* lab, int64_t rows, int64_t classes) {\n"
        "  xent<<<rows, 128>>>(l, in, lab, classes);\n}\n")


def _reach(body: str, name: str = "p") -> access_values.Use:
    k = source.parse(f"__global__ void k(float* p, int n) {{\n{body}\n}}\n").kernel("k")
    return access.analyse(k, {"n": 100}, [5, 1, 1], [32, 1, 1], {"p": 4}, set(), 7, {}).uses[name]


def test_a_pointer_moved_once_before_any_loop_is_read_from_its_new_start():
    assert _reach("p += blockIdx.x * n;\nfloat x = p[threadIdx.x];").hi == 4 * 100 + 31


def test_a_pointer_stepped_in_a_loop_is_not_bounded_by_one_step():
    # the body is walked once: one step would undercount how far the loop moves it. Where the trips
    # are fixed at these sizes (100), each trip starts it afresh: it reaches the last trip's row
    fixed = _reach("for (int i = 0; i < n; ++i) { p += n; p[0] = 1.0f; }")
    assert fixed.hi == 100 * 100 and not fixed.unknown
    # where they are not (a stride loop from each thread's index), it is unknown
    assert _reach("for (int i = threadIdx.x; i < n; i += blockDim.x) { p += n; p[0] = 1.0f; }").unknown


def test_labels_index_within_the_row_the_pointer_was_moved_to(project):
    path = project("k.cu", XENT)
    p = api.infer_spec(api.snapshot(XENT, str(path)), "xent", run=False)
    assert 'input   = { type = "float", shape = ["rows", "classes"] }' in p.comment, p.comment
    assert 'init = "randint(0, classes)"' in p.comment, p.comment


@needs_gxx
def test_the_row_pointer_kernel_passes_as_inferred(project):
    path = project("k.cu", XENT)
    p = api.infer_spec(api.snapshot(XENT, str(path)), "xent", run=False)
    at = XENT.index("__global__")
    text = XENT[:at] + p.comment + XENT[at:]
    (v,) = api.check(api.snapshot(text, str(path)), "xent", backend="cpu", quick=True, pin_first=False)
    assert v.passed, v.human()


def test_a_pointer_with_an_unbounded_access_is_measured_by_the_others(project):
    """`tmp[best.p] = -inf` (an index a reduction returns): unbounded, while every other access
    of `tmp` is a row of `vocab` per block (FasterTransformer topk_stage1's tmp_log_probs)."""
    src = ("struct Best { float v; int p; };\n"
           "__global__ void pick(float* tmp, int* ids, const int k, const int vocab) {\n"
           "  Best best{-1e30f, 0};\n"
           "  for (int e = threadIdx.x; e < vocab; e += blockDim.x)\n"
           "    if (tmp[blockIdx.x * vocab + e] > best.v) best = Best{tmp[blockIdx.x * vocab + e], e};\n"
           "  if (threadIdx.x == 0) { ids[blockIdx.x * k] = best.p; tmp[best.p] = -1e30f; }\n}\n"
           "void run(float* t, int* ids, int batch, int k, int vocab) { pick<<<batch, 1>>>(t, ids, k, vocab); }\n")
    path = project("k.cu", src)
    p = api.infer_spec(api.snapshot(src, str(path)), "pick", run=False)
    assert 'tmp   = { type = "float", shape = ["batch", "vocab"]' in p.comment, p.comment
    assert any("could not be bounded" in n for n in p.notes)


def test_one_row_of_a_size_per_block_under_a_guessed_launch_and_its_shared_memory(project):
    """apex xentropy: the grid counts rows in a host loop, the block comes from a host helper and
    the shared memory is `2 * block.x * sizeof(float)`: none read. The guessed grid is one block
    per row of `classes`, and the shared memory a slot per thread of the guessed block."""
    src = ("#include <cstdint>\n"
           "unsigned pick_block(int64_t n) { unsigned b = 1; while (b < n / 2 && b < 1024) b *= 2; return b; }\n"
           "__global__ void xent(float* losses, float* input, int64_t* labels, int64_t classes) {\n"
           "  extern __shared__ float sdata[];\n"
           "  input += blockIdx.x * classes;\n"
           "  float m = 0;\n"
           "  for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) m += input[i];\n"
           "  sdata[threadIdx.x] = m;\n  __syncthreads();\n"
           "  if (threadIdx.x == 0) losses[blockIdx.x] = sdata[0] - input[labels[blockIdx.x]];\n}\n"
           "void run(float* l, float* in, int64_t* lab, const int64_t* dims, int ndim, int64_t classes) {\n"
           "  int64_t rows = 1;\n  for (int i = 0; i < ndim - 1; ++i) rows *= dims[i];\n"
           "  dim3 grid(rows);\n  dim3 block = pick_block(classes);\n"
           "  xent<<<grid, block, 2 * block.x * sizeof(float)>>>(l, in, lab, classes);\n}\n")
    path = project("k.cu", src)
    p = api.infer_spec(api.snapshot(src, str(path)), "xent", run=False)
    g = p.comment.split('grid = ["', 1)[1].split('"', 1)[0]
    assert f'input   = {{ type = "float", shape = ["{g}", "classes"] }}' in p.comment, p.comment
    assert 'shared_mem = "' in p.comment and 'init = "randint(0, classes)"' in p.comment, p.comment
