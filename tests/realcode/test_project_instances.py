"""Issue 24: a kernel template in a header whose template arguments only the compiler can tell —
a traits class that a launcher template builds from its own parameters, its instances made by
macros in the `.cu` that includes the header (flash-attention's layer norm), or a dispatch that
offers no float — takes an instance the project's own code makes, as nvcc's front end
instantiates it (`compile.instances`); and a module NVVM refuses because a function the instance
calls is declared but never defined for it (apex's `copy_vector<float, 1>`) says so."""
import pytest

from astra_cuda import api
from astra_cuda.compile import headers, instances, nvcc, toolkit
from astra_cuda.compile import project as proj

TK = toolkit.find()
needs_nvcc = pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")


def test_the_instances_are_read_from_nvccs_host_stubs():
    stubs = [
        "template<> __specialization_static void __wrapper__device_stub_k< ::ns::Traits<float, (unsigned int)256u, "
        " ::ns::Base<(unsigned int)128u> > ,true,(bool)0>(  _ZN2ns6ParamsE &__cuda_0){}",
        "template<> __specialization_static void __wrapper__device_stub_other< ::ns::Traits<int> ,true>(int &){}",
        "template<> __specialization_static void __wrapper__device_stub_k< ::c10::Half, float,(int)-3>(int &){}",
    ]
    assert instances.stub_instances(stubs, "k") == [
        ("ns::Traits<float, 256, ns::Base<128>>", "true", "false"), ("c10::Half", "float", "-3")]
    assert instances.stub_instances(stubs, "missing") == []


def test_an_enumerator_argument_is_written_as_the_spec_takes_it():
    """The stub writes an enumerator in parentheses (vLLM's reshape_and_cache_kernel); the
    proposal writes it as a user would, and the spec's validator takes it."""
    from astra_cuda.infer.project_instances import _valid
    stub = "template<> void __wrapper__device_stub_k<float,float,( ::vllm::Fp8KVCacheDataType::kAuto)>(float *&){}"
    (found,) = instances.stub_instances([stub], "k")
    assert found == ("float", "float", "vllm::Fp8KVCacheDataType::kAuto") and _valid(found)
    assert not _valid(("float", "( vllm::E::kAuto)"))  # such an instance is never proposed


def test_a_cute_layout_instance_is_a_valid_instantiate():
    """CuTe's tutorials (CUTLASS sgemm_1, tiled_copy) instantiate their kernel with static layouts
    and tensors: 756 characters, `>>>` closing three lists, and `C<8>` after a type in a list
    (tree-sitter reads it as `C < 8` in an expression). The validator, and the check's compile
    naming the instance, take such an instance and still refuse expressions."""
    from astra_cuda.infer.project_instances import _valid
    from astra_cuda.model.spec import parse_template_args
    layout = "cute::Layout<cute::tuple<cute::C<128>, cute::C<8>>, cute::tuple<cute::C<1>, cute::C<128>>>"
    found = ("cute::Shape<int, int, int>", "cute::Shape<cute::C<128>, cute::C<128>, cute::C<8>>", "float",
             "cute::Stride<cute::C<1>, int>", *[layout] * 6, "float", "float")
    assert len(", ".join(found)) > 500 and _valid(found)
    assert parse_template_args("<S<C<128>, C<8>>>") == "<S<C<128>, C<8>>>"
    # tiled_copy's: a list tree-sitter misreads as a whole (`<` after a type), read argument by argument
    tensor = "cute::Tensor<cute::ViewEngine<cute::gmem_ptr<float *>>, cute::Layout<cute::tuple<cute::C<1>, int>>>"
    assert _valid((tensor, "T<int, L<t<C<1>, C<6>>>>"))
    assert nvcc._check_names([f"copy_kernel<{tensor}>"]) == {f"copy_kernel<{tensor}>": 0}
    with pytest.raises(nvcc.InvalidName):
        nvcc._check_names([f"copy_kernel<{tensor}, T<int, L<t<C<1>, f(2)>>>>"])
    for bad in ("<S<C<1>, f()>>", "<S<C<1>, 1 + 2>>", "<S<C<8>>>>", "<T<int, L<t<C<1>, f(2)>>>>", "<float> ? (::system(\"x\") ? &k<float> : 0)",
                "<float>; int x", "<" + ", ".join(["float"] * 500) + ">"):
        assert not _valid((bad[1:-1],)), bad


