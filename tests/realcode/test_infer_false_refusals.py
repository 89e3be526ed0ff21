"""Issue 25: patterns of public kernels whose inferred spec made `astra check` refuse a correct
kernel (CUTLASS's ReferenceGemm, cuda-samples matrixMul, ...), each a minimal case written here."""
from astra_cuda import api
from astra_cuda.model import source, spec


def infer(project, rel, kernel):
    path = project.root / rel
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)   # what is read, not run
    text = path.read_text()
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p   # raises unless the validator accepts it


def test_blas_leading_dimensions_are_strides_of_a_column_major_layout(project):
    """`A[i + k * lda]`: lda is a stride (the BLAS name), taken as the extent the kernel reaches
    inside it, so A is K columns of M and not the guessed [M, N]."""
    project("gemm.cu", "__global__ void ref_gemm(int M, int N, int K, const float* A, int lda,\n"
                       "                         const float* B, int ldb, float* C, int ldc) {\n"
                       "  int i = threadIdx.x + blockIdx.x * blockDim.x, j = threadIdx.y + blockIdx.y * blockDim.y;\n"
                       "  if (i < M && j < N) {\n    float acc = 0;\n"
                       "    for (int k = 0; k < K; ++k) acc += A[i + k * lda] * B[k + j * ldb];\n"
                       "    C[i + j * ldc] = acc + C[i + j * ldc];\n  }\n}\n"
                       "void gemm(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {\n"
                       "  dim3 block(16, 16), grid((M + 15) / 16, (N + 15) / 16);\n"
                       "  ref_gemm<<<grid, block>>>(M, N, K, A, lda, B, ldb, C, ldc);\n}\n")
    s, p = infer(project, "gemm.cu", "ref_gemm")
    assert (s.args["lda"].value, s.args["ldb"].value, s.args["ldc"].value) == ("M", "K", "M")
    assert sorted(s.args["A"].shape) == ["K", "M"] and sorted(s.args["B"].shape) == ["K", "N"]
    assert sorted(s.args["C"].shape) == ["M", "N"]


def test_two_runs_that_disagree_are_tried_again_as_an_out_of_bounds_read():
    """A read past a buffer that does not fault (a partial tile's columns) shows only as two runs
    that disagree: the drafts a fault would get are tried."""
    from astra_cuda.infer import Proposal, validate
    asked = []

    def redo(decide):
        asked.append(decide)
        return None
    validate.alternatives(Proposal("/* @astra a */\n"), validate.Trial(True, False, "determinism: ...",
                                                                         ("determinism",)), redo)
    assert {"tiles": "block"} in asked and {"sizes": "equal"} in asked


def test_a_cast_written_as_a_call_keeps_its_value():
    """`token * int64_t(d)` (llm-awq silu_and_mul): the functional cast is d, so the row is known."""
    from astra_cuda.model import access
    k = source.parse("__global__ void gated(float* out, const float* in, const int d) {\n"
                     "  const int64_t row = blockIdx.x * int64_t(d);\n"
                     "  for (int i = threadIdx.x; i < d; i += blockDim.x)\n"
                     "    out[row + i] = in[row * 2 + i] * in[row * 2 + d + i];\n}\n").kernel("gated")
    facts = access.analyse(k, {"d": 48}, (5, 1, 1), (32, 1, 1), {"in": 4, "out": 4}, set(), 100, {})
    assert facts.uses["out"].hi == 5 * 48 - 1 and facts.uses["in"].hi == 5 * 96 - 1


def test_a_constexpr_tile_of_the_launcher_is_no_size_and_its_template_value_is_read(project):
    """bitsandbytes dequantizeBlockwise: `constexpr int tile = (DATA_TYPE > 0) ? 1024 : 512;
    int blocks = ((int64_t)n + tile - 1) / tile;` in a launcher whose DATA_TYPE its explicit
    instantiation fixes at General8bit (0): the grid is cdiv(n, 512), not a guessed block count."""
    project("dq.cu", "typedef enum DataType_t { General8bit = 0, FP4 = 1 } DataType_t;\n"
                     "template <typename T, int DATA_TYPE>\n"
                     "__global__ void kdq(const float* code, const unsigned char* A, T* out, const int n) {\n"
                     "  int i = blockIdx.x * 512 + threadIdx.x * 8;\n"
                     "  for (int j = 0; j < 8; j++) if (i + j < n) out[i + j] = code[A[i + j]];\n}\n"
                     "template <typename T, int DATA_TYPE>\n"
                     "void dq(const float* code, const unsigned char* A, T* out, const int n) {\n"
                     "  constexpr int tile_size = (DATA_TYPE > 0) ? 1024 : 512;\n"
                     "  int grid_blocks = ((int64_t)n + tile_size - 1) / tile_size;\n"
                     "  kdq<T, DATA_TYPE><<<grid_blocks, 64>>>(code, A, out, n);\n}\n"
                     "template void dq<float, General8bit>(const float* code, const unsigned char* A, float* out, const int n);\n")
    s, p = infer(project, "dq.cu", "kdq")
    assert s.instantiate == "<float, General8bit>" and s.block == ("64",)
    assert s.grid == ("(n + 512 - 1) / 512",) and s.args["out"].shape == ("n",)


