"""Of a launcher's instances chosen by the alignment of a size (`if (h % 16 == 0) k<16> else if
(h % 8 == 0) k<8> else k<4>`), the spec takes the aligned one (infer/launch_conditions.py
`unaligned_tests`): a model's widths are multiples of 64, so the fallback every width reaches is
the one a real program never runs — sgl-kernel's per_token_quant_fp8 was timed at hidden_dim =
11012 on its 4-wide instance."""
from astra_cuda import infer

from astra_cuda.model import source, spec

KERNEL = """template <int V>
__global__ void scale_rows(const float* __restrict__ in, float* __restrict__ out, const int hidden, const int rows) {
  const int r = blockIdx.x;
  if (r >= rows) return;
  for (int i = threadIdx.x; i < hidden / V; i += blockDim.x)
    for (int k = 0; k < V; ++k) out[r * hidden + i * V + k] = 2.f * in[r * hidden + i * V + k];
}
"""

BY_IF = KERNEL + """
void run(const float* in, float* out, int hidden, int rows) {
  if (hidden % 4 != 0) return;
  if (hidden % 16 == 0) scale_rows<16><<<rows, 128>>>(in, out, hidden, rows);
  else if (hidden % 8 == 0) scale_rows<8><<<rows, 128>>>(in, out, hidden, rows);
  else scale_rows<4><<<rows, 128>>>(in, out, hidden, rows);
}
"""

BY_FLAG = KERNEL + """
void run(const float* in, float* out, int hidden, int rows) {
  const bool use_vec16 = (hidden % 16 == 0);
  const bool use_vec8 = (hidden % 8 == 0);
  if (use_vec16) scale_rows<16><<<rows, 128>>>(in, out, hidden, rows);
  else if (use_vec8) scale_rows<8><<<rows, 128>>>(in, out, hidden, rows);
  else scale_rows<4><<<rows, 128>>>(in, out, hidden, rows);
}
"""

BY_NEGATED_FLAG = KERNEL + """
void run(const float* in, float* out, int hidden, int rows) {
  const bool vec16 = (hidden % 16 == 0);
  if (!vec16) scale_rows<8><<<rows, 128>>>(in, out, hidden, rows);
  else scale_rows<16><<<rows, 128>>>(in, out, hidden, rows);
}
"""

BY_RETURN = KERNEL + """
void run(const float* in, float* out, int hidden, int rows) {
  if (hidden % 16 != 0) {
    scale_rows<4><<<rows, 128>>>(in, out, hidden, rows);
    return;
  }
  scale_rows<16><<<rows, 128>>>(in, out, hidden, rows);
}
"""


def proposed(text: str) -> spec.Spec:
    m = source.parse(text)
    p = infer.infer(m.kernel("scale_rows"), m)
    k = m.kernel("scale_rows")
    with_spec = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(with_spec.kernel("scale_rows"), with_spec), p.comment


def test_the_instance_aligned_widths_reach_is_specified():
    for text in (BY_IF, BY_FLAG, BY_NEGATED_FLAG, BY_RETURN):
        s, comment = proposed(text)
        assert "16>" in (s.instantiate or ""), comment
        assert "hidden % 16 == 0" in s.require, comment   # what sends it there: never tested elsewhere
        assert all(h % 16 == 0 for h in s.sizes["hidden"] + s.bench.get("hidden", [])), comment
        assert any(r % 2 for r in s.sizes["rows"]), comment   # the row count keeps its odd test values
