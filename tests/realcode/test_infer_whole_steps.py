"""Issue 25: a size a kernel walks in whole steps — minimal case written here of the pattern of
vLLM's GPTQ `gemm_half_q_half_gptq_4bit_kernel` (`while (k < end_k) { four rows of packed words;
k += 32; }`, eight 4-bit values a word, scales per group advanced at `k == nextgroup`). Probed at
multiples of 16 its last trip reaches a whole step past the packed weights, so no shape fitted and
they were guessed `[size_m, size_n]`: on a GPU the reads past them made two runs disagree (`c`: 127
of 128 elements). Probed at whole steps of `size_k` the shapes are the program's, the step required."""
from astra_cuda.infer.shape_fits import packed_layout

from tests.realcode.test_infer_asm_accesses import infer

PACKED = """#include <cuda_fp16.h>
#include <cstdint>
__global__ void gemv_q4(const uint32_t* w, const half* scales, half* out, const int size_n, const int size_k,
                        const int groups) {
  int n = blockIdx.x * 128 + threadIdx.x;
  int offset_k = blockIdx.z * 128;
  int end_k = min(offset_k + 128, size_k);
  if (n >= size_n) return;
  int groupsize = size_k / groups;
  int group = offset_k / groupsize, nextgroup = offset_k + groupsize;
  float scale = __half2float(scales[group * size_n + n]);
  const uint32_t* p = w + (offset_k / 8) * size_n + n;
  float acc = 0.f;
  int k = offset_k;
  while (k < end_k) {
    if (k == nextgroup) {
      group++;
      nextgroup += groupsize;
      scale = __half2float(scales[group * size_n + n]);
    }
    for (int j = 0; j < 4; j++) {
      uint32_t q = *p;
      p += size_n;
      for (int i = 0; i < 8; i++) acc += scale * (float)((q >> (4 * i)) & 15);
    }
    k += 32;
  }
  atomicAdd(&out[n], __float2half(acc));
}
void gemv(const uint32_t* w, const half* s, half* out, int n, int k, int groups) {
  gemv_q4<<<dim3((n + 127) / 128, 1, (k + 127) / 128), 128>>>(w, s, out, n, k, groups);
}
"""


def test_packed_weights_walked_in_whole_steps_get_the_programs_shapes_and_the_step_required(project):
    s, p = infer(project, "q4.cu", PACKED, "gemv_q4")
    # words of 8 values along k, the threads' size innermost; one scale per group and column
    assert list(s.args["w"].shape) == ["size_k / 8", "size_n"], s.args["w"].shape
    assert list(s.args["scales"].shape) == ["groups", "size_n"], s.args["scales"].shape
    assert "size_k % 32 == 0" in s.require and "size_k % groups == 0" in s.require
    assert not any("could not be read" in n for n in p.notes)
    assert all(c["size_k"] % 32 == 0 for c in s.cases())
    # accumulated with atomicAdd: read and written, so its values before the launch are an input
    assert s.args["out"].inout and not s.args["out"].output


def test_packed_layout_puts_the_packed_words_first_and_the_threads_size_innermost():
    names = ["size_m", "size_n", "size_k", "groups"]
    assert packed_layout(["size_n", "size_k / 8"], "size_k", "size_n", names) == ["size_k / 8", "size_n"]
    assert packed_layout(["size_n", "groups / 8"], "size_k", "size_n", names) == ["groups", "size_n / 8"]
    assert packed_layout(["size_n", "groups"], "size_k", "size_n", names) == ["groups", "size_n"]
    # a product without the threads' size, or one that is already so, is left as it is
    assert packed_layout(["size_m", "size_k"], "size_k", "size_n", names) == ["size_m", "size_k"]
    assert packed_layout(["size_m", "size_n"], "size_k", "size_n", names) == ["size_m", "size_n"]
    # threads spread over the stepped size itself: nothing is lost
    assert packed_layout(["size_n", "size_k / 8"], "size_k", "size_k", names) == ["size_k / 8", "size_n"]
