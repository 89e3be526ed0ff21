"""Bench sizes shaped like a launch a program makes: a case too large is shrunk without starving
the grid (a CSR's segment count keeps the traffic as it halves, but one segment is a launch of a
few dozen blocks), a size bounded by another stays within it, and a decode-like rung shrinks the
tokens, not a row's length."""
from astra_cuda.infer.bench_sizes import MIN_BLOCKS
from tests.realcode.test_infer_bench_grid import blocks
from tests.realcode.test_infer_bench_traffic import proposed

# tokens of `batch_size` requests laid out back to back (`indptr`: where each request's start),
# one block per request and head, heads of two tables: the tables' bytes do not depend on how
# many requests share the tokens, so halving the requests "keeps the traffic"
SEGMENTS = """
__global__ void seg_scale(const float* a, const float* b, float* a_out, float* b_out, const int* indptr,
                          int batch_size, int num_a_heads, int num_b_heads) {
  int seg = blockIdx.x / (num_a_heads + num_b_heads), h = blockIdx.x % (num_a_heads + num_b_heads);
  int first = indptr[seg], len = indptr[seg + 1] - indptr[seg];
  for (int i = threadIdx.y; i < len; i += blockDim.y) {
    long row = first + i;
    if (h < num_a_heads) {
      a_out[(row * num_a_heads + h) * 64 + threadIdx.x] = 2.0f * a[(row * num_a_heads + h) * 64 + threadIdx.x];
    } else {
      int g = h - num_a_heads;
      b_out[(row * num_b_heads + g) * 64 + threadIdx.x] = 2.0f * b[(row * num_b_heads + g) * 64 + threadIdx.x];
    }
  }
}
void run(const float* a, const float* b, float* ao, float* bo, const int* indptr, int batch_size, int na, int nb) {
  dim3 block(64, 8);
  seg_scale<<<batch_size * (na + nb), block>>>(a, b, ao, bo, indptr, batch_size, na, nb);
}
"""


def test_shrinking_a_too_large_case_keeps_the_grid_full(project):
    s, notes = proposed(project, "segments.cu", SEGMENTS, "seg_scale")
    assert s.args["indptr"].init is not None and "offsets" in str(s.args["indptr"].init), s.args["indptr"]
    cases = s.bench_cases()
    assert cases and all(blocks(s, c) >= MIN_BLOCKS for c in cases), (s.grid, cases, notes)
