"""Issue 24: the template arguments Astra proposes for `instantiate` must name an instantiation
nvcc accepts — Astra appends it to the user's file at global scope. Each case is the shape of a
public kernel that got an argument nvcc refused (vLLM act_and_mul and paged attention,
FasterTransformer generic_activation, apex multi_tensor_apply and xentropy), written here."""
from __future__ import annotations

import pytest

from astra_cuda import api
from astra_cuda.model import source
from astra_cuda.compile import nvcc, toolkit
from astra_cuda.compile.project import ProjectContext

# A device function whose packed type comes through `typename Traits<T>::Type` written right
# after `<` (the word `typename` was kept, the argument refused, and another function guessed).
PACKED = """\
template <typename T> struct Packed { using Type = T; };
template <typename T> __device__ T act(const T& x) { return x; }
template <typename T> __device__ T packed_act(const T& x) { return x + x; }
template <typename scalar_t, typename packed_t, scalar_t (*F)(const scalar_t&), packed_t (*PF)(const packed_t&)>
__global__ void gate_kernel(scalar_t* out, const scalar_t* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = F(in[i]) * in[n + i];
}
#define LAUNCH(K, PK) \\
  gate_kernel<float, typename Packed<float>::Type, K<float>, PK<typename Packed<float>::Type>><<<g, b>>>(o, x, n);
void launch(float* o, const float* x, int n) { int g = (n + 255) / 256, b = 256; LAUNCH(act, packed_act) }
"""

# A launcher's template parameter with a default, and a scoped enumeration as a non-type
# parameter (an integer does not convert to it).
ATTENTION = """\
namespace kv { enum class CacheKind { kAuto = 0, kFp8 = 1 }; }
template <typename T, int NUM_THREADS, kv::CacheKind KIND>
__global__ void attend_kernel(T* out, const T* q, int n) {
  static_assert(NUM_THREADS % 32 == 0, "whole warps");
  int i = blockIdx.x * NUM_THREADS + threadIdx.x;
  if (i < n) out[i] = KIND == kv::CacheKind::kAuto ? q[i] : T(0);
}
template <typename T, kv::CacheKind KIND, int NUM_THREADS = 128>
void attend_launcher(T* out, const T* q, int n) {
  attend_kernel<T, NUM_THREADS, KIND><<<(n + NUM_THREADS - 1) / NUM_THREADS, NUM_THREADS>>>(out, q, n);
}
"""

# A template template parameter the caller names inside a namespace.
ACTIVATION = """\
namespace ops {
template <typename T> struct Gelu { static __device__ T apply(const T& v) { return v; } };
template <template <typename T> class Activation, typename T, typename BT>
__global__ void activate_kernel(T* out, const BT* bias, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = Activation<T>::apply(out[i] + T(bias[i]));
}
template <template <typename T> class Activation, typename T, typename BT>
void invoke_activation(T* out, const BT* bias, int n) { activate_kernel<Activation, T, BT><<<(n + 255) / 256, 256>>>(out, bias, n); }
void invoke_gelu(float* out, const float* bias, int n) { invoke_activation<Gelu>(out, bias, n); }
}  // namespace ops
"""

# A trailing parameter pack no launch names: the pack is empty (an argument `1` is no type).
PACK = """\
template <typename T, typename... Extra>
__global__ void pack_kernel(T* out, int n, Extra... extra) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = T(sizeof...(Extra));
}
"""

# A type alias of the launcher over its template parameter, which only an explicit instantiation
# without template arguments fixes (FasterTransformer addBiasGeluV2's T2: half2 for every T).
ALIAS = """\
template <typename T> struct Wide { using Type = float2; };
template <typename T2>
__global__ void wide_kernel(T2* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i].x = out[i].y;
}
template <typename T>
void invoke_wide(T* out, int n) {
  using T2 = typename Wide<T>::Type;
  wide_kernel<T2><<<(n / 2 + 255) / 256, 256>>>(reinterpret_cast<T2*>(out), n / 2);
}
template void invoke_wide(float* out, int n);
"""

CASES = [(PACKED, "gate_kernel", "<float, Packed<float>::Type, act<float>, packed_act<Packed<float>::Type>>"),
         (ATTENTION, "attend_kernel", "<float, 128, kv::CacheKind::kAuto>"),
         (ACTIVATION, "ops::activate_kernel", "<ops::Gelu, float, float>"),
         (PACK, "pack_kernel", "<float>"),
         (ALIAS, "wide_kernel", "<Wide<float>::Type>")]
IDS = ["typename-after-angle", "launcher-default-and-enum", "template-template-in-namespace", "empty-pack",
       "launcher-alias-over-a-deduced-parameter"]


def _instantiate(tmp_path, text, kernel):
    f = tmp_path / f"{kernel.replace(':', '_')}.cu"
    f.write_text(text)
    prop = api.infer_spec(api.snapshot(text, str(f)), kernel, run=False)
    line = next(ln for ln in prop.comment.splitlines() if ln.strip().startswith("instantiate"))
    return line.split("=", 1)[1].strip().strip('"'), prop


