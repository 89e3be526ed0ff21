"""Issue 25: minimal cases written here of what TransformerEngine's `fused_rope_forward_kernel`
(transformer_engine/common/fused_rope/fused_rope.cu) shows. Its interleaved rotation pairs each
element with its neighbour by the index's parity (`d_id % 2 == 0 ? -src[off + stride_d] :
src[off - stride_d]`, `d_id < d2`): where `d2` is odd the last element's partner lies one past the
row, and the gate's odd test size (d2 = 3) faulted past the buffer; the first fix tried, whole tiles
of the block for every size, made each case too large for the CPU. And `cp_rank` is read only inside
`if (cp_size > 1)`, which the draft turns off (cp_size 1): it was drawn as a size, 1 … 4096."""
from astra_cuda.model import access, source

from tests.realcode.test_infer_asm_accesses import infer

PAIRS = """__global__ void rope_pairs(const float* src, const float* freqs, float* dst, int h, int d2) {
  int s_id = blockIdx.x;
  for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
    for (int d_id = threadIdx.x; d_id < d2; d_id += blockDim.x) {
      int off = (s_id * h + h_id) * d2 + d_id;
      float c = cosf(freqs[s_id * d2 + d_id]), s = sinf(freqs[s_id * d2 + d_id]);
      float r = (d_id % 2 == 0) ? -src[off + 1] : src[off - 1];
      dst[off] = src[off] * c + r * s;
    }
  }
}
void launch(const float* src, const float* freqs, float* dst, int s, int h, int d2) {
  rope_pairs<<<s, dim3(32, 4)>>>(src, freqs, dst, h, d2);
}
"""


def test_a_residue_test_narrows_the_index_to_its_pairs():
    k = source.parse(PAIRS).kernel("rope_pairs")
    even = access.analyse(k, {"h": 3, "d2": 6, "s": 2}, (2, 1, 1), (32, 4, 1), {"src": 4, "freqs": 4, "dst": 4}, set(), 100, {})
    odd = access.analyse(k, {"h": 3, "d2": 5, "s": 2}, (2, 1, 1), (32, 4, 1), {"src": 4, "freqs": 4, "dst": 4}, set(), 100, {})
    assert even.uses["src"].hi == 2 * 3 * 6 - 1 and 2 in even.residues   # the partner of d_id = 4 is 5
    assert odd.uses["src"].hi == 2 * 3 * 5   # d_id = 4's partner is one past the last row


def test_a_size_whose_elements_are_taken_in_pairs_is_required_even(project):
    s, p = infer(project, "rope.cu", PAIRS, "rope_pairs")
    assert "d2 % 2 == 0" in s.require, p.comment
    assert list(s.args["src"].shape) == ["s", "h", "d2"] and list(s.args["freqs"].shape) == ["s", "d2"]
    assert all(c["d2"] % 2 == 0 for c in s.cases())
    # no other size is required whole tiles or pairs
    assert len(s.require) == 1, s.require


SPLIT = """__global__ void shift(const float* freqs, float* out, int cp_size, int cp_rank, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int pos = i;
  if (cp_size > 1) {
    pos += cp_rank * n;
  }
  if (i < n) out[i] = freqs[pos];
}
void launch(const float* f, float* o, int cp_size, int cp_rank, int n) {
  shift<<<(n + 127) / 128, 128>>>(f, o, cp_size, cp_rank, n);
}
"""


def test_a_parameter_read_only_where_a_split_count_of_one_turns_off_is_no_size(project):
    s, p = infer(project, "split.cu", SPLIT, "shift")
    assert s.args["cp_size"].value == "1" and s.args["cp_rank"].value == "0", p.comment
    assert "cp_rank" not in s.sizes
    assert any("`cp_rank` is read only in branches" in n for n in p.notes)
