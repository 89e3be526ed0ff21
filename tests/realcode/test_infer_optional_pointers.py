"""Issue 25: a pointer parameter the kernel tests against null is an optional input
(TransformerEngine rope's `cu_seqlens`: THD when given, SBHD when null; FasterTransformer
topk_stage1's `top_ks`, `finished`, `skip_decode`). The spec passes one as `"null"`, and inference
tries that when the draft that gives it a buffer does not run cleanly."""
from astra_cuda import api
from astra_cuda.infer.proposal import _null_tested
from astra_cuda.model import source, spec

from .conftest import needs_gxx

pytestmark = needs_gxx

# rows of `d`, offset per batch entry by a table of sequence starts when one is given
ROPE = ("__global__ void shift(const float* src, const int* cu_seqlens, float* dst, int s, int d) {\n"
        "  int s_id = blockIdx.x, b_id = blockIdx.y, row;\n"
        "  if (cu_seqlens != nullptr) {\n"
        "    int start = cu_seqlens[b_id], end = cu_seqlens[b_id + 1];\n"
        "    if (s_id + start >= end) return;\n"
        "    row = s_id + start;\n"
        "  } else {\n    row = b_id * s + s_id;\n  }\n"
        "  for (int i = threadIdx.x; i < d; i += blockDim.x) dst[row * d + i] = 2.0f * src[row * d + i];\n}\n"
        "void launch(const float* src, const int* cu, float* dst, int s, int b, int d) {\n"
        "  dim3 blocks(s, b);\n  shift<<<blocks, 32>>>(src, cu, dst, s, d);\n}\n")


def _check(project, text: str, kernel: str):
    path = project("k.cu", text)
    (v,) = api.check(api.snapshot(text, str(path)), kernel, backend="cpu", quick=True, pin_first=False)
    return v


def test_a_null_pointer_is_passed_where_the_spec_says_null(project):
    comment = ('/* @astra\ngrid = ["s", "b"]\nblock = ["32"]\n[sizes]\ns = [1, 5]\nb = [2, 3]\nd = [7, 64]\n'
               '[args]\nsrc = { type = "float", shape = ["b", "s", "d"] }\ncu_seqlens = "null"\n'
               'dst = { type = "float", shape = ["b", "s", "d"], output = true }\ns = "s"\nd = "d"\n*/\n')
    text = comment + ROPE
    k = source.parse(text).kernel("shift")
    a = spec.load(k, source.parse(text)).args["cu_seqlens"]
    assert a.null and not a.pointer
    v = _check(project, text, "shift")
    assert v.passed, v.human()


def test_a_pointer_is_refused_a_scalar_but_told_of_null(project):
    text = ('/* @astra\ngrid = ["n"]\nblock = ["32"]\n[sizes]\nn = [4]\n[args]\nsrc = "n"\ncu_seqlens = "null"\n'
            'dst = { type = "float", shape = ["n"], output = true }\ns = "n"\nd = "n"\n*/\n') + ROPE
    m = source.parse(text)
    try:
        spec.load(m.kernel("shift"), m)
    except spec.SpecErrors as e:
        assert any('"null"' in d.message and "src" in d.message for d in e.diagnostics)
    else:
        raise AssertionError("a pointer given a size expression was accepted")


def test_the_pointers_a_kernel_tests_against_null():
    text = ("__global__ void k(float* o, const int* a, const int* b, const int* c, const float* e, int n) {\n"
            "  if (!b || (a == NULL)) return;\n  float x = c ? c[0] : 0;\n  if (0 != e) x += e[0];\n"
            "  o[n] = x;\n}\n")
    assert _null_tested(source.parse(text).kernel("k")) == {"a", "b", "c", "e"}


def test_an_optional_table_of_offsets_is_proposed_null_after_its_draft_leaves_outputs_unwritten(project):
    path = project("k.cu", ROPE)
    p = api.infer_spec(api.snapshot(ROPE, str(path)), "shift")
    assert 'cu_seqlens = "null"' in p.comment, p.comment + "\n".join(p.notes)
    text = p.comment + ROPE
    v = _check(project, text, "shift")
    assert v.passed, v.human()
