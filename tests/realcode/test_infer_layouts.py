"""Issue 25: layouts the kernel's own indexing implies (minimal cases written here, shaped like the
rotary-embedding and RoPE kernels of the real-world suite): strides of contiguous layouts get their
contiguous values, positions index a table of cos/sin rows, a dimension the kernel covers only in
part is taken equal to the whole, a load through a project macro is followed, a condition narrows
the offsets computed before it, and the launch's dim3 is the one in the launch's scope."""
from astra_cuda import api, infer
from astra_cuda.model import source, spec

ROTARY = """#define MY_LDG(p) __ldg(p)
__global__ void rotary(const long* positions, float* query, float* key, const float* cache, int rot_dim,
                       long query_stride, long key_stride, long head_stride, int num_heads, int num_kv_heads) {
  const float* row = cache + positions[blockIdx.x] * rot_dim;
  int half = rot_dim / 2;
  for (int i = threadIdx.x; i < num_heads * half; i += blockDim.x) {
    float* q = query + blockIdx.x * query_stride + (i / half) * head_stride;
    int j = i % half;
    float c = MY_LDG(row + j), s = MY_LDG(row + half + j), x = q[j], y = q[half + j];
    q[j] = x * c - y * s; q[half + j] = y * c + x * s;
  }
  for (int i = threadIdx.x; i < num_kv_heads * half; i += blockDim.x) {
    float* k = key + blockIdx.x * key_stride + (i / half) * head_stride;
    int j = i % half;
    float c = MY_LDG(row + j), s = MY_LDG(row + half + j), x = k[j], y = k[half + j];
    k[j] = x * c - y * s; k[half + j] = y * c + x * s;
  }
}
void launch(const long* pos, float* q, float* k, const float* cache, int num_tokens, int rot_dim, int heads,
            int kv_heads, long q_stride, long k_stride, long h_stride) {
  rotary<<<num_tokens, 256>>>(pos, q, k, cache, rot_dim, q_stride, k_stride, h_stride, heads, kv_heads);
}
"""

PARTIAL = """__global__ void partial(float* x, int rot_dim, int stride, int heads, int head_size) {
  for (int i = threadIdx.x; i < heads * rot_dim; i += blockDim.x) {
    int head = i / rot_dim;
    x[blockIdx.x * stride + head * head_size + i % rot_dim] *= 2.0f;
  }
}
void launch(float* x, int tokens, int rot_dim, int heads, int head_size) {
  partial<<<tokens, 128>>>(x, rot_dim, heads * head_size, heads, head_size);
}
"""

ROTATE_HALF = """__global__ void rotate_half(const float* src, float* dst, int h, int d, int stride_s, int stride_h,
                            int stride_d) {
  for (int d_id = threadIdx.x; d_id < d; d_id += blockDim.x) {
    for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
      int off = blockIdx.x * stride_s + h_id * stride_h + d_id * stride_d;
      float r = (d_id + d / 2 < d) ? -src[off + (d / 2) * stride_d] : src[off + (d / 2 - d) * stride_d];
      dst[off] = src[off] + r;
    }
  }
}
__global__ void other(const float* src, float* dst) { dst[blockIdx.x] = src[blockIdx.x]; }
void launch(const float* src, float* dst, int s, int h, int d) {
  int warps = h < 16 ? 4 : 8;
  dim3 blocks(s);
  if (s > 1000) {
    dim3 blocks(s / 4);
    other<<<blocks, 32>>>(src, dst);
    return;
  }
  dim3 threads(32, warps);
  rotate_half<<<blocks, threads>>>(src, dst, h, d, h * d, d, 1);
}
"""

PER_HEAD = """__global__ void per_head(float* out, const float* in, int heads, int hidden) {
  int head = blockIdx.y, col = threadIdx.x, row = blockIdx.x;
  out[row * hidden + head * (hidden / heads) + col] = in[(head * gridDim.x + row) * (hidden / heads) + col];
}
void launch(float* out, const float* in, int rows, int heads, int hidden) {
  per_head<<<dim3(rows, heads), hidden / heads>>>(out, in, heads, hidden);
}
"""


def _loaded(text, kernel, decide=None):
    snap = api.snapshot(text, "k.cu")
    prop = infer.infer(snap.model.kernel(kernel), snap.model, path="k.cu", decide=decide)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + prop.comment + text[k.span.start_byte:])
    return prop, spec.load(m.kernel(kernel), m)


def _asked(first, trial) -> list[dict]:
    asked: list[dict] = []
    infer.validate.alternatives(first, trial, lambda d: asked.append(d))
    return asked


