"""Issue 10, breakages 8 and 9: templated kernels (launches inside dispatch macros, device
functions passed as template arguments, enable_if overloads listed once) and the kernel list
never cutting a name."""
import dataclasses


from astra_cuda import cli
from astra_cuda.model import source
from astra_cuda.compile import extract

ACT = """#include <cuda_fp16.h>
#define LAUNCH_ACT_KERNEL(KERNEL)                                                   \\
  EXT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "act_and_mul_kernel", [&] {      \\
    act_and_mul_kernel<scalar_t, KERNEL<scalar_t>><<<grid, block, 0, stream>>>(     \\
        out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), d);                   \\
  });
template <typename T> __device__ __forceinline__ T silu(const T& x) { return (T)((float)x / (1.0f + __expf(-(float)x))); }
template <typename T> __device__ __forceinline__ T unused_act(const T& x) { return x; }
template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&)>
__global__ void act_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input, const int d) {
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    out[token * d + i] = ACT_FN(input[token * 2 * d + i]) * input[token * 2 * d + d + i];
  }
}
void silu_and_mul(torch::Tensor& out, torch::Tensor& input) {
  int d = input.size(-1) / 2;
  int64_t num_tokens = input.numel() / input.size(-1);
  dim3 grid(num_tokens);
  dim3 block(std::min(d, 1024));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  LAUNCH_ACT_KERNEL(silu);
}
"""

OVERLOADS = """#include <type_traits>
template <typename T, int W>
__global__ typename std::enable_if<(W > 1), void>::type
scale_kernel(T* out, const T* in, int n) { int i = (blockIdx.x * blockDim.x + threadIdx.x) * W;
  for (int k = 0; k < W; ++k) if (i + k < n) out[i + k] = in[i + k] * T(2); }
template <typename T, int W>
__global__ typename std::enable_if<(W == 1), void>::type
scale_kernel(T* out, const T* in, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * T(2); }
"""


def test_a_launch_inside_a_dispatch_macro_is_found_at_the_macros_use():
    m = source.parse(ACT)
    (site,) = m.launches_of("act_and_mul_kernel")
    assert site.via_macro == "LAUNCH_ACT_KERNEL" and site.function == "silu_and_mul"
    assert site.template_args == "<scalar_t, silu<scalar_t>>" and site.span.start_line == 21
    assert site.grid_var.dims == ("num_tokens",) and site.block_var.dims == ("std::min(d, 1024)",)
    assert site.block_var.line == 19   # the dim3's own line in the file


def test_a_device_function_passed_as_template_argument_is_in_the_unit(tmp_path):
    u = extract.unit(ACT, str(tmp_path / "act.cu"), "act_and_mul_kernel", instantiate="<float, silu<float>>")
    assert "T silu(const T& x)" in u.source and "unused_act" not in u.source
    from astra_cuda.compile import static
    # the cut unit compiles (NVRTC, as where no toolkit is installed); the file itself does not
    # under nvcc — its host wrapper names torch::Tensor without including torch — and nvcc says so
    assert static.compile_unit(dataclasses.replace(u, file_text="")).ok
    said = static.compile_unit(u)
    assert not said.ok and said.compiler.startswith("nvcc") and any(d.line == 15 for d in said.diagnostics)


def test_enable_if_overloads_are_one_kernel_and_both_reach_the_unit(tmp_path):
    m = source.parse(OVERLOADS)
    assert [k.name for k in m.kernels] == ["scale_kernel"] and len(m.kernels[0].overloads) == 1
    f = tmp_path / "o.cu"
    f.write_text(OVERLOADS)
    u = extract.unit(OVERLOADS, str(f), "scale_kernel", instantiate="<float, 1>")
    assert u.source.count("scale_kernel(T* out") == 2
    from astra_cuda.compile import static
    assert static.compile_unit(u).ok
    u4 = extract.unit(OVERLOADS, str(f), "scale_kernel", instantiate="<float, 4>")
    assert static.compile_unit(dataclasses.replace(u4, file_text="")).ok   # the cut unit, NVRTC


def test_enable_if_overloads_through_nvcc(tmp_path):
    # the demangled entry's return type holds `enable_if<((4)>(1)), void>`: a comparison, not a bracket
    f = tmp_path / "o.cu"
    f.write_text(OVERLOADS)
    from astra_cuda.compile import static
    assert static.compile_unit(extract.unit(OVERLOADS, str(f), "scale_kernel", instantiate="<float, 4>")).ok


def test_kernels_never_cuts_a_long_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    names = [f"fused_add_rms_norm_kernel_with_a_long_name_version_{v}" for v in ("one", "two")]
    f = tmp_path / "long.cu"
    f.write_text("".join(f"__global__ void {n}(float* out, const float* __restrict__ input, int num_tokens, "
                         f"int hidden_size) {{}}\n" for n in names))
    assert cli.main(["kernels", str(f)]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in names)
