"""Correct rewrites the gate once refused, and the true refusals next to them (issue 24, item 5).

Each false refusal was seen on real code; the kernels here are minimal ones written for the
test. On the CPU backend."""
import os

import pytest

from astra_cuda.compile import extract
from astra_cuda import gate
from astra_cuda.model import source, spec as spec_mod

from .test_catalogue import cpu  # noqa: F401 - fixture

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")

LN_SIG = "__global__ void layernorm(float* out, const float* x, const float* w, const float* b, int T, int C)"

# The LayerNorm made warp-per-row: warp 0 reduces the whole row (32 partial sums, shuffles)
# where the reference has 128 partial sums and a tree: the same arithmetic in another order.
LN_WARP_PER_ROW = LN_SIG + r""" {
  __shared__ float stat[2];
  const float* xr = x + (long)blockIdx.x * C;
  if (threadIdx.x < 32) {
    float s = 0.f;
    for (int i = threadIdx.x; i < C; i += 32) s += xr[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / C;
    float v = 0.f;
    for (int i = threadIdx.x; i < C; i += 32) {
      const float d = xr[i] - mean;
      v += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) {
      stat[0] = mean;
      stat[1] = rsqrtf(v / C + 1e-5f);
    }
  }
  __syncthreads();
  const float mean = stat[0], rstd = stat[1];
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    out[(long)blockIdx.x * C + i] = (xr[i] - mean) * rstd * w[i] + b[i];
}"""


def units(name: str, kernel: str, body: str | None = None):
    """(reference unit, candidate unit, spec) for kernel `kernel` of tests/gate/kernels/`name`.cu,
    the candidate with the kernel's definition replaced by `body` (None: the kernel itself)."""
    path = os.path.join(KERNELS, f"{name}.cu")
    text = open(path).read()
    model = source.parse(text)
    spec = spec_mod.load(model.kernel(kernel), model)
    ref = extract.unit(text, path, kernel)
    cand_text = text if body is None else extract.replace_kernel(text, kernel, body)
    return ref, extract.unit(cand_text, path, kernel), spec


def values_failures(v):
    return [f for f in v.failures if f.check == "compare"]


def test_a_reordered_reduction_within_the_references_own_rounding_error_passes(cpu):
    ref, cand, spec = units("layernorm", "layernorm", LN_WARP_PER_ROW)
    v = gate.check(ref, cand, spec, cpu, quick=True, seed=5)
    assert v.passed, v.human()
    assert any("twice the reference's own rounding error" in n for n in v.coverage.notes), v.coverage.notes


# The same LayerNorm with the variance in one pass, E[x^2] - mean^2: with the rows' offset of
# 100 the difference cancels almost every digit. Not a reordering: an unstable formula.
LN_ONE_PASS_VARIANCE = LN_SIG + r""" {
  __shared__ float red[128], red2[128];
  const float* xr = x + (long)blockIdx.x * C;
  float s = 0.f, s2 = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    s += xr[i];
    s2 += xr[i] * xr[i];
  }
  red[threadIdx.x] = s;
  red2[threadIdx.x] = s2;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) {
      red[threadIdx.x] += red[threadIdx.x + k];
      red2[threadIdx.x] += red2[threadIdx.x + k];
    }
    __syncthreads();
  }
  const float mean = red[0] / C;
  const float rstd = rsqrtf(red2[0] / C - mean * mean + 1e-5f);
  for (int i = threadIdx.x; i < C; i += blockDim.x)
    out[(long)blockIdx.x * C + i] = (xr[i] - mean) * rstd * w[i] + b[i];
}"""

SIGMOID_SIG = "__global__ void sigmoid(float* y, const float* x, int N)"
# Exact between -1 and 1 only, saturated beyond: off by up to 0.27 on about a third of normal data.
SIGMOID_APPROX = SIGMOID_SIG + r""" {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) y[i] = x[i] > 1.0f ? 1.0f : x[i] < -1.0f ? 0.0f : 1.0f / (1.0f + expf(-x[i]));
}"""


