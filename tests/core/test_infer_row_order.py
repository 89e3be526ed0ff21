"""A shape of two sizes in the order the kernel's offsets give (infer/row_order.py): fitting an
extent finds [A, B] and [B, A] alike, and listing the parameters `hidden, tokens` put the rows last
— so a vector store's alignment was required of the token count (sgl-kernel's
per_token_quant_fp8_kernel), and the tests lost their odd token counts."""
from astra_cuda import infer
from astra_cuda.infer import row_order
from astra_cuda.model import source, spec

QUANT = """#include <cuda_fp16.h>
__global__ void quant(const float* __restrict__ in, __half* __restrict__ out, float* __restrict__ scale,
                      const int hidden, const int tokens) {
  const int tok = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (tok >= tokens) return;
  const float* row_in = in + tok * hidden;
  __half* row_out = out + tok * hidden;
  float m = 0.f;
  for (int i = lane; i < hidden; i += 32) m = fmaxf(m, fabsf(row_in[i]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) scale[tok] = m;
  const float inv = m > 0.f ? 1.f / m : 0.f;
  for (int i = lane; i < hidden / 4; i += 32) {
    __half v[4];
    for (int k = 0; k < 4; ++k) v[k] = __float2half(row_in[i * 4 + k] * inv);
    *(uint2*)(row_out + i * 4) = *(uint2*)v;
  }
}

void run(const float* in, __half* out, float* scale, int hidden, int tokens) {
  if (hidden % 4 != 0) return;
  quant<<<(tokens + 7) / 8, 256>>>(in, out, scale, hidden, tokens);
}
"""

COLUMNS = """__global__ void colsum(const float* x, float* out, int cols, int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int r = 0; r < rows; ++r) s += x[r * cols + c];
  out[c] = s;
}
"""


def test_the_size_an_offset_steps_rows_by_is_innermost():
    m = source.parse(QUANT)
    p = infer.infer(m.kernel("quant"), m)
    k = m.kernel("quant")
    text = QUANT[:k.span.start_byte] + p.comment + QUANT[k.span.start_byte:]
    s = spec.load(source.parse(text).kernel("quant"), source.parse(text))
    assert list(s.args["out"].shape) == ["tokens", "hidden"], p.comment
    # the 4-wide store needs whole packets of a row, not of the token count: odd counts stay tested
    assert not any("tokens" in r for r in s.require), p.comment
    assert any(v % 2 for v in s.sizes["tokens"]), p.comment


def test_the_offsets_are_read_through_locals_and_subscripts():
    k = source.parse(QUANT).kernel("quant")
    assert row_order.row_lengths(k, "out", {"hidden", "tokens"}) == {"hidden"}
    assert row_order.rows_first(k, "out", ["hidden", "tokens"], ["hidden", "tokens"]) == ["tokens", "hidden"]
    c = source.parse(COLUMNS).kernel("colsum")
    # a column walk steps by the row length too: [rows, cols], whichever the parameters list first
    assert row_order.rows_first(c, "x", ["cols", "rows"], ["cols", "rows"]) == ["rows", "cols"]
    assert row_order.rows_first(c, "x", ["rows", "cols"], ["cols", "rows"]) == ["rows", "cols"]
    # no offset names either size: the fit's order stands
    assert row_order.rows_first(c, "out", ["cols", "rows"], ["cols", "rows"]) == ["cols", "rows"]


LOADED = """__global__ void shift(const float* x, float* out, int cols, int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int r = 0; r < rows; ++r) {
    float v = x[r * cols + c];
    auto row = out + r * cols;
    row[c] = v + 0.5f * rows;
  }
}
"""


def test_a_value_loaded_from_the_pointer_is_not_an_alias_of_it():
    k = source.parse(LOADED).kernel("shift")
    # `v + 0.5f * rows` is arithmetic on a loaded value, not an offset of x by `rows`
    assert row_order.row_lengths(k, "x", {"cols", "rows"}) == {"cols"}
    assert row_order.rows_first(k, "x", ["cols", "rows"], ["cols", "rows"]) == ["rows", "cols"]
    # an `auto` local holding an address is one
    assert row_order.row_lengths(k, "out", {"cols", "rows"}) == {"cols"}