HEADER = """#pragma once
namespace ln {
struct Params { float* out; const float* inp; int n; };
template <typename T, int VEC> struct Traits { using elem_t = T; enum { VEC_N = VEC, THREADS = 128 }; };
template <typename Kt, bool Is_even>
__global__ void __launch_bounds__(Kt::THREADS) ln_kernel(Params p) {
    using elem_t = typename Kt::elem_t;
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * Kt::VEC_N;
    for (int v = 0; v < Kt::VEC_N; ++v)
        if (Is_even || i + v < p.n) p.out[i + v] = (elem_t)2 * p.inp[i + v];
}
}  // namespace ln
#define BOOL_SWITCH(COND, NAME, ...) [&] { if (COND) { constexpr bool NAME = true; return __VA_ARGS__(); } \\
    else { constexpr bool NAME = false; return __VA_ARGS__(); } }()
template <typename T, int VEC>
void launch_(ln::Params p) {
    using Kernel_traits = ln::Traits<T, VEC>;
    BOOL_SWITCH(p.n % (128 * VEC) == 0, IsEven, [&] {
        auto kernel = &ln::ln_kernel<Kernel_traits, IsEven>;
        kernel<<<(p.n + 128 * VEC - 1) / (128 * VEC), Kernel_traits::THREADS>>>(p);
    });
}
"""
CU = """#include "ln.cuh"
#define REGISTER(T, VEC) void run_##VEC(ln::Params p) { launch_<T, VEC>(p); }
REGISTER(float, 4)
REGISTER(float, 2)
"""


@needs_nvcc
def test_a_traits_class_a_launcher_builds_from_macros_in_the_cu_beside_the_header(project):
    project("ln.cuh", HEADER)
    project("ln_4.cu", CU)
    path = project.root / "ln.cuh"
    ctx = proj.from_flags([], [], "c++17", flags=["--expt-extended-lambda"], origin="command line")
    p = api.infer_spec(api.snapshot(path.read_text(), str(path), ctx), "ln::ln_kernel", run=False)
    assert 'instantiate = "<ln::Traits<float, 4>, false>"' in p.comment, p.comment
    assert any("the project's own instance" in n and "ln_4.cu" in n for n in p.notes), p.notes
    # the instance compiles (as the header's kernels do: through the .cu that includes it) where the
    # guess `<float, false>` (`float::THREADS`) did not
    unit = headers.translation_unit(HEADER, str(path), ctx)
    for expr, ok in (("ln::ln_kernel<ln::Traits<float, 4>, false>", True), ("ln::ln_kernel<float, false>", False)):
        r = nvcc.compile(unit, str(path), ctx, kernels=[expr], toolkit=TK)
        assert r.ok is ok, (expr, r.diagnostics)


COPY = """namespace {
template <typename T, int N> __device__ __inline__ void copy_vector(T* dst, const T* src);
template <> __device__ __inline__ void copy_vector<int, 1>(int* dst, const int* src) { *dst = *src; }
/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
instantiate = "<float>"
[sizes]
n = [1, 300]
[args]
out = { type = "float", shape = ["n"], output = true }
inp = { type = "float", shape = ["n"] }
n = "n"
*/
template <typename T>
__global__ void copy(T* out, const T* inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) copy_vector<T, 1>(out + i, inp + i);
}
}  // namespace
"""


@needs_nvcc
def test_a_function_declared_for_every_type_but_defined_for_others_is_named(project):
    path = project("k.cu", COPY)
    (v,) = api.check(api.snapshot(COPY, str(path), proj.ProjectContext()), "copy", backend="cpu", quick=True,
                     pin_first=False)
    assert not v.passed
    text = v.human()
    assert "copy_vector" in text and "never defined for these template arguments" in text, text


