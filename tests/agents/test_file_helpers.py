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
    assert "uint4" not in out and "alignas(16) __half" not in out and "with the project's `vec_n_t`" in out


def test_without_a_pack_vectorize_writes_its_own_registers():
    out = rewritten("vectorize", SILU)
    assert "alignas(16) __half v0[vec], v1[vec], s0[vec];" in out and "reinterpret_cast<uint4*>(v0)[0]" in out \
        and "using pack" not in out


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


# ---- load/store helpers and the project headers ---------------------------------------------------

LD_ST = """template <typename T>
__device__ __forceinline__ void ld16(T& val, const T* ptr) {
  static_assert(sizeof(T) == 16, "one 16-byte access");
  *reinterpret_cast<int4*>(&val) = __ldg(reinterpret_cast<const int4*>(ptr));
}
template <typename T>
__device__ __forceinline__ void st16(T& val, T* ptr) {
  *reinterpret_cast<int4*>(ptr) = *reinterpret_cast<int4*>(&val);
}
"""


def movers(defs: str, kernel: str = KERNEL, headers: tuple[str, ...] = ()):
    text = defs + kernel
    return helpers.movers(text, text.index("__global__"), headers)


def test_load_and_store_helpers_are_recognised_by_what_their_body_does():
    ld, st = movers(LD_ST)
    assert (ld.name, ld.kind, ld.width, ld.cached) == ("ld16", "load", 16, True)
    assert (st.name, st.kind, st.width, st.value_first) == ("st16", "store", 16, True)
    assert ld.moves("uint4", 16) and not ld.moves("uint2", 8)
    # an __ldg wrapper returning the value, a plain store with the pointer first, a fixed type
    (a, b, c) = movers("template <class E> __device__ E fetch(const E* p) { return __ldg(p); }\n"
                       "template <class E> __device__ void put(E* p, const E& v) { *p = v; }\n"
                       "__device__ int ld32(const int* a) { return __ldg(a); }\n")
    assert (a.kind, a.cached, a.width) == ("load_value", True, None) and a.moves("uint4", 16)
    assert not a.moves("vec_n_t<__half, vec>", 16)   # __ldg has no overload for a struct
    assert (b.kind, b.value_first, b.cached) == ("store", False, False) and b.moves("vec_n_t<__half, vec>", 16)
    assert (c.type, c.width) == ("int", 4) and not c.moves("uint4", 16)
    assert helpers.mover((a,), "load", "uint4", 16, read_only=False) is None   # the read-only cache: never for written memory


@pytest.mark.parametrize("defs", [
    "template <class E> __device__ void ld(E& v, const E* p) { v = *p + 1; }\n",            # not a plain move
    "template <class E> __device__ void ld(E& v, const E* p) { v = *p; ++count; }\n",       # does more
    "template <class E> __device__ void ld(E& v, const E* p) { static_assert(is_ok<E>::value, \"\"); v = *p; }\n",
    "template <class E> __device__ void st(const E& v, const E* p) { *p = v; }\n",           # a const pointer
    "template <class E, int N> __device__ void ld(E& v, const E* p) { v = *p; }\n",
    "#if FAST\ntemplate <class E> __device__ void ld(E& v, const E* p) { v = *p; }\n#endif\n",
    "template <class E> void ld(E& v, const E* p) { v = *p; }\n",                          # host code only
])
def test_a_helper_that_does_anything_else_is_not_taken(defs):
    assert movers(defs) == ()


def test_helpers_of_the_project_headers_are_found_after_the_files_own():
    header = "namespace proj {\n" + VEC_N_T + LD_ST + "template <typename T> T up(T a, T b) { return (a + b - 1) / b; }\n}\n"
    assert [m.name for m in movers("", headers=(header,))] == ["proj::ld16", "proj::st16"]
    assert found("", KERNEL) == () and helpers.packs(KERNEL, 0, (header,))[0].name == "proj::vec_n_t"
    assert helpers.ceil_div("", (header,)) is None   # inside a namespace: not visible by its bare name
    assert style.div_up("blocks", 4, "int x;", ("#define DIVUP(a, b) (((a) + (b) - 1) / (b))\n",)) == "DIVUP(blocks, 4)"


