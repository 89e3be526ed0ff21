"""Issue 25: a count the kernel tests against one, `if (cp_size > 1) { … }`, is a split that 1
turns off (TransformerEngine's fused_rope_forward_kernel: its context-parallel size, which also
divides `cu_seqlens` in the THD branch a null `cu_seqlens` rules out). Drawn as a size (128) it
sent every block into the branch — rows offset by a free `cp_rank`, the kernel's own
`assert(cur_seqlens % 2 == 0)` — and no pointer's extent fitted a shape: `dst` got the fallback
[b, cp_size] and stayed unwritten. Taken 1, the strides the launcher is handed are read as a
contiguous layout's, and the kernel writes its whole `dst`."""
import re

from astra_cuda import api

from .conftest import needs_gxx

pytestmark = needs_gxx

# TransformerEngine rope's pattern, cut down: strides passed as scalars, the output's set per format
ROPE = ("#include <cassert>\nenum Format { THD, SBHD, BSHD };\n"
        "__global__ void rope(const float* src, const int* cu_seqlens, const float* freqs, float* dst,\n"
        "                     int cp_size, int cp_rank, int s, int d, int stride_s, int stride_b,\n"
        "                     int o_stride_s, int o_stride_b) {\n"
        "  int s_id = blockIdx.x, b_id = blockIdx.y, off, off_dst, cur = s;\n"
        "  if (cu_seqlens != nullptr) {\n"
        "    int start = cu_seqlens[b_id] / cp_size, end = cu_seqlens[b_id + 1] / cp_size;\n"
        "    if (s_id + start >= end) return;\n"
        "    off = (s_id + start) * stride_s; off_dst = (s_id + start) * o_stride_s; cur = end - start;\n"
        "  } else {\n    off = s_id * stride_s + b_id * stride_b; off_dst = s_id * o_stride_s + b_id * o_stride_b;\n  }\n"
        "  int f = s_id;\n"
        "  if (cp_size > 1) {\n    assert(cur % 2 == 0);\n"
        "    f += s_id < cur / 2 ? cp_rank * cur / 2 : cur * cp_size - (cp_rank + 2) * cur / 2;\n  }\n"
        "  for (int i = threadIdx.x; i < d; i += blockDim.x) dst[off_dst + i] = src[off + i] * freqs[f * d + i];\n}\n"
        "void launch(const float* src, const int* cu, const float* freqs, float* dst, Format format,\n"
        "            int cp_size, int cp_rank, int s, int b, int d, int stride_s, int stride_b) {\n"
        "  int o_stride_s, o_stride_b;\n"
        "  if (format == THD) { o_stride_s = d; o_stride_b = 0; }\n"
        "  else if (format == SBHD) { o_stride_s = b * d; o_stride_b = d; }\n"
        "  else { o_stride_s = d; o_stride_b = s * d; }\n"
        "  dim3 blocks(s, b);\n"
        "  rope<<<blocks, 32>>>(src, cu, freqs, dst, cp_size, cp_rank, s, d, stride_s, stride_b, o_stride_s, o_stride_b);\n}\n")


def test_a_count_tested_against_one_is_a_split_taken_off_and_the_output_written_whole(project):
    path = project("rope.cu", ROPE)
    p = api.infer_spec(api.snapshot(ROPE, str(path)), "rope", backend="cpu")
    said = p.comment + "\n".join(p.notes)
    assert re.search(r'cp_size *= "1"', p.comment) and re.search(r'cu_seqlens *= "null"', p.comment), said
    assert "could not be read from the kernel's indexing" not in said, said
    at = ROPE.index("__global__")
    text = ROPE[:at] + p.comment + ROPE[at:]
    (v,) = api.check(api.snapshot(text, str(path)), "rope", backend="cpu", quick=True, pin_first=False)
    assert v.passed, v.human() + "\n" + said