@pytest.mark.parametrize("name,kernel,body", [("layernorm", "layernorm", LN_ONE_PASS_VARIANCE),
                                              ("sigmoid", "sigmoid", SIGMOID_APPROX)],
                         ids=["unstable_variance", "approximate_sigmoid"])
def test_real_errors_still_fail_with_the_rounding_allowance(cpu, name, kernel, body):
    ref, cand, spec = units(name, kernel, body)
    v = gate.check(ref, cand, spec, cpu, quick=True, seed=5)
    assert v.status == "failed", v.human()
    f = values_failures(v)[0]
    assert "twice the reference's own rounding error" in f.message, f.message  # measured, and not enough


class _WithoutRoundingModes:
    """A backend that cannot run kernels with another rounding direction (as the GPU's), here the
    CPU backend under another name: the gate then measures the reference's rounding error on the
    `rounding` backend it is given (jobs gives the GPU's checks the CPU backend)."""

    def __init__(self, inner):
        import dataclasses

        self._inner = inner
        self.caps = dataclasses.replace(inner.caps, rounding_modes=False)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_backend_without_rounding_modes_measures_on_the_one_it_is_given(cpu):
    ref, cand, spec = units("layernorm", "layernorm", LN_WARP_PER_ROW)
    other = _WithoutRoundingModes(cpu)
    alone = gate.check(ref, cand, spec, other, quick=True, seed=5)
    assert alone.status == "failed" and values_failures(alone), alone.human()  # the tolerance alone: refused
    helped = gate.check(ref, cand, spec, other, quick=True, seed=5, rounding=cpu)
    assert helped.passed, helped.human()


# ---- the constant-output rule without a reference -------------------------------------------

# Writes a constant (the first bias) where the rows are wide, computes elsewhere.
LN_CONSTANT_ON_REAL_SIZES = LN_SIG + r""" {
  if (C >= 64) {
    for (int i = threadIdx.x; i < C; i += blockDim.x) out[(long)blockIdx.x * C + i] = b[0];
    return;
  }
  for (int i = threadIdx.x; i < C; i += blockDim.x) out[(long)blockIdx.x * C + i] = x[(long)blockIdx.x * C + i] * w[i];
}"""
LN_ZEROS = LN_SIG + r""" {
  for (int i = threadIdx.x; i < C; i += blockDim.x) out[(long)blockIdx.x * C + i] = 0.0f;
}"""


def test_a_constant_output_on_a_degenerate_size_is_no_constant_writer(cpu):
    # LayerNorm over C = 1 (an edge size the gate makes) is its bias everywhere: with no reference to
    # differ from, the rule must see that the output varies on the other sizes.
    _, cand, spec = units("layernorm", "layernorm")
    v = gate.check(None, cand, spec, cpu, seed=5)  # a full check: every edge size
    assert v.passed, v.human()
    assert any("`out` is constant on T=16, C=1" in n and "degenerate" in n for n in v.coverage.notes), v.coverage.notes


# FlashInfer sampling's shape: `valid` reports whether a row had any positive entry, written only
# as constants — true on every row of random data, as the kernel says of valid inputs.
PICK = """/* @astra
grid = ["rows"]
block = ["32"]
[sizes]
rows = [64]
d = [100]
[args]
probs = { type = "float", shape = ["rows", "d"] }
out = { type = "int32", shape = ["rows"], output = true }
valid = { type = "bool", shape = ["rows"], output = true FLAG}
d = "d"
*/
__global__ void pick(const float* probs, int* out, bool* valid, int d) {
  if (threadIdx.x != 0) return;
  int last = -1;
  for (int i = 0; i < d; ++i) if (probs[blockIdx.x * d + i] > 0.f) last = i;
  if (last < 0) { out[blockIdx.x] = 0; valid[blockIdx.x] = false; return; }
  out[blockIdx.x] = last;
  valid[blockIdx.x] = true;
}
"""


