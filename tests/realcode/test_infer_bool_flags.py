"""A `bool` kernel parameter the launcher hands down from its own caller (TransformerEngine's rope
`interleaved`, which reaches its C++ from a Python API defaulting it to false) was given the 1.0
every unnamed scalar gets: the spec tested and timed the interleaved path alone, never the
rotate-half path most models take. A rotary layout flag nothing fixes now takes the rotate-half
value its name says; one the launch or every call fixes keeps that value; any other flag keeps
the guess."""

from .conftest import inferred

ROPE = """__global__ void rope_fwd(const float* src, const float* freqs, float* dst, const bool interleaved,
                         const int h, const int d2) {
  int s_id = blockIdx.x;
  for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
    for (int d_id = threadIdx.x; d_id < d2; d_id += blockDim.x) {
      int off = (s_id * h + h_id) * d2 + d_id;
      float r;
      if (!interleaved) {
        r = (d_id + d2 / 2 < d2) ? -src[off + d2 / 2] : src[off + d2 / 2 - d2];
      } else {
        r = (d_id %% 2 == 0) ? -src[off + 1] : src[off - 1];
      }
      dst[off] = src[off] * cosf(freqs[s_id * d2 + d_id]) + r * sinf(freqs[s_id * d2 + d_id]);
    }
  }
}
void rope_launcher(const float* src, const float* freqs, float* dst, const bool interleaved, int s, int h, int d2) {
  dim3 threads(32, 4);
  rope_fwd<<<s, threads>>>(src, freqs, dst, %(launch)s, h, d2);
}
%(caller)s
"""


def _spec(project, launch: str = "interleaved", caller: str = "", flag: str = "interleaved"):
    return inferred(project, "rope.cu", (ROPE % {"launch": launch, "caller": caller}).replace("interleaved", flag),
                    "rope_fwd")


def _interleaved(p, flag: str = "interleaved") -> str:
    line = next(x for x in p.comment.splitlines() if x.split("=")[0].strip() == flag)
    return line.split("=", 1)[1].strip()


def test_an_interleaved_flag_handed_down_unfixed_is_off(project):
    # the launcher's own parameter, and no call of the launcher here: the C API's caller decides
    p, _ = _spec(project)
    assert _interleaved(p) == "0", p.comment
    assert [n for n in p.notes if "`interleaved` = 0: a rotary embedding's layout flag" in n], p.notes
    assert not [n for n in p.notes if "`interleaved` = 1.0 is a guess" in n], p.notes


def test_a_neox_flag_handed_down_unfixed_is_on(project):
    p, _ = _spec(project, flag="is_neox")
    assert _interleaved(p, "is_neox") == "1", p.comment
    assert [n for n in p.notes if "`is_neox` = 1: a rotary embedding's layout flag" in n], p.notes


def test_a_flag_its_name_says_nothing_of_keeps_the_guess(project):
    p, _ = _spec(project, flag="fast_path")
    assert _interleaved(p, "fast_path") == "1", p.comment
    assert [n for n in p.notes if "`fast_path` = 1.0 is a guess" in n], p.notes


def test_a_flag_every_caller_sets_keeps_their_value(project):
    caller = ("void rope(const float* x, const float* f, float* y, int s, int h, int d2) {\n"
              "  rope_launcher(x, f, y, true, s, h, d2);\n}")
    p, _ = _spec(project, caller=caller)
    assert _interleaved(p) == "1", p.comment
    assert [n for n in p.notes if "`interleaved` = 1, as every call of the launcher fixes it" in n], p.notes


def test_callers_that_disagree_fix_nothing(project):
    caller = ("void rope(const float* x, const float* f, float* y, int s, int h, int d2) {\n"
              "  rope_launcher(x, f, y, true, s, h, d2);\n  rope_launcher(x, f, y, false, s, h, d2);\n}")
    p, _ = _spec(project, caller=caller, flag="fast_path")
    assert _interleaved(p, "fast_path") == "1", p.comment
    assert [n for n in p.notes if "`fast_path` = 1.0 is a guess" in n], p.notes


def test_a_flag_the_launch_writes_is_its_value(project):
    p, _ = _spec(project, launch="false", flag="fast_path")
    assert _interleaved(p, "fast_path") == "0", p.comment
    assert [n for n in p.notes if "`fast_path` = 0.0, as the launch passes it" in n], p.notes
