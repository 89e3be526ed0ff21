"""The file's own helpers in a rewrite (issue 26): an element pack and a ceil-division helper are
found by what their definitions do, used by vectorize and by the grid arithmetic where they do
exactly what the rewrite needs, and left alone otherwise (the rewrite then writes its own code)."""
from pathlib import Path

import pytest

from astra_cuda.agents.offline import TRANSFORMS, context_from_text, helpers, style

ROOT = Path(__file__).resolve().parents[2]
SILU = (ROOT / "examples" / "silu_and_mul.cu").read_text()
KERNEL = "__global__ void k(float* x) {}\n"

VEC_N_T = """template <typename scalar_t, int vec_size>
struct __align__(vec_size * sizeof(scalar_t)) vec_n_t {
  scalar_t val[vec_size];
};
"""


def found(defs: str, kernel: str = KERNEL):
    text = defs + kernel
    return helpers.packs(text, text.index("__global__"))


def test_packs_are_recognised_by_layout_not_by_name():
    assert found(VEC_N_T) == (helpers.Pack("vec_n_t", "val", ("T", "N")),)
    aligned_array = ("template <typename T, /* count */ int N, int Alignment = sizeof(T) * N>\n"
                     "struct alignas(Alignment) AlignedArray { T data[N]; };\n")
    assert found(aligned_array)[0].spelled("__half", 8, "vec") == "AlignedArray<__half, vec>"
    swapped = "template <int N, typename T> struct alignas(N * alignof(T)) Regs { T r[N]; __device__ T& at(int i) { return r[i]; } };\n"
    assert found(swapped)[0].spelled("float", 4, "4") == "Regs<4, float>"
    fixed = "struct alignas(16) half8 { __half v[8]; };\n"
    assert found(fixed)[0].spelled("__half", 8, "vec") == "half8" and found(fixed)[0].spelled("float", 4, "4") is None
    # namespaces: qualified where the kernel sits outside them
    assert found("namespace vllm {\n" + VEC_N_T + "}\n")[0].name == "vllm::vec_n_t"
    assert found("namespace vllm {\n" + VEC_N_T + "}\n", "namespace vllm {\n" + KERNEL + "}\n")[0].name == "vec_n_t"


@pytest.mark.parametrize("defs", [
    # aligned to 16 whatever it holds: an 8-byte pack would not be one aligned access
    "template <typename T, int N> struct alignas(16) P { T v[N]; };\n",
    # elements of another type (vLLM's PackedVec holds half2 pairs for half)
    "template <typename T, int N> struct alignas(sizeof(T) * N) P { typename Conv<T>::Type v[N]; };\n",
    "template <typename T, int N> struct alignas(sizeof(T) * N) P : Base { T v[N]; };\n",
    "template <typename T, int N> struct alignas(sizeof(T) * N) P { T v[N]; int n; };\n",
    "template <typename T, int N> struct alignas(sizeof(T) * N) P { T v[N]; virtual void f(); };\n",
    "template <typename T, int N> struct P { T v[N]; };\n",
    "#if FAST\ntemplate <typename T, int N> struct alignas(sizeof(T) * N) P { T v[N]; };\n#endif\n",
    "struct alignas(8) half8 { __half v[8]; };\n",
])
def test_a_pack_that_is_not_exactly_one_aligned_access_is_not_taken(defs):
    assert found(defs) == ()


def test_a_pack_after_the_kernel_is_not_visible_to_it():
    assert found("", KERNEL + VEC_N_T) == ()


def rewritten(name: str, text: str) -> str:
    rw = TRANSFORMS[name].apply(text, context_from_text("silu_and_mul", text))
    assert rw is not None
    return style.polish(rw.text, text)


@pytest.mark.parametrize("name, count", [("vectorize", 8), ("vectorize64", 4)])
def test_vectorize_moves_elements_in_the_files_own_pack(name, count):
    text = SILU.replace("__device__ __forceinline__ float silu", VEC_N_T + "\n__device__ __forceinline__ float silu")
    out = rewritten(name, text)
    assert f"constexpr int vec = {count};\n  using pack = vec_n_t<__half, vec>;" in out
    assert "const pack v0 = *reinterpret_cast<const pack*>(input + (token * 2 * d) + i0);" in out
    assert "s0.val[k] = __float2half(silu(x) * y);" in out and "*reinterpret_cast<pack*>(out + (token * d) + i0) = s0;" in out
    assert "uint4" not in out and "alignas(16) __half" not in out and "of the file's `vec_n_t`" in out


def test_without_a_pack_vectorize_writes_its_own_registers():
    out = rewritten("vectorize", SILU)
    assert "alignas(16) __half v0[vec];" in out and "reinterpret_cast<uint4*>(v0)[0]" in out and "using pack" not in out


def test_ceil_division_helpers_are_recognised_by_their_body():
    assert helpers.ceil_div("template <typename T> __host__ __device__ constexpr T blocks_for(T a, T b) "
                            "{ return (a + b - 1) / b; }\n") == "blocks_for"
    assert helpers.ceil_div("#define DIVUP(a, b) (((a) + (b) - 1) / (b))\n") == "DIVUP"
    assert helpers.ceil_div("int iDivUp(int a, int b) { return a % b ? a / b + 1 : a / b; }\n") is None
    assert helpers.ceil_div("int ceil_div(int a, int b) { return (a + b) / b; }\n") is None
    assert helpers.ceil_div("namespace u { int ceil_div(int a, int b) { return (a + b - 1) / b; } }\n") is None
    # at a launch site: the file's helper whatever its name; a well-known name the file defines otherwise is not folded
    assert style.div_up("blocks", 4, "int blocks_for(int a, int b) { return (a + b - 1) / b; }") == "blocks_for(blocks, 4)"
    assert style.div_up("ceil_div(n, 256)", 4, "int ceil_div(int a, int b) { return a / b; }") == "(ceil_div(n, 256) + 3) / 4"
    assert style.div_up("ceil_div(B * T * C, block_size)", 8) == "ceil_div(B * T * C, block_size * 8)"


def test_an_index_split_by_rows_moves_its_steps_in_the_files_own_pack():
    text = (ROOT / "tests" / "agents" / "kernels" / "encoder_bf16.cu").read_text()
    text = text.replace("/* @astra", "template <typename T, int N>\nstruct alignas(sizeof(T) * N) Vec { T elt[N]; };\n\n/* @astra", 1)
    rw = TRANSFORMS["coarsen"].apply(text, context_from_text("encoder_forward_kernel", text))
    out = style.polish(rw.text, text)
    assert "const Vec<floatX, vec> v0 = *reinterpret_cast<const Vec<floatX, vec>*>(&wte[ix * C + c]);" in out
    assert "*reinterpret_cast<Vec<floatX, vec>*>(&out[b * T * C + t * C + c]) = s;" in out and "uint4" not in out
