"""Issue 25: warp-per-row softmax launchers (apex's megatron softmax) — minimal cases written here.
The launcher picks an instance per range of row lengths with a helper of its own (`switch
(log2_ceil(n))`), sizes its block from that case and the warp width (`C10_WARP_SIZE`, a torch macro
inference does not read), passes the rows its grid covers as a product, and the kernel guards a
local (`tid + it * 32 < n`) whose terms reach the address apart (`src += tid; src[it * 32]`)."""
from astra_cuda import api
from astra_cuda.infer import hostcalls
from astra_cuda.infer.program import function_nodes
from astra_cuda.model import access, exprs, source, spec

LOG2 = ("int log2_ceil(int value) {\n  int log2_value = 0;\n"
        "  while ((1 << log2_value) < value) ++log2_value;\n  return log2_value;\n}\n")

KERNEL = """
template <typename T, int log2_elements>
__global__ void rows_softmax(T* dst, const T* src, int micro_batch_size, int element_count) {
  constexpr int pow2 = 1 << log2_elements;
  constexpr int WARP_SIZE = (pow2 < C10_WARP_SIZE) ? pow2 : C10_WARP_SIZE;
  constexpr int ITERATIONS = pow2 / WARP_SIZE;
  constexpr int BATCH = (pow2 <= 128) ? 2 : 1;
  long int first = (blockDim.y * (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) + threadIdx.y) * BATCH;
  int local_batches = micro_batch_size - first;
  if (local_batches > BATCH) local_batches = BATCH;
  src += first * element_count + threadIdx.x;
  dst += first * element_count + threadIdx.x;
  for (int i = 0; i < BATCH; ++i) {
    int count = (i >= local_batches) ? 0 : element_count;
    for (int it = 0; it < ITERATIONS; ++it) {
      int element_index = threadIdx.x + it * WARP_SIZE;
      if (element_index < count) dst[i * element_count + it * WARP_SIZE] = src[i * element_count + it * WARP_SIZE];
    }
  }
}
"""

LAUNCHER = """
template <typename T>
void launch_rows_softmax(T* dst, const T* src, int rows, int heads, int batches, int cols) {
  if (cols == 0) return;
  int log2_elements = log2_ceil(cols);
  const int pow2 = 1 << log2_elements;
  int batch_count = batches * heads * rows;
  int width = (pow2 < C10_WARP_SIZE) ? pow2 : C10_WARP_SIZE;
  int warps_per_block = 128 / width;
  int batches_per_block = warps_per_block * ((pow2 <= 128) ? 2 : 1);
  assert(rows % batches_per_block == 0);
  dim3 blocks(rows / batches_per_block, heads, batches);
  dim3 threads(width, warps_per_block, 1);
  switch (log2_elements) {
    case 0:
      rows_softmax<T, 0><<<blocks, threads>>>(dst, src, batch_count, cols);
      break;
    case 7:
      rows_softmax<T, 7><<<blocks, threads>>>(dst, src, batch_count, cols);
      break;
    case 10:
      rows_softmax<T, 10><<<blocks, threads>>>(dst, src, batch_count, cols);
      break;
    case 13:
      rows_softmax<T, 13><<<blocks, threads>>>(dst, src, batch_count, cols);
      break;
    default:
      break;
  }
}
template void launch_rows_softmax<float>(float*, const float*, int, int, int, int);
"""

FILE = "#include <assert.h>\n" + LOG2 + KERNEL + LAUNCHER


def test_a_small_integer_host_helper_is_run_for_the_sizes_each_of_its_values_takes():
    fn = function_nodes(LOG2)[0]
    assert [hostcalls.evaluate(fn, [n]) for n in (1, 2, 3, 32, 33, 4096)] == [0, 1, 2, 5, 6, 12]
    assert hostcalls.range_where(fn, "==", 12) == (2049, 4096)
    assert hostcalls.range_where(fn, "==", 0) == (1, 1)
    assert hostcalls.range_where(fn, "<=", 5) == (1, 32)
    # what it does not run (a call, a pointer) is no value, never a guess
    assert hostcalls.evaluate(function_nodes("int f(int n) { return g(n); }\n")[0], [3]) is None
    assert hostcalls.evaluate(function_nodes("int f(int n) { while (1) ++n; return n; }\n")[0], [3]) is None