DEDUCED = """template <int N> struct Tile { static constexpr int size = N; };
template <class T> struct Holder { using type = T; };
template <class TileT, class H>
__global__ void tiled(float* out, const float* inp, TileT tile, H holder, int n) {
    using elem_t = typename H::type;
    int i = blockIdx.x * TileT::size + threadIdx.x;
    if (i < n) out[i] = (elem_t)2 * inp[i];
}
template <class T> auto make_holder() { return Holder<T>{}; }
void run(float* out, const float* inp, int n) {
    auto tile = Tile<128>{};
    auto holder = make_holder<float>();
    tiled<<<(n + 127) / 128, 128>>>(out, inp, tile, holder, n);
}
"""


@needs_nvcc
def test_template_arguments_deduced_from_what_the_launch_passes_are_the_compilers(project):
    # CuTe's tutorials: the kernel's layouts and tensors are deduced from objects the launcher builds
    path = project("k.cu", DEDUCED)
    p = api.infer_spec(api.snapshot(DEDUCED, str(path), proj.ProjectContext()), "tiled", run=False)
    assert 'instantiate = "<Tile<128>, Holder<float>>"' in p.comment, p.comment
    assert any("the project's own instance" in n and "over this file" in n for n in p.notes), p.notes


def test_nvccs_steps_are_the_device_preprocessor_and_cicc_writing_no_ptx():
    listing = "\n".join([
        "#$ _HERE_=/cuda/bin", '#$ INCLUDES="-I/cuda/include"  ', '#$ SYSTEM_INCLUDES="-isystem" "/cuda/cccl"',
        '#$ gcc -E -x c++ "a.cu" -o "/b/a.cpp4.ii" ',
        '#$ cudafe++ --gen_c_file_name "/b/a.cudafe1.cpp" --module_id_file_name "/b/a.module_id" "/b/a.cpp4.ii"',
        "#$ -- Filter Dependencies -- > /b/deps.d",
        '#$ gcc -D__CUDA_ARCH__=900 -E -x c++ "a.cu" -o "/b/a.cpp1.ii" ',
        '#$ "$CICC_PATH/cicc" --module_id_file_name "/b/a.module_id" --stub_file_name "a.cudafe1.stub.c" "/b/a.cpp1.ii" -o "/b/a.ptx"',
        '#$ ptxas -arch=sm_90 "/b/a.ptx" -o "/b/a.cubin"'])
    steps = instances._steps(listing)
    assert steps[0] == "export _HERE_=/cuda/bin" and not any("SYSTEM_INCLUDES" in s or "Filter" in s for s in steps)
    # the host preprocessor and cudafe++ (the host compiler's input, and cicc's module id) are left out
    assert not any("cpp4.ii" in s or "cudafe++" in s for s in steps)
    assert steps[-2].endswith('-o "/b/a.cpp1.ii"')
    room, cicc, back = steps[-1].split("; ")   # with room for its device C file (nvcc.with_device_c_room)
    assert room.startswith(f"ulimit -S -f {nvcc.DEVICE_C_FILE_SIZE >> 9}") and back.startswith("ulimit -S -f ")
    assert cicc.endswith("-o /dev/null") and cicc.startswith('"$CICC_PATH/cicc" -O0 ')
    assert "--gen_module_id_file --module_id_file_name" in cicc
    assert not any("ptxas" in s for s in steps)
    # a listing whose cicc reads a file no step writes gives no plan (rather than a wrong one)
    assert instances._steps(listing.replace('-o "/b/a.cpp1.ii"', '-o "/b/other.ii"')) == []


