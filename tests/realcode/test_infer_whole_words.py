"""Issue 25: a shape dimension `n / 8` that the kernel reaches past where n is no multiple of 8 —
minimal case written here of vLLM's GPTQ `gemm_half_q_half_gptq_4bit_kernel`, whose zero points
`b_gptq_qzeros[group * size_n / 8 + n / 8]` (eight 4-bit values a word) are read for each column
n < size_n. Shaped `[groups, size_n / 8]` and drawn at size_n = 1004, the last word was read past
the buffer and two GPU runs disagreed; `size_n % 8 == 0` is now required and no case breaks it."""
from tests.realcode.test_infer_asm_accesses import infer
from tests.realcode.test_infer_whole_steps import PACKED

ZEROS = PACKED.replace("const half* scales, half* out", "const half* scales, const uint32_t* qz, half* out") \
    .replace("  float acc = 0.f;\n", "  float acc = (float)((qz[group * size_n / 8 + n / 8] >> ((n & 7) * 4)) & 15);\n") \
    .replace("(w, s, out, n, k, groups)", "(w, s, s_qz, out, n, k, groups)") \
    .replace("const half* s, half* out", "const half* s, const uint32_t* s_qz, half* out")

HALVES = """__global__ void pairs(const float* in, float* out, const int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n / 2) out[i] = in[2 * i] + in[2 * i + 1];
}
void run(const float* in, float* out, int n) { pairs<<<(n / 2 + 255) / 256, 256>>>(in, out, n); }
"""


def test_a_packed_row_read_from_every_column_requires_whole_words(project):
    s, p = infer(project, "q4z.cu", ZEROS, "gemv_q4")
    assert list(s.args["qz"].shape) == ["groups", "size_n / 8"], s.args["qz"].shape
    assert "size_n % 8 == 0" in s.require, s.require
    assert all(c["size_n"] % 8 == 0 for c in s.cases())
    # the stepped size's words are implied by its whole steps: not required twice
    assert "size_k % 8 == 0" not in s.require and "size_k % 32 == 0" in s.require


def test_a_quotient_the_kernel_reads_no_further_than_asks_nothing(project):
    s, _ = infer(project, "pairs.cu", HALVES, "pairs")
    assert list(s.args["out"].shape) == ["n / 2"], s.args["out"].shape
    assert not any(r.startswith("n % 2") for r in s.require), s.require