def test_a_template_type_argument_that_is_a_pointer_makes_its_parameter_a_buffer(project):
    """llm-awq quant_kernel: `scale_type scale` launched as `quant<T, at::Half *, true>` writes
    `scale[token]`: the argument is kept (not replaced by float, which does not compile) and
    `scale` is a buffer, in the proposal and in the spec Astra loads."""
    project("q.cu", "#include <cuda_fp16.h>\n#include <cstdint>\n"
                    "template <typename T, typename scale_type, bool per_token>\n"
                    "__global__ void quant(const T* in, int8_t* out, scale_type scale, int hidden) {\n"
                    "  if constexpr (per_token) {\n"
                    "    if (threadIdx.x == 0) scale[blockIdx.x] = __float2half_rn(1.0f);\n"
                    "    for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[blockIdx.x * hidden + i] = (int8_t)in[blockIdx.x * hidden + i];\n"
                    "  }\n}\n"
                    "void run(int8_t* out, const float* in, __half* scale, int tokens, int hidden) {\n"
                    "  quant<float, __half *, true><<<tokens, 256>>>(in, out, scale, hidden);\n}\n")
    s, p = infer(project, "q.cu", "quant")
    assert s.instantiate == "<float, __half *, true>"
    assert s.args["scale"].pointer and s.args["scale"].output and s.args["scale"].shape == ("tokens",)


UB = ("__global__ void per_token_scale(float* scales, const float* in, const float* scale_ub, int hidden) {\n"
      "  if (threadIdx.x == 0) {\n    float m = 0.0f;\n"
      "    for (int i = 0; i < hidden; ++i) m = fmaxf(m, fabsf(in[blockIdx.x * hidden + i]));\n"
      "    if (scale_ub) m = fminf(m, *scale_ub);\n    scales[blockIdx.x] = fmaxf(m / 448.0f, 1e-6f);\n  }\n}\n"
      "void run(float* s, const float* in, const float* ub, int tokens, int hidden) {\n"
      "  per_token_scale<<<tokens, 32>>>(s, in, ub, hidden);\n}\n")


def test_a_constant_output_is_tried_again_with_its_one_value_inputs_far_above_the_data(project):
    """vLLM rms_norm_dynamic_per_token_quant: `min(absmax, *scale_ub)` with scale_ub drawn like
    the data clamps every token's scale to one value; the retry draws it far above the data."""
    from astra_cuda.infer import Proposal, validate
    asked = []
    validate.alternatives(Proposal("/* @astra a */\n"), validate.Trial(True, False, "not_constant: ...",
                                                                         ("not_constant",)),
                          lambda decide: asked.append(decide))
    assert {"bounds": "large"} in asked
    project("ub.cu", UB)
    path = project.root / "ub.cu"
    snap = api.snapshot(path.read_text(), str(path))
    k = snap.model.kernel("per_token_scale")
    assert "uniform(1000" not in api.infer.infer(k, snap.model, path=str(path)).comment
    alt = api.infer.infer(k, snap.model, path=str(path), decide={"bounds": "large"})
    m = source.parse(alt.comment + path.read_text())
    s = spec.load(m.kernel("per_token_scale"), m)
    assert s.args["scale_ub"].init.kind == "uniform" and s.args["scale_ub"].init.params[0] >= 1000
    assert s.args["in"].init.kind == "normal"


def test_a_change_under_an_if_the_macros_rule_out_does_not_reach_the_launch(project):
    """bitsandbytes gemm_4bit_inference_naive: `int num_blocks = (m + 3) / 4;` then, under
    `#if BNB_HIP` (0 here), another value: the grid is (m + 3) / 4, not a guessed block count."""
    project("hip.cu", "#define ON_HIP 0\n"
                      "__global__ void rows4(float* out, const float* in, int m, int k) {\n"
                      "  int row = blockIdx.x * 4 + threadIdx.x / 32;\n"
                      "  if (row < m && threadIdx.x % 32 == 0) out[row] = in[row * k];\n}\n"
                      "void run(float* out, const float* in, int m, int k) {\n"
                      "  int num_blocks = (m + 3) / 4;\n#if ON_HIP\n  num_blocks = (m + 1) / 2;\n#endif\n"
                      "  rows4<<<num_blocks, 128>>>(out, in, m, k);\n}\n")
    s, p = infer(project, "hip.cu", "rows4")
    assert s.grid == ("(m + 3) / 4",) and s.args["out"].shape == ("m",)


def test_two_runs_that_disagree_are_tried_again_with_optional_pointers_null():
    """A per-row table given random values sends a read outside the table it offsets, which a GPU
    does not fault on (FasterTransformer's `padding_count`): the null draft is tried too."""
    from astra_cuda.infer import Proposal, validate
    asked = []

    def redo(decide):
        asked.append(decide)
        return None
    validate.alternatives(Proposal("/* @astra a */\n"), validate.Trial(True, False, "determinism: ...",
                                                                         ("determinism",)), redo)
    assert asked[0]["optional"] == "null"
