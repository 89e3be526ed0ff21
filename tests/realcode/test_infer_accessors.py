"""Issue 25: tensor accessors passed by value — minimal cases written here of what public kernels
show. TGI's `forward_masked_softmax_kernel` (fused_attention_cuda.cu) takes its scores, mask and
result as `torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits>` and indexes them
`scores[batch_id][kv_id]` (rows of a block, a guard on the row): no spec was proposed
("an array object cannot be given by the spec format yet"). Each dimension is measured apart and
the accessor proposed as a buffer of that shape with `accessor = true`."""
from tests.realcode.test_infer_asm_accesses import infer

SOFTMAX = """#include <torch/extension.h>
template <typename scalar_t>
__global__ void masked_rows(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> scores,
                            const torch::PackedTensorAccessor32<bool, 2, torch::RestrictPtrTraits> mask,
                            torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> result,
                            const int64_t kv_length, const int64_t batch_size) {
  const auto batch_id = blockIdx.x * blockDim.y + threadIdx.y;
  if (batch_id < batch_size) {
    for (int kv = threadIdx.x; kv < kv_length; kv += blockDim.x)
      result[batch_id][kv] = mask[batch_id][kv] ? scalar_t(0) : scores[batch_id][kv];
  }
}

void launch(torch::Tensor scores, torch::Tensor mask, torch::Tensor probs) {
  const auto batch = scores.size(0), kv_length = scores.size(1);
  AT_DISPATCH_FLOATING_TYPES(scores.scalar_type(), "masked_rows", [&] {
    masked_rows<scalar_t><<<(batch + 3) / 4, dim3(32, 4)>>>(
        scores.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
        mask.packed_accessor32<bool, 2, torch::RestrictPtrTraits>(),
        probs.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(), kv_length, batch);
  });
}
"""


def test_accessors_indexed_per_dimension_are_buffers_of_that_shape(project):
    s, p = infer(project, "fused_attention.cu", SOFTMAX, "masked_rows")
    scores, mask, result = s.args["scores"], s.args["mask"], s.args["result"]
    assert scores.accessor and mask.accessor and result.accessor, p.comment
    assert scores.shape == mask.shape == result.shape == ("batch_size", "kv_length"), p.comment
    assert (scores.dtype.name, mask.dtype.name) == ("float", "bool")
    assert result.output and not scores.written and not mask.written
    assert not any("cannot be given by the spec format" in n for n in p.notes), p.notes


def test_an_accessor_of_a_template_parameters_dimensions_and_a_3d_one(project):
    """N given by the kernel's template parameter (`<T, D>`, D = 3 at the launch): three sizes."""
    s, p = infer(project, "copy3.cu", """#include <torch/extension.h>
template <typename T, int D>
__global__ void copy3(const at::PackedTensorAccessor64<T, D, at::RestrictPtrTraits> in,
                      at::PackedTensorAccessor64<T, D, at::RestrictPtrTraits> out, int a, int b, int c) {
  const int i = blockIdx.x, j = blockIdx.y;
  if (i < a && j < b)
    for (int k = threadIdx.x; k < c; k += blockDim.x) out[i][j][k] = in[i][j][k];
}

void run(at::Tensor in, at::Tensor out, int a, int b, int c) {
  copy3<float, 3><<<dim3(a, b), 256>>>(in.packed_accessor64<float, 3, at::RestrictPtrTraits>(),
                                       out.packed_accessor64<float, 3, at::RestrictPtrTraits>(), a, b, c);
}
""", "copy3")
    assert s.args["in"].shape == s.args["out"].shape == ("a", "b", "c"), p.comment
    assert s.args["out"].accessor and s.args["out"].output


# TGI's launcher around forward_masked_softmax_kernel: a block shared out among rows by a relation
# over another (`rows_per_block = 1024 / effective_kv`), and the `const dim3` block handed to the
# kernel as well (read as changed: the launch took a guessed block of 256, the kernel a float for it)
LAUNCHER = """#include <torch/extension.h>
template <typename scalar_t, int64_t shard>
__global__ void rows_kernel(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> scores,
                            torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> result,
                            const int64_t effective_kv, const dim3 blockDim, const int64_t rows_per_block,
                            const int64_t kv_length, const int64_t batch_size) {
  const auto row_id = threadIdx.x / effective_kv;
  const auto start = (threadIdx.x % effective_kv) * shard;
  auto end = (threadIdx.x % effective_kv + 1) * shard;
  end = (end > kv_length) ? kv_length : end;
  const auto batch_id = blockIdx.x * rows_per_block + row_id;
  if (batch_id < batch_size)
    for (int kv = start; kv < end; ++kv) result[batch_id][kv] = scores[batch_id][kv] * 2;
}

void launch(torch::Tensor scores, torch::Tensor out, int num_heads) {
  const auto batch = scores.size(0) * num_heads, kv_length = scores.size(1);
  AT_DISPATCH_FLOATING_TYPES(scores.scalar_type(), "rows", [&] {
    const auto MAX_THREADS = 1024;
    const auto SHARD = 4;
    const auto effective_kv = (kv_length - 1) / SHARD + 1;
    const auto rows_per_block = MAX_THREADS / effective_kv;
    const dim3 gridDim((batch - 1) / rows_per_block + 1);
    const dim3 blockDim(MAX_THREADS);
    rows_kernel<scalar_t, SHARD><<<gridDim, blockDim, rows_per_block * 2 * sizeof(float)>>>(
        scores.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
        out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(), effective_kv, blockDim, rows_per_block,
        kv_length, batch);
  });
}
"""


def test_a_block_shared_out_by_a_relation_over_another_and_a_const_dim3_handed_on(project):
    s, p = infer(project, "rows.cu", LAUNCHER, "rows_kernel")
    assert s.block == ("1024",), p.comment
    assert s.args["rows_per_block"].value == "1024 / ((kv_length - 1) / 4 + 1)", p.comment
    assert s.args["scores"].shape == s.args["result"].shape == ("batch_size", "kv_length"), p.comment
    dims = s.args["blockDim"]
    assert dims.struct and dims.fields == ("x", "y", "z") and s.args["blockDim.x"].value == "1024", p.comment


def test_an_accessors_row_and_a_helper_it_is_handed_to(project):
    """`auto row = a[r]; row[c]` indexes the row further, and a device helper handed the accessor
    (`row_sum(a, r)`, its parameter a `const PackedTensorAccessor32<T, 2>&`) is followed."""
    s, p = infer(project, "sums.cu", """#include <torch/extension.h>
template <typename T>
__device__ float row_sum(const torch::PackedTensorAccessor32<T, 2, torch::RestrictPtrTraits>& a, int r, int cols) {
  float s = 0;
  for (int c = 1; c < cols; ++c) s += a[r][c];
  return s;
}
template <typename T>
__global__ void sums(const torch::PackedTensorAccessor32<T, 2, torch::RestrictPtrTraits> a,
                     torch::PackedTensorAccessor32<T, 1, torch::RestrictPtrTraits> out, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  auto row = a[r];
  out[r] = row[0] + row_sum(a, r, cols);
}
void go(torch::Tensor a, torch::Tensor o) {
  int rows = a.size(0), cols = a.size(1);
  sums<float><<<(rows + 127) / 128, 128>>>(a.packed_accessor32<float, 2, torch::RestrictPtrTraits>(),
      o.packed_accessor32<float, 1, torch::RestrictPtrTraits>(), rows, cols);
}
""", "sums")
    assert s.args["a"].shape == ("rows", "cols") and s.args["out"].shape == ("rows",), p.comment
    assert s.args["out"].output and not s.args["a"].written
