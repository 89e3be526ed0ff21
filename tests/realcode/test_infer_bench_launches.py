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


# one block a token, its threads striding (in the helper) over every head's rotated pairs: the
# block's `min(heads * rot_dim / 2, 512)` threads cover any number of heads; `head_size` is passed
# along unread, as some launchers do
ROPE = """
template <typename T>
__device__ void rotate_heads(T* q, const T* cs, int heads, int ROT, int token, long stride) {
  int half = ROT / 2;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    int h = i / half, j = i % half;
    T* row = q + token * stride + h * ROT;
    T x = row[j], y = row[half + j];
    row[j] = x * cs[j] - y * cs[half + j];
    row[half + j] = y * cs[j] + x * cs[half + j];
  }
}
template <typename T>
__global__ void rope_tokens(const long* pos, T* q, const T* cache, int ROT, long stride, int heads, int head_size) {
  const T* cs = cache + pos[blockIdx.x] * ROT;
  rotate_heads<T>(q, cs, heads, ROT, blockIdx.x, stride);
}
void run(const long* pos, float* q, const float* cache, int num_tokens, int ROT, long stride, int heads, int head_size) {
  dim3 grid(num_tokens);
  dim3 block(std::min<int>(heads * ROT / 2, 512));
  rope_tokens<float><<<grid, block>>>(pos, q, cache, ROT, stride, heads, head_size);
}
"""


def test_a_block_a_helper_strides_over_is_no_bound_and_head_sizes_are_a_heads_length(project):
    s, notes = proposed(project, "rope.cu", ROPE.replace("ROT", "rot_dim"), "rope_tokens")
    assert not any("heads" in r and "512" in r for r in s.require), s.require   # the helper strides by blockDim
    case = s.bench_cases()[0]
    # a head of 64 or 128 elements, as many heads as a model has: not one head of a hidden size's length
    assert case["rot_dim"] in (64, 128) and case["head_size"] in (64, 128) and case["heads"] >= 32, (case, notes)


def test_a_too_large_case_keeps_the_table_as_many_rows_as_its_ids_reach(project):
    # `rot` says nothing of its length: 4096 at first, too large with 64 heads, so the case is
    # shrunk — the cos/sin table no further than the tokens' positions reach (at one row, every
    # token would read the same one)
    s, notes = proposed(project, "rope_rot.cu", ROPE.replace("ROT", "rot"), "rope_tokens")
    case = s.bench_cases()[0]
    assert case["V"] >= case["num_tokens"], (case, notes)