@needs_nvcc
def test_a_unit_that_does_not_compile_is_not_remembered(project, monkeypatch):
    # its headers are unknown, so no entry could notice the header it missed arriving
    monkeypatch.setenv("XDG_CACHE_HOME", str(project.root / "cache"))
    cu = project("k.cu", '#include "later.h"\ntemplate <int N> __global__ void k(float* x) { x[N] = V; }\n'
                         "void run(float* x) { k<3><<<1, 1>>>(x); }\n")
    ctx = proj.ProjectContext()
    assert instances.of("k", str(cu), ctx, toolkit=TK) == []
    project("later.h", "#define V 1.0f\n")
    instances._ran.clear()   # as a later process
    assert instances.of("k", str(cu), ctx, toolkit=TK) == [("3",)]


# (its count named for no experts: a MoE's expert count takes the case nearest a real model's first,
# `template_args.expert_count_case`, and this is the fallback for other numbers)
TOP1 = """template <int E> struct Consts { static constexpr int VPT = E < 4 ? E : 4; };
template <int VPT, int WIDTH>
__global__ void top1(const float* in, int* idx, int rows) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  int best = 0;
  for (int e = 1; e < WIDTH; e++) if (in[r * WIDTH + e] > in[r * WIDTH + best]) best = e;
  idx[r] = best * VPT / VPT;
}
template <int WIDTH> void launch_(const float* in, int* idx, int rows) {
  static constexpr int VPT = Consts<WIDTH>::VPT;
  top1<VPT, WIDTH><<<(rows + 127) / 128, 128>>>(in, idx, rows);
}
#define LAUNCH(E) launch_<E>(in, idx, rows)
void run(const float* in, int* idx, int rows, int width) {
  switch (width) { case 1: LAUNCH(1); break; case 8: LAUNCH(8); break; case 64: LAUNCH(64); break; }
}
"""


@needs_nvcc
def test_a_constant_output_takes_the_projects_instance_with_the_largest_numbers(project):
    # sgl-kernel topkGatingSoftmax: its numbers hidden in a traits class, the first instance has one
    # expert and a constant top-k index; after that run, the instance of 256 experts is proposed
    from astra_cuda import infer
    from astra_cuda.infer import validate
    path = project("top1.cu", TOP1)
    snap = api._with_context(api.snapshot(TOP1, str(path), proj.ProjectContext()))
    k = snap.model.kernel("top1")

    def redo(decide):
        return infer.infer(k, snap.model, path=snap.path, context=snap.context, decide=decide)
    first = redo(None)
    assert 'instantiate = "<1, 1>"' in first.comment, first.comment
    alts = validate.alternatives(first, validate.Trial(True, False, "not_constant: `idx` is constant",
                                                       ("not_constant",)), redo)
    assert alts and 'instantiate = "<4, 64>"' in alts[0].comment, [a.comment for a in alts]
    assert any("the largest numbers" in n for n in alts[0].notes)


@needs_nvcc
def test_a_guess_the_compiler_could_not_check_in_time_is_not_given_as_known(project, monkeypatch):
    # a loaded machine: nvcc reading the project's instance runs past its limit. The guessed
    # arguments stood silently before (CUTLASS's sgemm_1 then got `float` for its cute::Shape and
    # a spec of floats, where an unloaded run says it cannot be inferred)
    monkeypatch.setenv("XDG_CACHE_HOME", str(project.root / "cache"))
    monkeypatch.setattr(instances, "_host_stubs", lambda *a, **k: None)
    monkeypatch.setattr(instances, "_ran", {})
    project("ln.cuh", HEADER)
    project("ln_4.cu", CU)
    path = project.root / "ln.cuh"
    ctx = proj.from_flags([], [], "c++17", flags=["--expt-extended-lambda"], origin="command line")
    made = instances.of("ln_kernel", str(path), ctx, toolkit=TK)
    assert made == [] and made.late
    p = api.infer_spec(api.snapshot(path.read_text(), str(path), ctx), "ln::ln_kernel", run=False)
    assert not p.valid
    assert any("ran past its time limit" in n and "ln_4.cu" in n and "ASTRA_COMPILER_TIMEOUT" in n for n in p.notes), \
        p.notes
