"""Issue 25: buffers reached through a view object (a small class of the project built over a
kernel pointer and its sizes, whose methods index it) — minimal cases written here of what
exllamav2's `MatrixView_half_rw` kernels showed: shapes unread and the written buffer taken as an
input, because the accesses were inside the class's methods."""
from astra_cuda import api
from astra_cuda.model import access, source, spec

VIEW_H = (
    "#pragma once\n"
    "class View {\npublic:\n  const half* data;\n  const int height;\n  const int width;\n"
    "  __device__ __forceinline__ View(const half* data, const int height, const int width)\n"
    "    : data(data), height(height), width(width) { }\n"
    "  __device__ __forceinline__ half2 item_half2(int row, int column) const\n"
    "    { return ((half2*)data)[(row * width + column) / 2]; }\n};\n"
    "class View_rw {\npublic:\n  half* data;\n  const int height;\n  const int width;\n"
    "  __device__ __forceinline__ View_rw(half* data, const int height, const int width)\n"
    "    : data(data), height(height), width(width) { }\n"
    "  __device__ __forceinline__ half* item_ptr(int row, int column) { return &data[row * width + column]; }\n"
    "  __device__ __forceinline__ void set_half2(int row, int column, half2 v)\n"
    "    { ((half2*)data)[(row * width + column) / 2] = v; }\n};\n")

ADD = (
    "#include <cuda_fp16.h>\n#include \"view.cuh\"\n"
    "#define THREADS_X 32\n#define THREADS_Y 16\n"
    "__global__ void vector_add(half* dest, const half* source, const int height, const int width) {\n"
    "  View_rw dest_(dest, height, width);\n  View source_(source, 1, width);\n"
    "  int x = blockIdx.x * THREADS_X * 2 + threadIdx.x * 2;\n  if (x >= width) return;\n"
    "  int y0 = blockIdx.y * THREADS_Y;\n  int y1 = min(y0 + THREADS_Y, height);\n"
    "  half2 v = source_.item_half2(0, x);\n"
    "  for (int y = y0; y < y1; ++y) {\n    half2* p = (half2*) dest_.item_ptr(y, x);\n"
    "    *p = __hadd2(v, *p);\n  }\n}\n"
    "void vector_add_cuda(half* dest, const half* source, int height, int width) {\n"
    "  dim3 grid((width + THREADS_X * 2 - 1) / (THREADS_X * 2), (height + THREADS_Y - 1) / THREADS_Y);\n"
    "  vector_add<<<grid, THREADS_X>>>(dest, source, height, width);\n}\n")

# the view's sizes and the thread's column come from a helper the kernel calls, with the file's constants
SCALE = (
    "#include <cuda_fp16.h>\n#include \"view.cuh\"\n"
    "const int COLS_PER_BLOCK = 32;\nconst int MAX_ROWS = 65536;\n"
    "__device__ void scale_row(half* x, const half* w, int rows, int dim) {\n"
    "  View_rw x_(x, MAX_ROWS, dim);\n  View w_(w, 1, dim);\n"
    "  int column = (blockIdx.x * COLS_PER_BLOCK + threadIdx.x) * 2;\n  if (column >= dim) return;\n"
    "  int row = blockIdx.y;\n"
    "  x_.set_half2(row, column, __hmul2(w_.item_half2(0, column), w_.item_half2(0, column)));\n}\n"
    "__global__ void scale_rows(half* x, const half* w, int rows, int dim) { scale_row(x, w, rows, dim); }\n"
    "void scale_rows_cuda(half* x, const half* w, int rows, int dim) {\n"
    "  dim3 grid((dim / 2 + COLS_PER_BLOCK - 1) / COLS_PER_BLOCK, rows);\n"
    "  scale_rows<<<grid, COLS_PER_BLOCK>>>(x, w, rows, dim);\n}\n")