def _product(shape) -> set[str]:
    return {d.strip() for dim in shape for d in dim.split("*")}


def test_strides_of_a_contiguous_layout_and_positions_into_a_table():
    prop, s = _loaded(ROTARY, "rotary")
    args = {n: a.value for n, a in s.args.items()}
    assert str(args["head_stride"]) == "rot_dim"                       # innermost: one head's row
    assert _product([str(args["query_stride"])]) == {"rot_dim", "num_heads"}
    assert _product([str(args["key_stride"])]) == {"rot_dim", "num_kv_heads"}
    assert _product(s.args["query"].shape) == {"num_tokens", "num_heads", "rot_dim"}
    assert s.args["cache"].shape == ("V", "rot_dim")                   # read through MY_LDG
    assert str(s.args["positions"].init) == "randint(0, V)"
    assert not any("stride" in n for n in s.sizes)                     # no stride is a free size


def test_a_dimension_covered_in_part_is_taken_equal_to_the_whole_once_a_first_draft_faulted():
    prop, s = _loaded(PARTIAL, "partial")   # first draft: the sizes stay free
    assert s.args["rot_dim"].value == "rot_dim" and any("could not be read" in n for n in prop.notes)
    faulted = infer.validate.Trial(True, False, "launch: the kernel crashed (SIGSEGV)", ("launch",))
    assert {"sizes": "equal"} in _asked(prop, faulted)
    prop, s = _loaded(PARTIAL, "partial", {"sizes": "equal"})
    assert s.args["rot_dim"].value == "head_size"
    assert _product(s.args["x"].shape) == {"tokens", "heads", "head_size"}
    assert any("taken equal to `head_size`" in n for n in prop.notes)


def test_a_condition_narrows_offsets_set_before_it_and_the_dim3_in_the_launch_scope():
    prop, s = _loaded(ROTATE_HALF, "rotate_half")
    assert s.grid == ("s",)                                  # the function's `blocks`, not the branch's
    assert s.block == ("32", "4 if h < 16 else 8")                     # the host's choice by size
    assert _product(s.args["src"].shape) == {"s", "h", "d"} and _product(s.args["dst"].shape) == {"s", "h", "d"}


def test_threads_per_head_a_division_of_two_sizes():
    prop, s = _loaded(PER_HEAD, "per_head")
    assert s.block == ("hidden / heads",) and s.require == ("hidden % heads == 0",)
    assert _product(s.args["out"].shape) == {"rows", "hidden"} and _product(s.args["in"].shape) == {"rows", "hidden"}


def test_a_condition_in_a_definition_that_a_later_condition_narrows():
    # narrowing `i` re-evaluates `lim`, whose own condition narrows `i` again: once, not forever
    text = """__global__ void k(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lim = (i < n) ? i : n - 1;
  if (i < n) out[lim] = 1.0f;
}
void launch(float* out, int n) { k<<<(n + 255) / 256, 256>>>(out, n); }
"""
    prop, s = _loaded(text, "k")
    assert s.args["out"].shape == ("n",)


BLOCKWISE = """__global__ void dequant(const signed char* q, const float* absmax, float* out, int blocksize, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = q[i] * absmax[i / blocksize];
}
void launch(const signed char* q, const float* absmax, float* out, int blocksize, int n) {
  dequant<<<(n + 255) / 256, 256>>>(q, absmax, out, blocksize, n);
}
"""

GROUPWISE = """__global__ void deq(const signed char* q, const float* scales, float* out, int cols, int group) {
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[blockIdx.x * cols + c] = q[blockIdx.x * cols + c] * scales[blockIdx.x * (cols / group) + c / group];
}
void launch(const signed char* q, const float* s, float* out, int rows, int cols, int group) {
  deq<<<rows, 256>>>(q, s, out, cols, group);
}
"""

# bitsandbytes' form: a shift by the log2 of the block size (a power of two, so probed as one)
SHIFTED = BLOCKWISE.replace("absmax[i / blocksize]", "__ldg(&absmax[i >> (31 - __clz(blocksize))])")


def test_one_scale_per_block_or_group_a_quotient_of_two_sizes():
    # the ceiling where nothing makes the divisor divide the size: it covers what the kernel reads
    _, s = _loaded(BLOCKWISE, "dequant")
    assert s.args["absmax"].shape == ("cdiv(n, blocksize)",)
    assert s.shape("absmax", {"n": 1001, "blocksize": 100}) == (11,)
    _, s = _loaded(GROUPWISE, "deq")
    assert s.args["scales"].shape == ("rows", "cdiv(cols, group)")
    assert _product(s.args["q"].shape) == {"rows", "cols"}
    _, s = _loaded(SHIFTED, "dequant")
    assert s.args["absmax"].shape == ("cdiv(n, blocksize)",)
    assert "(blocksize & (blocksize - 1)) == 0" in s.require


