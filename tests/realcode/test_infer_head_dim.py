"""A minimal case written here of how apex's fused rope gets its sizes: the entry point reads the
head's dim and the rotated part off 4-D tensors (`d = input.size(3)`, `d2 = freqs.size(3)`, the
[s, b, h, d] layout attention's activations take) and hands them through a dispatcher to the
launch. Named like nothing, `d2` was tested at 1 and 100 only, where a rotate-half loop's vector
path (half a multiple of the vector) is never reached; read off the fourth dimension, it is a
head's dim: timed at 128 and tested there too."""

from .conftest import inferred

ROPE = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; int64_t stride(int) const; void* data_ptr() const; }; }
__global__ void rope_fwd(const int h, const int d2, const int stride_s, const int stride_h,
                         const float* src, const float* freqs, float* dst) {
  int s_id = blockIdx.x;
  for (int d_id = threadIdx.x; d_id < d2; d_id += blockDim.x) {
    float v_sin, v_cos;
    sincosf(freqs[s_id * d2 + d_id], &v_sin, &v_cos);
    for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
      int off = s_id * stride_s + h_id * stride_h + d_id;
      float x = src[off];
      float r = (d_id + d2 / 2 < d2) ? -src[off + d2 / 2] : src[off + d2 / 2 - d2];
      dst[off] = x * v_cos + r * v_sin;
    }
  }
}
void dispatch_rope(int s, int h, int d2, int stride_s, int stride_h, const float* in, const float* f, float* out) {
  dim3 threads(32, 4);
  rope_fwd<<<s, threads>>>(h, d2, stride_s, stride_h, in, f, out);
}
void rope(at::Tensor& input, at::Tensor& freqs, at::Tensor& output) {
  const int s = input.size(0);
  const int h = input.size(2);
  const int d2 = freqs.size(%(axis)s);
  dispatch_rope(s, h, d2, input.stride(0), input.stride(2), (const float*)input.data_ptr(),
                (const float*)freqs.data_ptr(), (float*)output.data_ptr());
}
"""


def _spec(project, axis: str):
    return inferred(project, "rope.cu", ROPE % {"axis": axis}, "rope_fwd")


def test_a_size_read_off_a_tensors_fourth_dimension_is_a_heads_dim(project):
    p, s = _spec(project, "3")
    assert list(s.bench["d2"]) == [128], (s.bench, p.notes)
    assert 128 in s.sizes["d2"], s.sizes       # tested there too: the vector path is reached
    assert [n for n in p.notes if "`d2` is read off the caller's tensor (`freqs.size(3)`" in n
            and "a head's dim" in n], p.notes


def test_another_dimension_keeps_the_names_usual_values(project):
    p, s = _spec(project, "1")
    assert not [n for n in p.notes if "a head's dim" in n], p.notes
    assert list(s.bench["d2"]) != [128] or 128 not in s.sizes["d2"], (s.bench, s.sizes)


def test_read_in_the_file_that_includes_the_kernels_header(project):
    # apex's layout: the kernel and its dispatcher in a header, the extents read by the .cu that
    # includes it (a caller only `calls_beside` finds)
    head = ROPE[:ROPE.index("void rope(")]
    unit = '#include "rope.h"\n' + ROPE[ROPE.index("void rope("):] % {"axis": "3"}
    project("rope_cuda.cu", unit)
    p, s = inferred(project, "rope.h", head, "rope_fwd")
    assert list(s.bench["d2"]) == [128], (s.bench, p.notes)
    assert 128 in s.sizes["d2"], s.sizes


def test_a_stride_read_is_no_extent():
    from astra_cuda.infer.launch_callers import extent_dim
    assert extent_dim("static_cast<int>(freqs.size(3))") == 3
    # apex also hands `input.stride(3)` (1 where contiguous): no head's dim
    assert extent_dim("input.stride(3)") is None and extent_dim("x.numel()") is None


def test_a_name_that_says_what_it_counts_keeps_its_values():
    # apex's softmax reads `key_seq_len = input.size(3)`: a sequence in [b, h, sq, sk], no head
    from astra_cuda.infer.sizes import HEAD_DIM_AXIS, layout_value
    assert layout_value("d2", dim=HEAD_DIM_AXIS) is not None
    assert layout_value("key_seq_len", dim=HEAD_DIM_AXIS) is None
    assert layout_value("element_count", dim=HEAD_DIM_AXIS) is None