def test_the_case_a_helper_picks_fixes_the_launch_and_requires_its_sizes(project):
    path = project("rows_softmax.cu", FILE)
    p = api.infer_spec(api.snapshot(FILE, str(path)), "rows_softmax", run=False)
    k = source.parse(FILE).kernel("rows_softmax")
    m = source.parse(FILE[:k.span.start_byte] + p.comment + FILE[k.span.start_byte:])
    s = spec.load(m.kernel("rows_softmax"), m)
    # of the cases, the one the most row lengths a test draws reach (`case 0` takes one length alone,
    # `case 13` only lengths above 4096)
    assert s.instantiate == "<float, 10>"
    assert {"element_count >= 513", "element_count <= 1024"} <= set(s.require)
    # inside `case 10:` the block is read with log2_elements 10 and a warp of 32 threads
    assert [int(b) for b in s.block] == [32, 4, 1]
    assert any("C10_WARP_SIZE" in n and "32" in n for n in p.notes)
    assert not any("`WARP_SIZE`" in n for n in p.notes)   # the kernel's own constexpr is its own
    # the rows the kernel is told of are those its grid covers, a product of the grid's sizes
    assert s.args["micro_batch_size"].value == "batches * heads * rows"
    assert any("rows %" in r for r in s.require)
    cases = s.cases()
    assert cases and all(513 <= c["element_count"] <= 1024 for c in cases)
    # the rows are read whole: every case's buffers hold exactly its rows
    for c in cases:
        rows = c["batches"] * c["heads"] * c["rows"]
        assert exprs.evaluate_int(" * ".join(f"({d})" for d in s.args["src"].shape), c) == rows * c["element_count"]


def test_a_guard_on_a_local_narrows_an_address_that_adds_its_terms_apart():
    k = source.parse(KERNEL).kernel("rows_softmax")
    for log2, batch, cols in ((10, 1, 600), (7, 2, 100)):
        inst = k.instantiated({"T": "float", "log2_elements": str(log2)})
        warps = 2 * 3 * 4 * 4   # grid (2, 3, 4) of 4 warps
        facts = access.analyse(inst, {"micro_batch_size": warps * batch, "element_count": cols}, (2, 3, 4),
                               (32, 4, 1), {"dst": 4, "src": 4}, set(), 100, {"C10_WARP_SIZE": 32, "log2_elements": log2})
        assert facts is not None
        assert facts.uses["src"].hi == facts.uses["dst"].hi == warps * batch * cols - 1


def test_a_helper_called_with_template_arguments_is_its_matching_specialization():
    # apex's `copy_vector<input_t, 4>`: the float2 copy of `<c10::Half, 4>`, not the first written
    text = """
template <typename D, int N> __device__ void copy_vec(D* dst, const D* src);
template <> __device__ void copy_vec<float, 1>(float* dst, const float* src) { *dst = *src; }
template <> __device__ void copy_vec<float, 4>(float* dst, const float* src) { *((float4*)dst) = *((float4*)src); }
template <typename T, int N>
__global__ void k(T* out, const T* in, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * N;
  if (i < n) copy_vec<T, N>(out + i, in + i);
}
"""
    k = source.parse(text).kernel("k")
    helpers = access.helpers_of([text])
    for n, packet in ((1, 1), (4, 4)):
        facts = access.analyse(k, {"n": 1024}, (1, 1, 1), (256, 1, 1), {"out": 4, "in": 4}, set(), 100, {"N": n},
                               helpers=helpers, type_bytes=lambda t: {"T": 4, "float": 4}.get(t.strip()))
        assert facts is not None and facts.uses["out"].packet == packet and facts.uses["out"].written


