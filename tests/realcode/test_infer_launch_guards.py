"""Issue 25: what a kernel or its launcher states about the values it serves — minimal cases written
here of DeepSpeed's ragged embedding (`if (token >= vocab_size || token < 0) return;`: the ids
drawn anywhere else leave their rows unwritten) and its rotary launcher (`if (threads_per_head ==
4) { LAUNCH(4, A); } else if (…)` inside the launch macro `LAUNCH_FOR_ALIGNMENT`: without those
conditions, head sizes the instance was not made for let its threads overlap) and its softmax
launcher (`iterations` computed from `sequence_length`, passed as `sequence_length / 4`)."""
from astra_cuda.model import source

from .test_infer_patterns import infer

EMBED = """
__global__ void embed(float* out, const int* ids, const float* table, int dim, int vocab) {
  const int t = blockIdx.y;
  const int tok = ids[t];
  if (tok >= vocab || tok < 0) {
    return;
  }
  const int c = threadIdx.x + blockIdx.x * blockDim.x;
  if (c < dim) out[t * dim + c] = table[tok * dim + c];
}
void run(float* out, const int* ids, const float* table, int n, int dim, int vocab) {
  dim3 grid((dim + 255) / 256, n);
  embed<<<grid, 256>>>(out, ids, table, dim, vocab);
}
"""


def test_ids_a_kernel_returns_early_on_are_drawn_below_its_bound(project):
    project("embed.cu", EMBED)
    s, p = infer(project, "embed.cu", "embed")
    flat = " ".join(p.comment.split())
    assert 'ids = { type = "int32", shape = ["n"], init = "randint(0, vocab)" }' in flat, p.comment
    # a guard on another value (the column) says nothing of the ids
    project("other.cu", EMBED.replace("if (tok >= vocab || tok < 0)", "if (t >= vocab)"))
    s, p = infer(project, "other.cu", "embed")
    assert "randint(0, vocab)" not in p.comment, p.comment


ROTARY = """
template <typename T, int TPH, int G>
__global__ void rot(T* q, unsigned head_size, unsigned total) {
  const int head = blockIdx.x * (256 / TPH) + threadIdx.x / TPH;
  const int lane = threadIdx.x % TPH;
  if (head < total && lane * (G / sizeof(T)) < head_size) q[head * head_size + lane] *= 2.f;
}
#define LAUNCH_ONE(TPH, G) rot<T, TPH, G><<<grid, block>>>(q, head_size, total);
#define LAUNCH_FOR(G)                 \\
    if (threads_per_head == 4) {      \\
        LAUNCH_ONE(4, G);             \\
    } else if (threads_per_head == 8) { \\
        LAUNCH_ONE(8, G);             \\
    }
template <typename T>
void launch(T* q, unsigned head_size, unsigned total) {
  const int threads_per_head = head_size / 4;
  dim3 block(256);
  dim3 grid((total + 256 / threads_per_head - 1) / (256 / threads_per_head));
  LAUNCH_FOR(16);
}
template void launch<float>(float*, unsigned, unsigned);
"""


def test_the_conditions_a_launch_macro_writes_go_with_each_launch():
    sites = source.parse(ROTARY).launches_of("rot")
    assert [(s.template_args, s.via_macro, s.conditions) for s in sites] == [
        ("<T, 4, 16>", "LAUNCH_FOR", ("threads_per_head == 4",)),
        ("<T, 8, 16>", "LAUNCH_FOR", ("threads_per_head == 8", "threads_per_head != 4"))]


def test_a_launch_macros_condition_is_required(project):
    project("rot.cu", ROTARY)
    s, p = infer(project, "rot.cu", "rot")
    assert "head_size / 4 == 4" in " ".join(s.require), p.comment


ITERS = """
__global__ void halve(float* v, int n4, int iters) {
  for (int i = 0; i < iters; i++) {
    int j = i * blockDim.x + threadIdx.x;
    if (j < n4) v[blockIdx.x * n4 + j] *= 0.5f;
  }
}
void launch(float* v, int rows, int n) {
  const int threads = 128;
  int n4 = n / 4;
  int iters = (n < 4096 ? (n4 + threads - 1) / threads : 8);
  halve<<<rows, threads>>>(v, n4, iters);
}
"""


def test_a_count_the_launcher_computes_from_a_size_it_passes_scaled_is_that_expression(project):
    """DeepSpeed's attn_softmax: `seq_length4 = sequence_length / 4` is passed, and `iterations`
    computed from both; a free `iterations` (4096) overran the kernel's `float4 data[8]`."""
    project("iters.cu", ITERS)
    s, p = infer(project, "iters.cu", "halve")
    flat = " ".join(p.comment.split())
    assert 'iters = "(n4 + 128 - 1) / 128 if n4 * 4 < 4096 else 8"' in flat and "iters = [" not in flat, p.comment


