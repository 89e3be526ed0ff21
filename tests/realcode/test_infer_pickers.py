"""Issue 25: a kernel launched through the pointer a picker returns, where the picker's returns
are written by a macro of the file and each is taken under an `if` over the picker's argument —
a minimal case written here of what exllamav2's rms_norm_kernel showed (no launch found: grid
and block guessed, the instance's row limit unknown), with its `void*` rows cast to float or half
by flags and a loop left by `break`."""
from astra_cuda import api
from astra_cuda.model import access, source, spec

PICKED = (
    "#define NUM_THREADS 256\n#define DIVIDE(x, size) (((x) + (size) - 1) / (size))\n"
    "typedef void (*fp_norm)(const void*, void*, const int, const int, const bool);\n"
    "template <int blocks_per_warp>\n"
    "__global__ void norm(const void* x, void* y, const int rows, const int dim, const bool fp32) {\n"
    "  int row = blockIdx.x;\n"
    "  for (int i = 0; i < blocks_per_warp; i++) {\n"
    "    int column = threadIdx.x + NUM_THREADS * i;\n    if (column >= dim / 2) break;\n"
    "    if (fp32) ((float2*)(((float*)y) + row * dim))[column] = ((const float2*)(((const float*)x) + row * dim))[column];\n"
    "    else ((half2*)(((half*)y) + row * dim))[column] = ((const half2*)(((const half*)x) + row * dim))[column];\n"
    "  }\n}\n"
    "#define instance(bpw) \\\n    if (blocks_per_warp == bpw) return norm<bpw>\n"
    "fp_norm pick_norm(const int blocks_per_warp) {\n  instance(1);\n  instance(2);\n  instance(4);\n"
    "  return NULL;\n}\n"
    "void norm_cuda(const void* x, void* y, int rows, int dim, bool fp32) {\n"
    "  dim3 blockDim, gridDim;\n  blockDim.x = NUM_THREADS;\n  gridDim.x = rows;\n"
    "  int blocks_per_warp = DIVIDE(dim, NUM_THREADS * 2);\n"
    "  fp_norm kernel = pick_norm(blocks_per_warp);\n"
    "  kernel<<<gridDim, blockDim>>>(x, y, rows, dim, fp32);\n}\n")


def test_a_picker_whose_returns_a_macro_writes_launches_under_its_condition(project):
    path = project("n.cu", PICKED)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "norm", run=False)
    assert p.valid, p.problems
    k = source.parse(PICKED).kernel("norm")
    m = source.parse(PICKED[:k.span.start_byte] + p.comment + PICKED[k.span.start_byte:])
    s = spec.load(m.kernel("norm"), m)
    assert s.grid == ("rows",) and s.block == ("256",) and s.instantiate == "<1>"
    # the instance <1> is the one the launcher picks where DIVIDE(dim, 512) == 1: rows of at most 512
    assert s.cases() and all(c["dim"] <= 512 for c in s.cases())
    # the `void*` rows are read as the widest type the kernel casts them to, one row of `dim` each
    assert s.args["x"].dtype.name == "float" and s.args["x"].shape == ("rows", "dim")
    assert s.args["y"].dtype.name == "float" and s.args["y"].shape == ("rows", "dim") and s.args["y"].output


def test_a_break_ends_the_iteration_for_what_follows_it():
    k = source.parse("__global__ void k(float* out, int n) {\n"
                     "  for (int i = 0; i < 4; i++) {\n    int c = threadIdx.x + 64 * i;\n"
                     "    if (c >= n) break;\n    out[c] = 0.0f;\n  }\n}\n").kernel("k")
    facts = access.analyse(k, {"n": 100}, (1, 1, 1), (64, 1, 1), {"out": 4}, set(), 100, {})
    assert facts.uses["out"].hi == 99


def test_a_void_slot_an_atomic_updates_is_one_value_of_its_type(project):
    text = ("__global__ void absmax(const float* x, void* amax, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (i < n) atomicMax((int*)amax, __float_as_int(fabsf(x[i])));\n}\n"
            "void absmax_cuda(const float* x, void* amax, int n) { absmax<<<(n + 255) / 256, 256>>>(x, amax, n); }\n")
    path = project("a.cu", text)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "absmax", run=False)
    k = source.parse(text).kernel("absmax")
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    s = spec.load(m.kernel("absmax"), m)
    assert s.args["amax"].dtype.name == "int32" and s.args["amax"].shape == ("1",) and s.args["amax"].inout
