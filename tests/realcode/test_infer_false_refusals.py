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