SOFTMAX = """
#define MAX_ITERS 8
template <int tbSize, int blockStride, int tbSeq>
__global__ void sm(float* vals, const float* mask, int heads, int seq_length, int iterations) {
  float4 data[MAX_ITERS];
  int block_width = blockStride * seq_length;
  int in_seq = max(seq_length, tbSeq);
  int lane = threadIdx.x % in_seq;
  int offset = blockIdx.x * block_width + (threadIdx.x / in_seq) * seq_length;
  float4* v = reinterpret_cast<float4*>(vals);
  const float4* m = reinterpret_cast<const float4*>(mask);
  for (int i = 0; i < iterations; i++) {
    int id = i * blockDim.x + lane;
    if (id < seq_length) { data[i] = v[offset + id]; data[i].x += m[id].x; v[offset + id] = data[i]; }
  }
}
void launch(float* vals, const float* mask, int rows, int sequence_length) {
  const int threads = 128;
  int seq_length4 = sequence_length / 4;
  int iterations = (sequence_length < 4096 ? (seq_length4 + threads - 1) / threads : MAX_ITERS);
  if (sequence_length <= 8)
    sm<2, (threads / 2), 2><<<rows, threads>>>(vals, mask, rows, seq_length4, iterations);
  else
    sm<32, 1, 128><<<rows, threads>>>(vals, mask, rows, seq_length4, iterations);
}
"""


def test_the_first_branchs_small_sizes_are_probed_and_its_instances_rows_measured(project):
    """DeepSpeed's attn_softmax, launched `<2, 64, 2>` only where `sequence_length <= 8` (here the
    launcher's only launch; with the `else` of the real one, the launch most sizes reach is read,
    below): the probes stay within that bound (1 or 2 float4s a row, not multiples of 16), each
    block's `blockStride` = 64 rows of float4s is a dimension of 256 floats the instance fixes, and
    the test sizes meet the bound — a guessed shape smaller than that let the kernel write past
    `vals` (into `attn_mask`)."""
    project("sm.cu", SOFTMAX[:SOFTMAX.index("  else")] + "}\n")
    s, p = infer(project, "sm.cu", "sm")
    flat = " ".join(p.comment.split())
    assert 'vals = { type = "float", shape = ["heads", "seq_length", "256"], inout = true }' in flat, p.comment
    assert list(s.require) == ["seq_length * 4 <= 8"] and "seq_length = [1, 2]" in flat, p.comment


def test_with_the_else_the_launch_most_sizes_reach_is_read_within_its_bounds(project):
    project("sm.cu", SOFTMAX)
    s, p = infer(project, "sm.cu", "sm")
    flat = " ".join(p.comment.split())
    assert s.instantiate == "<32, 1, 128>", p.comment
    assert 'vals = { type = "float", shape = ["heads", "4 * seq_length"], inout = true }' in flat, p.comment
    # the `else` of `sequence_length <= 8`, and the register array's 8 float4s of 128 threads
    assert set(s.require) == {"seq_length * 4 > 8", "seq_length <= 1024"}, p.comment


# FasterTransformer's topk_stage1: each of a row's 8 blocks writes k entries, `8 * k` a row; the
# instance's BLOCK_SIZE (128) equals that at k = 16, the launcher's bound, but a number the instance
# fixes is a row's extent only where no product of sizes measures it.
TOPK = """
#include <cassert>
template <int BLOCK, int PER>
__global__ void stage1(const float* in, int* ids, int k, int n) {
  const int row = blockIdx.x / PER, lane = blockIdx.x % PER;
  for (int ite = 0; ite < k; ite++) {
    if (threadIdx.x == 0) ids[row * PER * k + lane * k + ite] = (int)in[row * n + lane * BLOCK + ite];
  }
}
void launch(const float* in, int* ids, int k, int n, int rows) {
  assert(k >= 1 && k <= 16);
  assert(n >= 1024);
  stage1<128, 8><<<rows * 8, 128>>>(in, ids, k, n);
}
"""


def test_a_number_the_instance_fixes_is_no_extent_where_sizes_measure_it(project):
    project("topk.cu", TOPK)
    s, p = infer(project, "topk.cu", "stage1")
    flat = " ".join(p.comment.split())
    assert 'ids = { type = "int32", shape = ["rows", "8 * k"], output = true }' in flat, p.comment