# bitsandbytes' kgemm_4bit_inference_naive: one scale per `blocksize` entries of the flattened M x K
# weight, `absmax[(2 * ldb * row + k) >> log2(blocksize)]` with ldb = K / 2 bytes a row of 4-bit
# values; the scale is read before the row's `row < M` test (the last block's rows past M read on)
FLAT_BLOCKS = """__global__ void gemv4(int M, int K, const float* A, const unsigned char* B, const float* absmax,
                      float* out, int ldb, int blocksize) {
  int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc = 0.0f;
  for (int k = lane * 32; k < K; k += 32 * 32) {
    float s = absmax[((2 * ldb * row) + k) >> (31 - __clz(blocksize))];
    if (row < M)
      for (int j = 0; j < 32 && k + j < K; j++) acc += A[k + j] * (float)(B[ldb * row + (k + j) / 2] & 15) * s;
  }
  if (row < M && lane == 0) out[row] = acc;
}
void launch(int m, int k, const float* A, const unsigned char* B, const float* absmax, float* out, int ldb,
            int blocksize) {
  gemv4<<<(m + 3) / 4, 128>>>(m, k, A, B, absmax, out, ldb, blocksize);
}
"""


def test_one_scale_per_block_of_a_flattened_matrix_a_quotient_of_a_product():
    # a quotient of M * K, not of either size alone (it fell back to [M, K], far more than the
    # program's cdiv(M * K, blocksize) floats); confirmed with K, not the grid's M, one past a multiple;
    # the last block's rows past M read it too, so M is rounded up to the grid's whole blocks of 4 rows
    _, s = _loaded(FLAT_BLOCKS, "gemv4")
    assert s.args["absmax"].shape == ("cdiv(cdiv(M, 4) * 4 * K, blocksize)",), s.args["absmax"].shape
    assert s.shape("absmax", {"M": 3, "K": 100, "blocksize": 64}) == (7,)
    # a row of groups still reads as one: the single sizes are tried before a product
    _, s = _loaded(GROUPWISE, "deq")
    assert s.args["scales"].shape == ("rows", "cdiv(cols, group)")

# FlashInfer's RoPE shape: each thread moves a vector of a HEAD_DIM row and rotates the first
# `rot` elements with their partner half a rotation away, picked by a conditional on the thread
ROPE_HALF = """template <unsigned head_dim, unsigned vec>
__global__ void rope_half(const float* in, float* out, unsigned rot, unsigned long stride_n) {
  const float* x = in + blockIdx.x * stride_n;
  float4 v = *reinterpret_cast<const float4*>(x + threadIdx.x * vec);
  if (threadIdx.x * vec < rot) {
    const float* partner = x + (threadIdx.x * vec < rot / 2 ? threadIdx.x * vec + rot / 2
                                                            : threadIdx.x * vec - rot / 2);
    float4 p = *reinterpret_cast<const float4*>(partner);
    v.x -= p.x; v.y -= p.y; v.z -= p.z; v.w -= p.w;
  }
  *reinterpret_cast<float4*>(out + blockIdx.x * head_dim + threadIdx.x * vec) = v;
}
void launch(const float* in, float* out, unsigned n, unsigned rot) {
  CHECK_ROT
  rope_half<64, 4><<<n, 16>>>(in, out, rot, 64);
}
"""


def test_a_conditional_on_a_scaled_thread_index_keeps_each_branch_inside_the_row():
    # `t * vec < rot / 2 ? t * vec + rot / 2 : t * vec - rot / 2` under `rot <= 64` stays in the
    # row of 64: the condition narrows the thread index itself, not only a name compared bare
    prop, s = _loaded(ROPE_HALF.replace("CHECK_ROT", "if (rot > 64) throw 1;"), "rope_half")
    assert "rot <= 64" in s.require
    assert s.args["in"].shape == ("n", "64")


def test_a_size_that_reads_past_a_fixed_row_is_taken_equal_to_it_once_a_draft_faulted():
    # no check in the launcher: `rot` past 64 reads past the row, so the row's width is tried
    prop, s = _loaded(ROPE_HALF.replace("CHECK_ROT", ""), "rope_half", {"sizes": "equal"})
    assert s.args["rot"].value == "64" and s.args["in"].shape == ("n", "64")
    assert any("taken equal to `64`" in n for n in prop.notes)