@pytest.mark.parametrize("text,kernel,expected", CASES, ids=IDS)
def test_the_proposed_template_arguments(tmp_path, text, kernel, expected):
    got, prop = _instantiate(tmp_path, text, kernel)
    assert got == expected, prop.notes


def test_template_template_and_pack_parameters_are_named():
    names = {k.name: k.template_param_names for k in source.parse(ACTIVATION + PACK).kernels}
    assert names == {"activate_kernel": ("Activation", "T", "BT"), "pack_kernel": ("T", "Extra")}


TK = toolkit.find()


@pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")
@pytest.mark.parametrize("text,kernel,expected", CASES[:3] + CASES[4:], ids=IDS[:3] + IDS[4:])
def test_nvcc_accepts_the_proposed_instantiation(tmp_path, monkeypatch, text, kernel, expected):
    """The proposal, appended to the file at global scope as Astra appends it, compiles."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    got, _ = _instantiate(tmp_path, text, kernel)
    f = tmp_path / "k.cu"
    f.write_text(text)
    r = nvcc.compile(text, str(f), ProjectContext(), "sm_90", [f"{kernel}{got}"], toolkit=TK)
    assert r.ok and len(r.kernels) == 1, [d.message for d in r.diagnostics]


def test_a_macro_of_the_file_that_launches_names_the_argument(tmp_path):
    """bitsandbytes launches its kernels in ops.cu, whose `#define BLOCKSIZE_2STATE 256` is the
    block size (taken as 1, CUB's BlockLoad refused it: not a multiple of a warp)."""
    kernel = """\
template <typename T, int BLOCK_SIZE, int N_PER_TH>
__global__ void step_kernel(T* p, int n) {
  static_assert(BLOCK_SIZE % 32 == 0, "whole warps");
  int i = blockIdx.x * BLOCK_SIZE + threadIdx.x * N_PER_TH;
  if (i < n) p[i] += T(1);
}
"""
    (tmp_path / "ops.cu").write_text("""\
#include "kernels.cuh"
#define BLOCKSIZE 256
#define PER_THREAD 1
template <typename T> void step(T* p, int n) {
  step_kernel<T, BLOCKSIZE, PER_THREAD><<<(n + BLOCKSIZE - 1) / BLOCKSIZE, BLOCKSIZE / PER_THREAD>>>(p, n);
}
template void step<float>(float*, int);
""")
    f = tmp_path / "kernels.cuh"
    f.write_text(kernel)
    prop = api.infer_spec(api.snapshot(kernel, str(f)), "step_kernel", run=False)
    assert 'instantiate = "<float, 256, 1>"' in prop.comment, prop.notes


def test_a_launcher_alias_hides_the_class_template_of_its_name(tmp_path):
    """flash-attention's launcher declares `using Kernel_traits = Kernel_traits<...>;` over its
    own template parameters, which no call fixes: the launch's `Kernel_traits` is that alias,
    never the class template named bare (nvcc: 'cannot determine which instance'); no float can
    stand for a class whose members the kernel reads: said, and no draft is proposed."""
    text = """\
template <int N> struct Traits { static constexpr int THREADS = N; };
template <typename K> __global__ void traits_kernel(float* out) { out[threadIdx.x] = K::THREADS; }
template <int N> void launch_traits(float* out) { using Traits = Traits<N>; traits_kernel<Traits><<<1, N>>>(out); }
"""
    got, prop = _instantiate(tmp_path, text, "traits_kernel")
    assert got == "<float>" and not prop.valid and prop.problems[0].startswith(
        "cannot be inferred: template parameter `K`: no launch gives it, and it is a class the kernel reads members "
        "of (`K::THREADS`)")


DISPATCH = """\
#define DISPATCH_CASE_QUANT(...) AT_DISPATCH_CASE(at::ScalarType::Char, __VA_ARGS__)
#define DISPATCH_QUANT(TYPE, NAME, ...) AT_DISPATCH_SWITCH(TYPE, NAME, DISPATCH_CASE_QUANT(__VA_ARGS__))
#define DISPATCH_CASE_FLOATING(...) AT_DISPATCH_CASE(at::ScalarType::Half, __VA_ARGS__) \\
  AT_DISPATCH_CASE(at::ScalarType::Float, __VA_ARGS__)
#define DISPATCH_FLOATING(TYPE, NAME, ...) AT_DISPATCH_SWITCH(TYPE, NAME, DISPATCH_CASE_FLOATING(__VA_ARGS__))
template <typename out_t> __global__ void quant_kernel(out_t* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<out_t>(in[i]);
}
template <typename T> __global__ void scale_kernel(T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = out[i] * T(2);
}
void quant(torch::Tensor& out, torch::Tensor& in) {
  int n = in.numel();
  DISPATCH_QUANT(out.scalar_type(), "quant", [&] {
    quant_kernel<scalar_t><<<(n + 255) / 256, 256>>>(out.data_ptr<scalar_t>(), in.data_ptr<float>(), n);
  });
  DISPATCH_FLOATING(out.scalar_type(), "scale", [&] {
    scale_kernel<scalar_t><<<(n + 255) / 256, 256>>>(out.data_ptr<scalar_t>(), n);
  });
}
"""


@pytest.mark.parametrize("kernel,expected", [("quant_kernel", "<int8_t>"), ("scale_kernel", "<float>")])
def test_a_dispatch_macros_scalar_t_is_a_type_it_dispatches_over(tmp_path, kernel, expected):
    """vLLM's VLLM_DISPATCH_QUANT_TYPES dispatches over fp8 and int8 only: its scalar_t taken as
    float named an instance nvcc refused (rms_norm_dynamic_per_token_quant_kernel); a macro that
    offers float keeps float."""
    got, prop = _instantiate(tmp_path, DISPATCH, kernel)
    assert got == expected, prop.notes


# TransformerEngine's scaled_masked_softmax.cu: the launcher's template parameters are named like
# dispatch names (`input_t`), its caller passes a name its own switch macro declares (`using type =
# fp16;` in each case, 16-bit types only), and `copy_vector<T, N>` is declared for every T but
# defined for those alone: float (what a dispatch name became) left an unresolved extern in ptxas.
# transpose.cu: the launch itself sits in a switch that declares its `Type`, float among the cases.
SWITCHED = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
namespace eng {
using fp16 = half;
using bf16 = __nv_bfloat16;
enum class DType { kFloat32, kFloat16, kBFloat16 };
#define TYPE_SWITCH_16BIT(dtype, type, ...) \\
  switch (dtype) { \\
    case DType::kFloat16: { using type = fp16; __VA_ARGS__; break; } \\
    case DType::kBFloat16: { using type = bf16; __VA_ARGS__; break; } \\
    default: break; }
#define TYPE_SWITCH_ALL(dtype, type, ...) \\
  switch (dtype) { \\
    case DType::kFloat16: { using type = fp16; { __VA_ARGS__ } } break; \\
    case DType::kFloat32: { using type = float; { __VA_ARGS__ } } break; \\
    default: break; }
template <typename T, int N> __device__ void copy_vector(T* dst, const T* src);
template <> __device__ void copy_vector<fp16, 2>(fp16* dst, const fp16* src) { *(half2*)dst = *(const half2*)src; }
template <> __device__ void copy_vector<bf16, 2>(bf16* dst, const bf16* src) { *(float*)dst = *(const float*)src; }
template <typename input_t, typename output_t, typename acc_t, int LOG2>
__global__ void softmax_kernel(output_t* dst, const input_t* src, int n) {
  int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  input_t v[2];
  if (i < n) { copy_vector<input_t, 2>(v, src + i); dst[i] = (output_t)((acc_t)v[0] * LOG2); dst[i + 1] = v[1]; }
}
template <typename input_t, typename output_t, typename acc_t>
void dispatch_softmax(output_t* dst, const input_t* src, int n) {
  softmax_kernel<input_t, output_t, acc_t, 3><<<(n / 2 + 127) / 128, 128>>>(dst, src, n);
}
void softmax(DType dt, void* dst, const void* src, int n) {
  TYPE_SWITCH_16BIT(dt, softmax_type,
      dispatch_softmax<softmax_type, softmax_type, float>((softmax_type*)dst, (const softmax_type*)src, n););
}
template <typename Type> __global__ void transpose_kernel(Type* out, const Type* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
void transpose(DType dt, void* out, const void* in, int n) {
  TYPE_SWITCH_ALL(dt, Type,
      transpose_kernel<Type><<<(n + 127) / 128, 128>>>((Type*)out, (const Type*)in, n););
}
template <typename Type> __global__ void cast_kernel(Type* out, const Type* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
void cast(DType dt, void* out, const void* in, int n) {
  TYPE_SWITCH_16BIT(dt, Type,
      cast_kernel<Type><<<(n + 127) / 128, 128>>>((Type*)out, (const Type*)in, n););
}
}  // namespace eng
"""


@pytest.mark.parametrize("kernel,expected", [("softmax_kernel", "<eng::fp16, eng::fp16, float, 3>"),
                                             ("transpose_kernel", "<float>"), ("cast_kernel", "<eng::fp16>")])
def test_a_type_a_switch_macro_of_the_project_declares_is_one_of_its_cases(tmp_path, kernel, expected):
    got, prop = _instantiate(tmp_path, SWITCHED, kernel)
    assert got == expected, prop.notes
    assert not any("scalar_t became float" in n for n in prop.notes), prop.notes


@pytest.mark.skipif(TK is None, reason="no CUDA toolkit (nvcc) here")
def test_nvcc_links_the_instance_a_switch_macro_declares(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    got, _ = _instantiate(tmp_path, SWITCHED, "eng::softmax_kernel")
    f = tmp_path / "k.cu"
    f.write_text(SWITCHED)
    r = nvcc.compile(SWITCHED, str(f), ProjectContext(), "sm_90", [f"eng::softmax_kernel{got}"], toolkit=TK)
    assert r.ok and len(r.kernels) == 1, [d.message for d in r.diagnostics]
