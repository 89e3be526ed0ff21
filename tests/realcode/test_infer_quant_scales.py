"""Issue 25: a quantizer's one-value scale is drawn from what the code shows (FasterTransformer's
int8 `quantized_kernel`: `const float scale = __ldg(scale_ptr); tmp.x = float_to_int8_rn(x * scale)`).
Drawn like the data, the scale is near zero in some draws and rounds every int8 output to 0; which
draft was proposed then hung on a trial run's luck."""
from astra_cuda.infer import scales

from .test_infer_asm_accesses import infer

TO_I8 = ("__device__ inline signed char to_i8(float x) {\n"
         "  float r = rintf(x); return (signed char)(r > 127.f ? 127.f : r < -128.f ? -128.f : r);\n}\n")


def test_a_scale_multiplying_data_into_int8_is_drawn_far_above_it(project):
    s, p = infer(project, "q.cu", TO_I8 +
                 "__global__ void quantize(char4* dst, const float4* src, const int n4, const float* scale_ptr) {\n"
                 "  int tid = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (tid < n4) {\n"
                 "    const float scale = __ldg(scale_ptr);\n"
                 "    const float4 v = __ldg(src + tid);\n"
                 "    char4 t;\n"
                 "    t.x = to_i8(v.x * scale); t.y = to_i8(v.y * scale);\n"
                 "    t.z = to_i8(v.z * scale); t.w = to_i8(v.w * scale);\n"
                 "    dst[tid] = t;\n  }\n}\n"
                 "void run(signed char* d, const float* s, int size, const float* sc) {\n"
                 "  quantize<<<(size + 255) / 256, 64>>>((char4*)d, (const float4*)s, size / 4, sc);\n}\n",
                 "quantize")
    assert s.args["scale_ptr"].init.params == (1000.0, 10000.0) and scales.MULTIPLIER in p.comment, p.comment


def test_a_scale_dividing_data_into_int8_is_drawn_far_below_it(project):
    s, p = infer(project, "qd.cu", TO_I8 +
                 "__global__ void quantize_div(signed char* out, const float* x, const float* scale, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) out[i] = to_i8(x[i] / scale[0]);\n}\n"
                 "void run(signed char* o, const float* x, const float* s, int n) {\n"
                 "  quantize_div<<<(n + 127) / 128, 128>>>(o, x, s, n);\n}\n",
                 "quantize_div")
    assert s.args["scale"].init.params == (0.0001, 0.001) and scales.DIVISOR in p.comment, p.comment


def test_a_one_value_factor_of_a_float_output_is_drawn_like_the_data(project):
    """No integer output: nothing is rounded away, so the factor keeps the data's draw."""
    s, p = infer(project, "ax.cu",
                 "__global__ void axpy(float* out, const float* x, const float* alpha, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) out[i] = x[i] * *alpha;\n}\n"
                 "void run(float* o, const float* x, const float* a, int n) {\n"
                 "  axpy<<<(n + 127) / 128, 128>>>(o, x, a, n);\n}\n",
                 "axpy")
    assert "init" not in p.comment.split("alpha", 1)[1].split("\n")[0], p.comment


def test_a_factor_of_a_kernel_that_also_stores_floats_is_no_quantization_scale(project):
    """Integer indices stored beside float weights (a top-k): the factor scales the weights, which
    nothing rounds away, so it keeps the data's draw."""
    s, p = infer(project, "tk.cu",
                 "__global__ void pick(float* w, int* idx, const float* x, const float* factor, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) { w[i] = x[i] * factor[0]; idx[i] = x[i] > 0.f ? i : 0; }\n}\n"
                 "void run(float* w, int* k, const float* x, const float* f, int n) {\n"
                 "  pick<<<(n + 127) / 128, 128>>>(w, k, x, f, n);\n}\n",
                 "pick")
    assert "init" not in p.comment.split("factor ", 1)[1].split("\n")[0], p.comment