def test_an_array_object_the_kernel_indexes_is_a_tensor_accessor_buffer(project):
    # TGI's fused attention softmax takes torch's PackedTensorAccessor32 by value: assumed a float,
    # its proposal faulted on the GPU; then it was no proposal ("beyond the format"); the format
    # now gives it (`accessor = true`), each dimension measured apart (tests/realcode/test_infer_accessors)
    text = """
template <typename scalar_t>
__global__ void masked(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> scores,
                       torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> result, int rows, int cols) {
  int r = blockIdx.x, c = threadIdx.x;
  if (r < rows && c < cols) result[r][c] = scores[r][c];
}
"""
    path = project("accessor.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "masked", run=False)
    assert p.problems == [], p.problems
    assert 'result = { type = "float", shape = ["rows", "cols"], output = true, accessor = true }' in p.comment


def test_a_guard_in_an_else_branch_still_narrows_the_address():
    # apex's upper-triangular store: `if (idx < local_seq) ... else if (idx < n) zero(dst + it * 32)`
    text = """
__global__ void k(float* dst, int n) {
  dst += blockIdx.x * n + threadIdx.x;
  for (int it = 0; it < 4; ++it) {
    int idx = threadIdx.x + it * 32;
    if (idx < blockIdx.x + 1) dst[it * 32] = 1.0f;
    else if (idx < n) dst[it * 32] = 0.0f;
  }
}
"""
    facts = access.analyse(source.parse(text).kernel("k"), {"n": 100}, (100, 1, 1), (32, 1, 1), {"dst": 4}, set(),
                           100, {})
    assert facts is not None and facts.uses["dst"].hi == 100 * 100 - 1


def test_a_launcher_parameter_every_caller_passes_as_another_is_that_size(project):
    # apex's `dispatch_…(dst, src, scale, seq_len, seq_len, attn_batches)`: the row stride is the row
    # length; the call is in the .cu that includes the kernel's header (it launches nothing itself)
    header = """#pragma once
__global__ void strided(float* dst, const float* src, int n, int stride) {
  int row = blockIdx.x, i = threadIdx.x;
  if (i < n) dst[row * stride + i] = src[row * stride + i];
}
inline void launch_strided(float* dst, const float* src, int rows, int n, int stride) {
  strided<<<rows, 128>>>(dst, src, n, stride);
}
"""
    unit = '#include "strided.cuh"\nvoid run(float* d, const float* s, int rows, int len) {\n' \
           '  launch_strided(d, s, rows, len, len);\n}\n'
    project("strided_cuda.cu", unit)
    path = project("strided.cuh", header)
    p = api.infer_spec(api.snapshot(header, str(path)), "strided", run=False)
    k = source.parse(header).kernel("strided")
    m = source.parse(header[:k.span.start_byte] + p.comment + header[k.span.start_byte:])
    s = spec.load(m.kernel("strided"), m)
    assert s.args["stride"].value == "n"


def test_a_square_of_a_size_is_a_shape_and_too_many_bytes_shrink_what_require_lets_shrink():
    from astra_cuda.infer import shape_fits, sizes
    # apex's upper-triangular softmax reads [batches, seq, seq]
    measured = [({"b": b, "s": s}, b * s * s) for b, s in ((3, 37), (5, 53), (2, 29))]
    assert shape_fits.fit_product(measured, ["b", "s"]) == ["b", "s", "s"]
    # too large at every test value: the row length is held in 2049..4096, the batch count shrinks
    d = sizes.Draft(["s", "b / 4"], ["32", "4"], None, ["b % 4 == 0", "s >= 2049", "s <= 4096"],
                    {"b": [100, 4096], "s": [2049, 4096]}, {}, {"x": (["b", "s", "s"], 4, False)})
    assert sizes.repair(d, [])
    assert all(v % 4 == 0 for v in d.sizes["b"]) and all(2049 <= v <= 4096 for v in d.sizes["s"])


def test_a_case_of_a_helper_not_read_is_not_taken_for_its_value(project):
    # TransformerEngine's log2_ceil lives in a header inference does not read: `case 0` then says
    # nothing of the row length, and its value 0 does not size the block (a warp of one thread)
    text = "#include <assert.h>\nint log2_ceil(int value);\n" + KERNEL + LAUNCHER
    path = project("rows_softmax_unread.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "rows_softmax", run=False)
    assert 'block = ["1"' not in p.comment and "element_count >=" not in p.comment


def test_a_comparison_with_a_parameter_is_not_decided_by_its_probe_value():
    # FasterTransformer's `int8_mode == 2 ? *scale : 0.0f` with the mode taken 0: still read
    text = "__global__ void k(float* out, const float* scale, int n, int mode) {\n" \
           "  float s = mode == 2 ? *scale : 0.0f;\n  if (threadIdx.x < n) out[threadIdx.x] = s;\n}\n"
    facts = access.analyse(source.parse(text).kernel("k"), {"n": 32, "mode": 0}, (1, 1, 1), (32, 1, 1),
                           {"out": 4, "scale": 4}, set(), 100, {"mode": 0})
    assert facts is not None and facts.uses["scale"].read


def test_a_helper_a_project_header_defines_is_run_too(project):
    # TransformerEngine's launcher calls the log2_ceil of its common.h
    project("common.h", "#pragma once\ninline " + LOG2)
    text = '#include <assert.h>\n#include "common.h"\n' + KERNEL + LAUNCHER
    path = project("rows_softmax_te.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "rows_softmax", run=False)
    assert '"<float, 10>"' in p.comment and "element_count >= 513" in p.comment


def test_the_warp_width_macro_as_a_dim3_constructor_argument_is_the_warp_width():
    # apex's fused rope launcher: `dim3 threads(C10_WARP_SIZE, warps_per_block);` parses as a function
    # declaration whose parameter types are the names, so the macro was not seen and became a size
    text = ("template <typename T>\n"
            "__global__ void rope_like(const T* src, T* dst, int h, int d) {\n"
            "  int row = blockIdx.x * gridDim.y + blockIdx.y;\n"
            "  for (int i = threadIdx.y; i < h; i += blockDim.y)\n"
            "    for (int j = threadIdx.x; j < d; j += blockDim.x)\n"
            "      dst[(row * h + i) * d + j] = src[(row * h + i) * d + j] * 2;\n"
            "}\n"
            "template <typename T>\n"
            "void launch_rope_like(const T* src, T* dst, int s, int b, int h, int d) {\n"
            "  int warps_per_block = h < 16 ? 4 : 8;\n"
            "  dim3 blocks(s, b);\n"
            "  dim3 threads(C10_WARP_SIZE, warps_per_block);\n"
            "  rope_like<<<blocks, threads>>>(src, dst, h, d);\n"
            "}\n")
    m = source.parse(text)
    from astra_cuda import infer
    prop = infer.infer(m.kernel("rope_like"), m)
    assert 'block = ["32", "4 if h < 16 else 8"]' in prop.comment and "C10_WARP_SIZE" not in prop.comment
    assert any("`C10_WARP_SIZE` is defined in no file" in n for n in prop.notes)
