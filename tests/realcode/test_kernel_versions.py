"""Issue 10, breakage 5: two versions of a kernel in one file. A reference with a spec of its own
runs with its own launch; a reference that leaves outputs unwritten is a spec problem, never
compared."""
from astra_cuda import api

from .conftest import needs_gxx

pytestmark = needs_gxx

V1_SPEC = """/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
[sizes]
n = [8, 800, 4096]
[args]
out = { type = "float", shape = ["n"], output = true }
inp = { type = "float", shape = ["n"] }
n = "n"
*/
"""
V1 = """__global__ void relu_kernel1(float* out, const float* inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(inp[i], 0.0f);
}
"""
V2 = """/* @astra
grid = ["cdiv(n, 128 * 4)"]
block = ["128"]
reference = "relu_kernel1"
require = ["n % 4 == 0"]
[sizes]
n = [8, 800, 4096]
[args]
out = { type = "float", shape = ["n"], output = true }
inp = { type = "float", shape = ["n"] }
n = "n"
*/
__global__ void relu_kernel2(float* out, const float* inp, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i < n) {
        float4 v = *reinterpret_cast<const float4*>(inp + i);
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        *reinterpret_cast<float4*>(out + i) = v;
    }
}
"""


def test_a_reference_with_its_own_spec_runs_with_its_own_launch(project):
    f = project("relu.cu", V1_SPEC + V1 + V2)
    (v,) = api.check(api.snapshot(f.read_text(), str(f)), "relu_kernel2", backend="cpu", quick=True)
    assert v.passed and v.compared, v.human()
    assert "relu_kernel1" in v.reference and "own spec" in v.reference


def test_a_reference_that_leaves_outputs_unwritten_is_a_spec_problem(project):
    f = project("relu.cu", V1 + V2)   # relu_kernel1 has no spec: it runs with kernel2's 4x smaller grid
    (v,) = api.check(api.snapshot(f.read_text(), str(f)), "relu_kernel2", backend="cpu", quick=True)
    assert v.status == "error" and not v.failures, v.human()
    assert "spec problem: the reference kernel leaves" in v.log and "`out` unwritten" in v.log
