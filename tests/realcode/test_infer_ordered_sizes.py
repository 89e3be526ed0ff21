"""A minimal case written here of llm-awq's fused rope (a copy of TransformerEngine's with the
launcher's `d2 <= d` check commented out): the first `d2` elements of each row of `d` are rotated,
the rest copied (`for (i = d2 + tid; i < d; ...)`). Probed with `d2` and `d` drawn apart, the kernel
reaches `max(d, d2)` into a row — no product of sizes — so the first draft fitted odd shapes, tested
`d2` past `d` (a fault) and timed it at 1. Probed with `d2` below `d`, every buffer fits: `d2 <= d`
is required, and `d2` is timed at the row's width."""

from .conftest import inferred

ROPE = """#include <cstdint>
namespace at { struct Tensor { int64_t size(int) const; void* data_ptr() const; }; }
__global__ void rope_rest(const float* src, const float* freqs, float* dst, const int h, const int d,
                          const int d2, const int stride_s, const int stride_h) {
  int s_id = blockIdx.x;
  for (int d_id = threadIdx.x; d_id < d2; d_id += blockDim.x) {
    float v_sin, v_cos;
    sincosf(freqs[s_id * d2 + d_id], &v_sin, &v_cos);
    for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
      int off = s_id * stride_s + h_id * stride_h + d_id;
      float r = (d_id + d2 / 2 < d2) ? -src[off + d2 / 2] : src[off + d2 / 2 - d2];
      dst[off] = src[off] * v_cos + r * v_sin;
    }
  }
  if (d > d2) {
    for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
      for (int d_id = d2 + threadIdx.x; d_id < d; d_id += blockDim.x) {
        int off = s_id * stride_s + h_id * stride_h + d_id;
        dst[off] = src[off];
      }
    }
  }
}
void launch_rope(const float* in, const float* f, float* out, int s, int h, int d, int d2, int stride_s,
                 int stride_h) {
  dim3 threads(32, 4);
  rope_rest<<<s, threads>>>(in, f, out, h, d, d2, stride_s, stride_h);
}
void rope(at::Tensor& input, at::Tensor& freqs, at::Tensor& output) {
  const int s = input.size(0);
  const int h = input.size(2);
  const int d = input.size(%(axis)s);
  const int d2 = freqs.size(-1);
  launch_rope((const float*)input.data_ptr(), (const float*)freqs.data_ptr(), (float*)output.data_ptr(),
              s, h, d, d2, h * d, d);
}
"""


def _spec(project, axis: str = "3"):
    return inferred(project, "rope.cu", ROPE % {"axis": axis}, "rope_rest")


def test_the_rotated_part_is_required_within_its_row(project):
    p, s = _spec(project)
    assert "d2 <= d" in s.require, (s.require, p.notes)
    assert "d <= d2" not in s.require
    shapes = {n: list(s.args[n].shape) for n in ("src", "dst", "freqs")}
    assert shapes["src"][-1] == "d" and shapes["dst"][-1] == "d", (shapes, p.comment)
    assert shapes["freqs"][-1] == "d2", (shapes, p.comment)
    assert "d" in s.sizes and "d2" in s.sizes   # two sizes, not one taken equal to the other
    assert [n for n in p.notes if n.startswith("`d2 <= d`: only then do the kernel's accesses fit")], p.notes


def test_the_rotated_part_is_timed_at_the_rows_width(project):
    # `d = input.size(3)`: a head's dim (128); `d2`, at most `d`, timed at that too — not at 1
    p, s = _spec(project)
    assert list(s.bench["d"]) == [128], (s.bench, p.notes)
    assert list(s.bench["d2"]) == [128], (s.bench, p.notes)


def test_a_row_read_elsewhere_leaves_the_part_its_usual_values(project):
    # `d` read off another dimension: no head's dim to time the part at (still required within it)
    p, s = _spec(project, "1")
    assert "d2 <= d" in s.require, (s.require, p.notes)
    assert not [n for n in p.notes if "the whole row" in n], p.notes


def test_a_bare_dimension_name_read_off_the_fourth_axis_is_a_heads_dim():
    from astra_cuda.infer.sizes import HEAD_DIM, HEAD_DIM_AXIS, layout_value
    assert layout_value("d", dim=HEAD_DIM_AXIS) is not None and layout_value("d", dim=HEAD_DIM_AXIS)[0] == HEAD_DIM
    assert layout_value("hidden", dim=HEAD_DIM_AXIS) is None   # says what it counts: keeps its values
    assert layout_value("d", dim=1) is None
