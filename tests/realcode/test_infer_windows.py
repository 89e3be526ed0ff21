"""Issue 25: a launch over a window [min, max) of each row (`(max - min) / 8` blocks), with size
parameters named like the spec's functions — a minimal case written here of what exllamav2's
fp16_to_fp8_kernel showed: `min` and `max` read as functions, so no test size gave a launch."""
from astra_cuda import api
from astra_cuda.model import exprs, source, spec

WINDOW = (
    "#define THREADS 32\n#define DIVIDE(x, size) (((x) + (size) - 1) / (size))\n"
    "__global__ void convert(const half* pIn, unsigned char* pOut, int stride, int height, int min, int max) {\n"
    "  int x = min + (blockIdx.x * blockDim.x + threadIdx.x) * 8;\n  int y = blockIdx.y;\n"
    "  if (x >= max) return;\n"
    "  int4* in_ptr = (int4*) (pIn + y * stride + x);\n  int2* out_ptr = (int2*) (pOut + y * stride + x);\n"
    "  int4 in = *in_ptr;\n  *out_ptr = make_int2(in.x, in.z);\n}\n"
    "void convert_cuda(const half* pIn, unsigned char* pOut, int stride, int height, int offset, int width) {\n"
    "  int min = offset;\n  int max = offset + width;\n  min = min / 8 * 8;\n"
    "  max = min + (max - min + 7) / 8 * 8;\n"
    "  dim3 blockDim, gridDim;\n  blockDim.x = THREADS;\n"
    "  gridDim.x = DIVIDE((max - min) / 8, THREADS);\n  gridDim.y = height;\n"
    "  convert<<<gridDim, blockDim>>>(pIn, pOut, stride, height, min, max);\n}\n")


def test_sizes_named_like_functions_are_sizes_where_they_are_not_called():
    assert exprs.names("(max - min) / 8 + min(n, 4)") == {"max", "min", "n"}
    assert exprs.evaluate_int("max - min(min, 3)", {"max": 10, "min": 5}) == 7


def test_a_launch_over_a_window_of_each_row(project):
    path = project("w.cu", WINDOW)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "convert", run=False)
    assert p.valid, p.problems
    k = source.parse(WINDOW).kernel("convert")
    m = source.parse(WINDOW[:k.span.start_byte] + p.comment + WINDOW[k.span.start_byte:])
    s = spec.load(m.kernel("convert"), m)
    # the row stride is the window's end; the window starts at the row's start in the tests
    assert s.args["stride"].value == "max"
    assert s.args["pIn"].shape == ("height", "max") and s.args["pOut"].shape == ("height", "max")
    assert "max > min" in s.require
    cases = s.cases()
    assert cases and all(c["min"] == 0 and c["max"] % 8 == 0 and c["max"] >= 8 for c in cases)
