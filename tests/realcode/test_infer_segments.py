"""Issue 25: CSR segment boundaries (`indptr`, `cu_seqlens`: FlashInfer's batched rotary, paged
KV caches, varlen attention). An index array read at `b` and `b + 1` holds boundaries that never
decrease, from 0 to the rows they segment: drawn as `offsets(V)`, `batch + 1` of them, and a row
`indptr[b] + i` with `i` below the segment's length lies below V (not 2 V)."""
import numpy as np

from astra_cuda import api
from astra_cuda.gate import suite
from astra_cuda.model import access, source, spec

from .conftest import needs_gxx

SEGMENTS = ("#include <cstdint>\n"
            "__device__ __forceinline__ size_t at(size_t row, size_t stride) { return row * stride; }\n"
            "__global__ void seg_scale(float* out, const float* x, const int32_t* indptr, uint32_t batch, uint32_t d) {\n"
            "  const uint32_t b = blockIdx.x, rows = blockDim.y;\n"
            "  const uint32_t len = indptr[b + 1] - indptr[b];\n"
            "  for (uint32_t i = 0; i < (len + rows - 1) / rows; ++i)\n"
            "    if (i * rows + threadIdx.y < len)\n"
            "      for (uint32_t j = threadIdx.x; j < d; j += blockDim.x)\n"
            "        out[at(indptr[b] + i * rows + threadIdx.y, d) + j] = 2.0f * x[at(indptr[b] + i * rows + threadIdx.y, d) + j];\n"
            "}\n"
            "void run(float* o, const float* x, const int32_t* indptr, uint32_t batch, uint32_t d) {\n"
            "  seg_scale<<<batch, dim3(32, 4)>>>(o, x, indptr, batch, d);\n}\n")


def test_rows_within_a_segment_reach_the_boundaries_last_value():
    k = source.parse(SEGMENTS).kernel("seg_scale")
    m = source.parse(SEGMENTS)
    helpers = access.helpers_of([it.text for it in m.items if it.kind == "device_function"])
    f = access.analyse(k, {"batch": 7, "d": 100}, [7, 1, 1], [32, 4, 1], {"out": 4, "x": 4, "indptr": 4},
                       {"indptr"}, 50, {}, None, helpers)
    assert f.uses["indptr"].boundaries and f.uses["indptr"].hi == 7          # batch + 1 of them
    assert f.uses["x"].hi == 50 * 100 - 1 and f.uses["out"].hi == 50 * 100 - 1   # V rows, not 2 V


def test_segment_boundaries_are_drawn_as_offsets_of_the_rows(project):
    path = project("seg.cu", SEGMENTS)
    p = api.infer_spec(api.snapshot(SEGMENTS, str(path)), "seg_scale", run=False)
    assert 'indptr = { type = "int32", shape = ["batch + 1"], init = "offsets(V)" }' in p.comment, p.comment
    assert 'x      = { type = "float", shape = ["V", "d"] }' in p.comment, p.comment


def test_an_offsets_init_starts_at_zero_never_decreases_and_ends_at_its_total():
    m = source.parse('/* @astra\ngrid = ["1"]\nblock = ["1"]\n[sizes]\nb = [300]\nV = [40]\n[args]\n'
                     'ptr = { type = "int32", shape = ["b + 1"], init = "offsets(V)" }\n'
                     'out = { type = "float", shape = ["V"], output = true }\n*/\n'
                     '__global__ void k(const int* ptr, float* out) { out[ptr[0]] = 0; }\n')
    s = spec.load(m.kernel("k"), m)
    drawn = suite.inputs(s, {"b": 300, "V": 40}, "normal", 7)["ptr"]
    assert drawn[0] == 0 and drawn[-1] == 40 and len(drawn) == 301 and np.all(np.diff(drawn) >= 0)
    assert len(set(np.diff(drawn).tolist())) > 1   # segments of several lengths, empty ones among them
    for bad, why in (('"offsets"', "takes one bound"), ('"offsets(0, V)"', "takes one bound"),
                     ('"offsets(W)"', "unknown size")):
        b = source.parse(m.text.replace('"offsets(V)"', bad))
        try:
            spec.load(b.kernel("k"), b)
        except spec.SpecErrors as e:
            assert why in e.diagnostics[0].message, e.diagnostics[0].message
        else:
            raise AssertionError(f"{bad} was accepted")


@needs_gxx
def test_the_segmented_kernel_passes_as_inferred(project):
    path = project("seg.cu", SEGMENTS)
    p = api.infer_spec(api.snapshot(SEGMENTS, str(path)), "seg_scale", run=False)
    at = SEGMENTS.index("__global__")
    text = SEGMENTS[:at] + p.comment + SEGMENTS[at:]
    (v,) = api.check(api.snapshot(text, str(path)), "seg_scale", backend="cpu", quick=True, pin_first=False)
    assert v.passed, v.human()