@pytest.mark.parametrize("flag", [True, False], ids=["flag", "no_flag"])
def test_a_status_flag_may_be_the_same_everywhere_where_the_spec_says_so(cpu, flag):
    text = PICK.replace("FLAG", ", flag = true" if flag else "")
    model = source.parse(text)
    s = spec_mod.load(model.kernel("pick"), model)
    v = gate.check(None, extract.unit(text, "pick.cu", "pick"), s, cpu, quick=True, seed=5)
    if flag:
        assert v.passed, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == "not_constant", v.human()
        assert "`valid` is constant" in v.failures[0].message


# Its loop starts a block past the row's start (cuda-samples fp16ScalarProduct's `+` for `*`): rows
# shorter than that are all zeros, longer ones vary with the inputs.
LN_SKIPS_SHORT_ROWS = LN_SIG + r""" {
  for (int i = threadIdx.x; i < C; i += blockDim.x) out[(long)blockIdx.x * C + i] = 0.0f;
  for (int i = threadIdx.x + 1024; i < C; i += blockDim.x) out[(long)blockIdx.x * C + i] = x[(long)blockIdx.x * C + i] * w[i];
}"""


@pytest.mark.parametrize("body,why", [(LN_ZEROS, "on every case of the suite"),
                                      (LN_CONSTANT_ON_REAL_SIZES, "on every case of the suite"),
                                      (LN_SKIPS_SHORT_ROWS, "C=768, while it varies with them on the suite's other "
                                                            "cases: at these sizes the kernel ignores its inputs")],
                         ids=["zeros", "constant_on_real_sizes", "skips_short_rows"])
def test_constant_writers_still_fail_without_a_reference(cpu, body, why):
    _, cand, spec = units("layernorm", "layernorm", body)
    v = gate.check(None, cand, spec, cpu, quick=True, seed=5)
    assert v.status == "failed" and v.failures[0].check == "not_constant", v.human()
    assert "C=1" not in v.failures[0].case.describe()  # refused on a real size, not the degenerate one
    # the message says whether the kernel ignores its inputs everywhere or only at the failing sizes
    # (a kernel bug there, as cuda-samples' fp16 scalar product whose loop starts past small sizes)
    assert why in v.failures[0].message, v.failures[0].message


# A dot product whose loop starts a block in (cuda-samples' fp16 scalar product reads
# `threadIdx.x + blockDim.x + blockIdx.x`): at the gate's edge sizes (1, 33, 127, below one block)
# no thread makes a trip and each block writes 0; on the sizes the spec lists it varies.
DOT = """/* @astra
grid = ["16"]
block = ["128"]
[sizes]
n = [1001, 4096]
[args]
a = { type = "float", shape = ["n"] }
b = { type = "float", shape = ["n"] }
out = { type = "float", shape = ["16"], output = true }
n = "n"
*/
__global__ void dot(const float* a, const float* b, float* out, int n) {
  __shared__ float part[128];
  float v = 0.f;
  for (int i = threadIdx.x + blockDim.x + blockIdx.x; i < n; i += gridDim.x * blockDim.x) v += a[i] * b[i];
  part[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int t = 0; t < 128; ++t) s += part[t];
    out[blockIdx.x] = s;
  }
}
"""


def test_a_constant_output_on_an_edge_size_the_spec_does_not_list_is_a_note(cpu):
    model = source.parse(DOT)
    s = spec_mod.load(model.kernel("dot"), model)
    v = gate.check(None, extract.unit(DOT, "dot.cu", "dot"), s, cpu, seed=5)  # a full check: every edge size
    assert v.passed, v.human()
    assert any("`out` is constant on n=127" in n and "edge size" in n for n in v.coverage.notes), v.coverage.notes
    # listed in [sizes], the same size is judged: the kernel ignores its inputs there
    listed = DOT.replace("n = [1001, 4096]", "n = [127, 1001, 4096]")
    model = source.parse(listed)
    s = spec_mod.load(model.kernel("dot"), model)
    v = gate.check(None, extract.unit(listed, "dot.cu", "dot"), s, cpu, seed=5)
    assert v.status == "failed" and v.failures[0].check == "not_constant", v.human()
