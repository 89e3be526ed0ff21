"""Issue 25: a copy helper that vectorizes on its source's alignment alone (a scalar prefix up to
the boundary `addr & (B - 1)` finds, then packs) and stores its destination at the same offsets —
vLLM's vectorize_with_alignment, through which reshape_and_cache_flash writes the key cache. It
runs only where the two offsets are congruent modulo the pack: a spec that draws rows of any
length faulted as misaligned on the GPU (and on the CPU backend's alignment check). Inference
requires whole packs per row; a helper that tests every address it vectorizes needs nothing."""
import pytest

from astra_cuda import api

from .conftest import needs_gxx
from .test_infer_asm_accesses import infer

GATHER = """#include <cstdint>
template <typename T, int N> struct alignas(sizeof(T) * N) pack_t { T v[N]; };
// copies n values in packs of N where `src` is aligned; `dst` is taken to sit at the same offset
template <int N, typename T>
__device__ void copy_on_src(const T* src, T* dst, int n) {
  constexpr int B = N * sizeof(T);
  int skew = reinterpret_cast<uintptr_t>(src) & (B - 1);
  int head = min(((B - skew) & (B - 1)) / (int)sizeof(T), n);
  for (int i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  src += head; dst += head; n -= head;
  const pack_t<T, N>* s = reinterpret_cast<const pack_t<T, N>*>(src);
  pack_t<T, N>* d = reinterpret_cast<pack_t<T, N>*>(dst);
  for (int i = threadIdx.x; i < n / N; i += blockDim.x) d[i] = s[i];
  for (int i = n / N * N + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}
__global__ void gather_rows(const float* table, float* out, const int* ids, int width) {
  copy_on_src<4>(table + (long)ids[blockIdx.x] * width, out + (long)blockIdx.x * width, width);
}
void gather(const float* t, float* o, const int* ids, int rows, int width) {
  gather_rows<<<rows, 128>>>(t, o, ids, width);
}
"""


def _check(project, text):
    path = project("gather.cu", text)
    (v,) = api.check(api.snapshot(text, str(path)), "gather_rows", backend="cpu", quick=True, pin_first=False)
    return v


def test_a_destination_stored_at_the_offsets_the_source_aligns_needs_whole_packs_per_row(project):
    s, p = infer(project, "gather.cu", GATHER, "gather_rows")
    assert "width % 4 == 0" in s.require, p.comment
    assert any("tests only `table`'s address" in n and "`out`" in n for n in p.notes), p.notes


@needs_gxx
def test_the_inferred_spec_runs_under_the_alignment_check_and_rows_of_any_length_do_not(project):
    s, p = infer(project, "gather.cu", GATHER, "gather_rows")
    at = GATHER.index("__global__")
    text = GATHER[:at] + p.comment + GATHER[at:]
    v = _check(project, text)
    assert v.passed, v.human()
    # the same spec with rows of 3 floats: a row's table offset and its output offset differ mod 4
    odd = text.replace('require = ["width % 4 == 0"]\n', "")
    odd = odd.replace(odd[odd.index("width = [", odd.index("[sizes]")):].split("\n", 1)[0], "width = [3]", 1)
    assert odd != text and "width = [3]" in odd
    bad = _check(project, odd)
    assert not bad.passed and "misaligned" in bad.human(), bad.human()


@needs_gxx
@pytest.mark.parametrize("old,new", [
    # either address off a pack's boundary copies element by element: any row length runs
    ("  int skew = reinterpret_cast<uintptr_t>(src) & (B - 1);\n",
     "  if ((reinterpret_cast<uintptr_t>(src) & (B - 1)) || (reinterpret_cast<uintptr_t>(dst) & (B - 1))) {\n"
     "    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];\n    return;\n  }\n"
     "  int skew = 0;\n"),
    # vLLM's int8 quantizers: `in + token * hidden` and `out + token * hidden` handed to the same
    # helper — the offsets are equal, so the prefix that aligns one aligns the other at any width
    ("table + (long)ids[blockIdx.x] * width", "table + (long)blockIdx.x * width"),
], ids=["every_address_tested", "same_offsets"])
def test_no_whole_packs_where_every_vectorized_address_is_tested_or_at_the_aligned_offsets(project, old, new):
    """Nothing is required of `width`, and the spec's odd rows pass the check."""
    text = GATHER.replace(old, new)
    assert text != GATHER
    s, p = infer(project, "gather.cu", text, "gather_rows")
    assert not any(r.startswith("width %") for r in s.require) and any(v % 4 for v in s.sizes["width"]), p.comment
    at = text.index("__global__")
    v = _check(project, text[:at] + p.comment + text[at:])
    assert v.passed, v.human()
