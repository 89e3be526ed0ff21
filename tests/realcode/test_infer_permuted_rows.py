"""Issue 25: an index array that permutes a row (`a_ptr[perm ? perm[k] : k]`) beside packed integer
weights — minimal case written here of vLLM's GPTQ `gemm_half_q_half_gptq_4bit_kernel`, whose
`b_q_perm` was drawn as small signed integers (no init): `a` was read before its rows, and `c` came
out NaN and different run to run. The row reaches all of `a` through the branch without `perm`,
so only a table as large as the row shows the indices: the table probe larger than every size
after the launcher's multiples (`k` a multiple of `groups`), the largest row that fits, and the
packed weights, whose values index nothing, not drawn as indices."""
from tests.realcode.test_infer_asm_accesses import infer

GEMV = (
    "#include <cuda_fp16.h>\n#include <cstdint>\n"
    "__global__ void perm_gemv(const half* a, const uint32_t* w, const uint32_t* zeros, half* out, const int m,\n"
    "                          const int n, const int k, const int groups, const int* perm) {\n"
    "  int col = blockIdx.x * 128 + threadIdx.x;\n  int row = blockIdx.y;\n  int kk = blockIdx.z * 8;\n"
    "  if (col >= n) return;\n"
    "  int group = kk / (k / groups);\n  const half* a_ptr = a + row * k;\n"
    "  uint32_t z = zeros[group * n + col];\n  float acc = 0;\n"
    "  for (int j = 0; j < 8; j++) {\n"
    "    half x = perm ? a_ptr[perm[kk + j]] : a_ptr[kk + j];\n"
    "    acc += __half2float(x) * (float)(((w[(kk / 8) * n + col] >> (4 * j)) & 15) - (z & 15));\n  }\n"
    "  out[row * n + col] = __float2half(acc);\n}\n"
    "void run(const half* a, const uint32_t* w, const uint32_t* z, half* out, int m, int n, int k, int groups,\n"
    "         const int* perm) {\n"
    "  perm_gemv<<<dim3((n + 127) / 128, m, k / 8), 128>>>(a, w, z, out, m, n, k, groups, perm);\n}\n")


def test_a_permutation_of_a_row_is_drawn_within_the_row_and_packed_weights_are_not(project):
    s, p = infer(project, "gemv.cu", GEMV, "perm_gemv")
    assert str(s.args["perm"].init) == "randint(0, k)", s.args["perm"].init
    assert s.args["a"].shape == ("m", "k")
    for packed in ("w", "zeros"):   # their values are bits, not indices
        assert s.args[packed].init.kind != "randint", (packed, s.args[packed].init)


