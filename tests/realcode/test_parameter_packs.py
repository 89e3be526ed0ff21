"""A kernel whose last template parameter is a pack (`typename... ArgTypes`) and whose last
function parameter expands it (`ArgTypes... args`), the shape of apex's multi_tensor_apply_kernel
(the project's instance gives more template arguments than the kernel names parameters): the
pack takes the rest of `instantiate`, and the spec names one argument per element (`args_0`,
`args_1`), as the launch passes them. Written here."""
from __future__ import annotations

from astra_cuda import api
from astra_cuda.model import source, spec
from astra_cuda.model.harness import SpecErrors

KERNEL = """\
#include <cstdint>
__device__ void axpy(int64_t n, float* x, float a, const float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + y[i];
}
template <typename T, typename... ArgTypes>
__global__ void apply_kernel(int64_t n, T x, ArgTypes... args) {
  axpy(n, x, args...);
}
"""

SPEC = """\
/* @astra
grid = ["(n + 255) / 256"]
block = ["256"]
instantiate = "<float *, float, const float *>"
[sizes]
n = [1000]
[args]
n = "n"
x = { type = "float", shape = ["n"], inout = true }
args_0 = { value = 2.0, type = "float" }
args_1 = { type = "float", shape = ["n"] }
*/
"""


def _kernel(text: str = KERNEL):
    (k,) = [k for k in source.parse(text).kernels if k.name == "apply_kernel"]
    return k


def _problems(text: str) -> str:
    try:
        spec.load(_kernel(text), source.parse(text))
    except SpecErrors as e:
        return "; ".join(d.message for d in e.diagnostics)
    return ""


def test_the_pack_parameter_is_one_parameter_per_element():
    k = _kernel()
    assert [(p.name, p.pack) for p in k.params] == [("n", False), ("x", False), ("args", True)]
    targs = k.template_bindings(["float *", "float", "const float *"])
    assert targs == {"T": "float *", "ArgTypes": "float, const float *"}
    got = [(p.index, p.name, p.base_type, p.is_pointer, p.is_const) for p in k.instantiated(targs).params]
    assert got == [(0, "n", "int64_t", False, False), (1, "x", "float", True, False),
                   (2, "args_0", "float", False, False), (3, "args_1", "float", True, True)]
    # an empty pack: the launch passes no argument for it
    assert [p.name for p in k.instantiated(k.template_bindings(["float *"])).params] == ["n", "x"]


def test_a_pack_takes_the_rest_of_instantiate():
    text = KERNEL.replace("template <typename T, typename...", SPEC + "template <typename T, typename...")
    assert _problems(text) == ""
    # without the pack, more arguments than parameters is still refused
    fixed = text.replace("typename... ArgTypes", "typename A").replace("ArgTypes... args", "A a")
    assert "`instantiate` gives 3 template arguments; 'apply_kernel' has 2" in _problems(fixed)


def test_the_kernel_runs_with_its_pack_expanded(tmp_path):
    text = KERNEL.replace("template <typename T, typename...", SPEC + "template <typename T, typename...")
    path = tmp_path / "pack.cu"
    path.write_text(text)
    (v,) = api.check(api.snapshot(text, str(path)), "apply_kernel", backend="cpu", quick=True, pin_first=False)
    assert v.passed, [f.message for f in v.failures]


# A template parameter instantiated with a class template and passed by value, the shape of
# CUTLASS's cute sgemm_1 tutorial (`ProblemShape shape_MNK` = `cute::Shape<int, int, int>`, 12
# bytes, was given a float: the kernel read its sizes from bytes the launch never gave).
SHAPED = """\
template <class A, class B> struct Pair { A first; B second; };
template <class S> __device__ int count(S s) { return s.first * s.second; }
template <class Shape>
__global__ void fill(Shape shape, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count(shape)) out[i] = 1.0f;
}
void launch(float* out, int m, int n) { fill<Pair<int, int>><<<(m * n + 255) / 256, 256>>>(Pair<int, int>{m, n}, out); }
"""


def test_an_object_of_a_class_template_is_not_given_a_float(tmp_path):
    f = tmp_path / "shaped.cu"
    f.write_text(SHAPED)
    prop = api.infer_spec(api.snapshot(SHAPED, str(f)), "fill", run=False)
    assert any("`shape` is a `Pair<int, int>` (template parameter `Shape`) passed by value" in p
               for p in prop.problems), prop.problems