def rewritten_with(name: str, text: str, headers: tuple[str, ...], kernel: str = "silu_and_mul") -> str:
    rw = TRANSFORMS[name].apply(text, context_from_text(kernel, text, headers=headers))
    assert rw is not None
    return style.polish(rw.text, text)


def test_vectorize_moves_its_registers_with_the_projects_load_and_store_helpers():
    out = rewritten_with("vectorize", SILU, (LD_ST,))
    assert "ld16(reinterpret_cast<uint4*>(v0)[0], reinterpret_cast<const uint4*>(input + (token * 2 * d) + i0));" in out
    assert "st16(reinterpret_cast<uint4*>(s0)[0], reinterpret_cast<uint4*>(out + (token * d) + i0));" in out
    assert "with the project's `ld16`, `st16`" in out
    # with the project's pack too: its registers, moved by its helpers
    out = rewritten_with("vectorize", SILU, (VEC_N_T + LD_ST,))
    assert "pack v0, v1, s0;\n    ld16(v0, reinterpret_cast<const pack*>(input + (token * 2 * d) + i0));" in out
    assert "st16(s0, reinterpret_cast<pack*>(out + (token * d) + i0));" in out and "uint4" not in out


def test_memory_the_kernel_writes_is_never_read_through_the_read_only_cache():
    inplace = SILU.replace("const __half* __restrict__ input", "__half* __restrict__ input")
    out = rewritten_with("vectorize", inplace, (LD_ST,))
    assert "ld16(" not in out and "st16(" in out


def test_an_index_split_by_rows_moves_its_steps_with_the_projects_helpers():
    text = (ROOT / "tests" / "agents" / "kernels" / "encoder_bf16.cu").read_text()
    out = rewritten_with("coarsen", text, (LD_ST,), "encoder_forward_kernel")
    assert "ld16(*reinterpret_cast<uint4*>(v0), reinterpret_cast<const uint4*>(&wte[ix * C + c]));" in out
    assert "st16(*reinterpret_cast<uint4*>(s), reinterpret_cast<uint4*>(&out[b * T * C + t * C + c]));" in out


def test_a_pointer_cast_away_from_const_is_not_read_only():
    from astra_cuda.agents.offline import base
    from astra_cuda.agents.offline.vectorize import handles, read_only
    text = ("__global__ void k(float* out, const float* a, const float* b, const float* c, int n) {\n"
            "  float* w = (float*)(b + 1); float* x = const_cast<float*>(c);\n"
            "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = (float)a[i] + b[i] + c[i];\n}\n")
    sc = base.scope(text, "k")
    assert read_only(sc.kernel, handles(sc.kernel, context_from_text("k", text), sc.root)) == {"a"}


def test_the_project_headers_are_read_as_a_compiler_of_the_unit_may(tmp_path):
    from astra_cuda.compile import extract, project
    from astra_cuda.model import source
    proj = tmp_path / "proj"
    (proj / "inc").mkdir(parents=True)
    (proj / "inc" / "vec.cuh").write_text('#pragma once\n#include "deeper.cuh"\n' + LD_ST)
    (proj / "inc" / "deeper.cuh").write_text(VEC_N_T)
    (tmp_path / "outside.cuh").write_text("// not the project's\n")
    text = '#include <cuda_fp16.h>\n#include "inc/vec.cuh"\n#include "../outside.cuh"\n' + KERNEL
    (proj / "k.cu").write_text(text)
    (proj / ".git").mkdir()   # the project's root: a compiler of its units reads nothing above it
    got = extract.project_header_texts(source.parse(text), str(proj / "k.cu"), project.ProjectContext())
    assert got == ((proj / "inc" / "vec.cuh").read_text(), VEC_N_T)


def test_helpers_in_the_kernels_own_namespace_are_named_as_it_writes_them():
    text = "namespace proj {\n" + LD_ST + KERNEL + "}\n" + "template <class E> __device__ E late(const E* p) { return *p; }\n"
    assert [m.name for m in helpers.movers(text, text.index("__global__"))] == ["ld16", "st16"]   # not `late`: after it