# the views are handed to a helper that reads and writes through their methods
PASSED = (
    "#include <cuda_fp16.h>\n#include \"view.cuh\"\n"
    "__device__ void add_row(View_rw& out_, const View& in_, int row, int column) {\n"
    "  out_.set_half2(row, column, __hadd2(in_.item_half2(row, column), in_.item_half2(row, column)));\n}\n"
    "__global__ void double_rows(const half* in, half* out, int rows, int cols) {\n"
    "  View in_(in, rows, cols);\n  View_rw out_(out, rows, cols);\n"
    "  int column = (blockIdx.x * blockDim.x + threadIdx.x) * 2;\n  if (column >= cols) return;\n"
    "  add_row(out_, in_, blockIdx.y, column);\n}\n"
    "void double_rows_cuda(const half* in, half* out, int rows, int cols) {\n"
    "  double_rows<<<dim3((cols / 2 + 127) / 128, rows), 128>>>(in, out, rows, cols);\n}\n")


def _inferred(project, text, kernel):
    project("view.cuh", VIEW_H)
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


def test_a_buffer_read_and_written_through_a_view_objects_methods(project):
    s, p = _inferred(project, ADD, "vector_add")
    assert s.args["dest"].shape == ("height", "width") and s.args["dest"].inout
    assert s.args["source"].shape == ("width",) and not s.args["source"].output
    assert not any("could not be read" in n for n in p.notes)


def test_constants_a_called_helper_uses_are_known(project):
    s, _ = _inferred(project, SCALE, "scale_rows")
    # the column reaches `dim` only with COLS_PER_BLOCK, named in the helper and not in the kernel
    assert s.args["x"].shape == ("rows", "dim") and s.args["x"].output
    assert s.args["w"].shape == ("dim",)


def test_an_atomic_on_an_elements_address_reads_and_writes_it():
    k = source.parse("__global__ void rowsum(float* out, const float* in, int cols) {\n"
                     "  float s = in[blockIdx.x * cols + threadIdx.x];\n"
                     "  atomicAdd(&out[blockIdx.x], s);\n}\n").kernel("rowsum")
    facts = access.analyse(k, {"cols": 32}, (4, 1, 1), (32, 1, 1), {"out": 4, "in": 4}, set(), 100, {})
    # `&out[b]` is an address: atomicAdd reads and writes there, up to the last block's element
    assert facts.uses["out"].read and facts.uses["out"].written and facts.uses["out"].hi == 3


def test_a_view_handed_to_a_helper_is_followed_there(project):
    s, _ = _inferred(project, PASSED, "double_rows")
    assert s.args["in"].shape == ("rows", "cols") and not s.args["in"].output
    assert s.args["out"].shape == ("rows", "cols") and s.args["out"].output and not s.args["out"].inout


# a method that reaches the data through another method of the same object, called unqualified
# (vLLM gptq's `item4_f` calls `item_ptr`), and a sum added atomically into the written view's
# elements: read before written, so in/out
OWN_METHOD = (
    "#include <cuda_fp16.h>\n#include \"view.cuh\"\n"
    "class Pairs {\npublic:\n  const half* data;\n  const int width;\n"
    "  __device__ Pairs(const half* data, const int width) : data(data), width(width) { }\n"
    "  __device__ const half* at(int row, int column) const { return &data[row * width + column]; }\n"
    "  __device__ void pair_f(float (&v)[2], int row, int column) const {\n"
    "    half2* p = (half2*)at(row, column);\n    v[0] = __low2float(p[0]);\n    v[1] = __high2float(p[0]);\n  }\n};\n"
    "__global__ void add_scaled(const half* s, half* c, int rows, int cols) {\n"
    "  Pairs s_(s, cols);\n  View_rw c_(c, rows, cols);\n"
    "  int n = (blockIdx.x * blockDim.x + threadIdx.x) * 2;\n  if (n >= cols) return;\n"
    "  float v[2];\n  s_.pair_f(v, blockIdx.y, n);\n"
    "  atomicAdd((half2*)c_.item_ptr(blockIdx.y, n), __floats2half2_rn(v[0], v[1]));\n}\n"
    "void add_scaled_cuda(const half* s, half* c, int rows, int cols) {\n"
    "  add_scaled<<<dim3((cols / 2 + 127) / 128, rows), 128>>>(s, c, rows, cols);\n}\n")


def test_a_method_calling_another_method_of_its_object_is_followed(project):
    s, p = _inferred(project, OWN_METHOD, "add_scaled")
    assert s.args["s"].shape == ("rows", "cols") and not s.args["s"].output
    assert s.args["c"].shape == ("rows", "cols") and s.args["c"].inout
    assert not any("could not be read" in n for n in p.notes)
