"""Issue 25: a pointer parameter the kernel tests against null is an optional input
(TransformerEngine rope's `cu_seqlens`: THD when given, SBHD when null; FasterTransformer
topk_stage1's `top_ks`, `finished`, `skip_decode`). The spec passes one as `"null"`, and inference
tries that when the draft that gives it a buffer does not run cleanly."""
from astra_cuda import api
from astra_cuda.infer.body_facts import null_tested
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
    assert null_tested(source.parse(text).kernel("k")) == {"a", "b", "c", "e"}


def test_an_optional_table_of_offsets_is_proposed_null_after_its_draft_leaves_outputs_unwritten(project):
    path = project("k.cu", ROPE)
    p = api.infer_spec(api.snapshot(ROPE, str(path)), "shift")
    assert 'cu_seqlens = "null"' in p.comment, p.comment + "\n".join(p.notes)
    text = p.comment + ROPE
    v = _check(project, text, "shift")
    assert v.passed, v.human()


TOPK = ("__global__ void first_k(const float* x, int* ids, const int* top_ks, const bool* finished,\n"
        "                        const int* end_ids, int max_k, int vocab) {\n"
        "  int b = blockIdx.x;\n"
        "  int k = (top_ks != nullptr) ? top_ks[b] : max_k;\n"
        "  if (finished != nullptr && finished[b]) { ids[b * max_k] = end_ids[b]; return; }\n"
        "  for (int i = threadIdx.x; i < k; i += blockDim.x) ids[b * max_k + i] = x[b * vocab + i] > 0;\n}\n"
        "#define CASE_K(K_MIN, K_MAX, B) case K_MIN ... K_MAX: first_k<<<batch, B>>>(x, ids, top_ks, fin, e, k, v); break;\n"
        "void run(const float* x, int* ids, const int* top_ks, const bool* fin, const int* e, int batch, int k, int v) {\n"
        "  switch (k) {\n    CASE_K(1, 16, 32);\n    CASE_K(17, 64, 64);\n  }\n}\n")


def test_with_optional_pointers_null_the_branches_that_test_them_are_decided(project):
    path = project("k.cu", TOPK)
    snap = api.snapshot(TOPK, str(path))
    p = api.infer.infer(snap.model.kernel("first_k"), snap.model, path=str(path), decide={"optional": "null"})
    # k is max_k (no table of per-row counts), end_ids is read only where `finished` is given: one element
    assert "V" not in p.comment and "randint" not in p.comment, p.comment
    assert 'end_ids  = { type = "int32", shape = ["1"] }' in p.comment, p.comment
    assert 'top_ks   = "null"' in p.comment and 'finished = "null"' in p.comment


def test_a_launch_under_a_case_range_of_a_macro_requires_the_range(project):
    path = project("k.cu", TOPK)
    p = api.infer_spec(api.snapshot(TOPK, str(path)), "first_k", run=False)
    assert 'require = ["max_k >= 1", "max_k <= 16"]' in p.comment, p.comment


# a position table read at `step` rows, less a per-row count when one is given (FasterTransformer's
# embeddingLookupPosEncoding: the count a `const bool` flag tests, the offset updated in place)
POS = ("__global__ void add_pos(float* out, const float* pos, const int* pad, int n, int h, int step) {\n"
       "  const bool use_pad = pad != nullptr;\n"
       "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * h; i += blockDim.x * gridDim.x) {\n"
       "    int row = i / h, off = step;\n"
       "    if (use_pad) off -= pad[row];\n"
       "    off *= h;\n"
       "    out[i] = pos[off + i % h];\n  }\n}\n")


def test_a_local_updated_in_place_once_per_trip_keeps_its_interval():
    from astra_cuda.model import access
    k = source.parse(POS).kernel("add_pos")
    facts = access.analyse(k, {"n": 64, "h": 32, "step": 100}, (4, 1, 1), (32, 1, 1),
                           {"out": 4, "pos": 4, "pad": 4}, {"pad"}, 1000, {})
    assert facts.uses["pos"].hi == 100 * 32 + 31 and not facts.uses["pos"].unknown


def test_a_const_flag_a_null_pointer_sets_decides_its_branch(project):
    path = project("k.cu", POS)
    snap = api.snapshot(POS, str(path))
    p = api.infer.infer(snap.model.kernel("add_pos"), snap.model, path=str(path), decide={"optional": "null"})
    assert 'pad  = "null"' in p.comment and '"step + 1", "h"' in p.comment, p.comment


def test_a_pointer_a_helper_tests_against_null_is_optional():
    """exllamav2's rope hands `past_lens` to the helper that tests it (`else if (past_lens)`)."""
    text = ("__device__ void add_past(float* o, const int* lens, int n) {\n  if (lens) n += lens[0];\n  o[0] = n;\n}\n"
            "__global__ void k(float* o, const int* lens, int n) {\n  add_past(o, lens, n);\n}\n")
    from astra_cuda.model import access
    helpers = access.helpers_of([text.split("__global__")[0]])
    assert null_tested(source.parse(text).kernel("k"), helpers) == {"lens"}


def test_a_size_compared_with_a_negative_sentinel_takes_no_branch_for_it():
    """`if (past == -1) past = lens[0];`: no size is -1, so a table read at `past` reaches `past`,
    not whatever `lens` holds."""
    from astra_cuda.model import access
    text = ("__global__ void k(float* o, const float* tab, const int* lens, int past) {\n"
            "  if (past == -1) past = lens[0];\n  o[threadIdx.x] = tab[past + threadIdx.x];\n}\n")
    facts = access.analyse(source.parse(text).kernel("k"), {"past": 100}, (1, 1, 1), (32, 1, 1),
                           {"o": 4, "tab": 4, "lens": 4}, {"lens"}, 5000, {})
    assert facts.uses["tab"].hi == 131 and not facts.uses["lens"].read


def test_a_table_read_at_an_offset_plus_a_row_divided_by_a_size_covers_every_row(project):
    """`tab[(past + row / heads) * d + c]` (exllamav2's rope over sin and cos): largest where
    heads is 1, so the table has past + rows rows of d."""
    text = ("__global__ void rot(float* x, const float* tab, int rows, int d, int heads, int past) {\n"
            "  int c = blockIdx.y * blockDim.x + threadIdx.x, row = blockIdx.x;\n  if (c >= d) return;\n"
            "  x[row * d + c] *= tab[(past + row / heads) * d + c];\n}\n"
            "void run(float* x, const float* tab, int rows, int d, int heads, int past) {\n"
            "  dim3 grid(rows, (d + 127) / 128);\n  rot<<<grid, 128>>>(x, tab, rows, d, heads, past);\n}\n")
    path = project("rot.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "rot", run=False)
    assert 'tab   = { type = "float", shape = ["past + rows", "d"] }' in p.comment, p.comment
