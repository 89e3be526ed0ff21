"""Stand-alone compilation units: what is kept, what is dropped, and #line mapping."""
from pathlib import Path

from astra_cuda.compile import extract

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_pytorch_style_file_drops_host_code():
    path = str(EXAMPLES / "fused_add_rmsnorm.cu")
    u = extract.unit(Path(path).read_text(), path, "fused_add_rmsnorm_kernel")
    assert "PYBIND11_MODULE" not in u.source
    # host-only headers stay in place, only for an nvcc build (never NVRTC or the CPU backend)
    guarded = u.source.split("#include <torch/extension.h>")[0].rsplit("\n#if ", 1)[1]
    assert guarded.startswith("defined(ASTRA_HOST_HEADERS)")
    assert "TORCH_CHECK" not in u.source
    assert "#define MAX_THREADS 1024" in u.source and "block_reduce_sum" in u.source
    assert "#include <torch/extension.h>" in u.dropped and "PYBIND11_MODULE" in u.dropped
    assert u.name_expression == "fused_add_rmsnorm_kernel"


def test_plain_file_with_main():
    path = str(EXAMPLES / "silu_and_mul.cu")
    u = extract.unit(Path(path).read_text(), path, "silu_and_mul")
    assert "int main" not in u.source and "cudaMalloc" not in u.source
    assert "__device__ __forceinline__ float silu" in u.source
    assert "main" in u.dropped


def test_line_directives_point_at_user_lines():
    text = "#include <cuda_fp16.h>\n\n__device__ float f(float x) { return x; }\n\n\n  __global__ void k(float* o) { o[0] = f(1.f); }\nint main() {}\n"
    u = extract.unit(text, "/tmp/x.cu", "k")
    lines = u.source.splitlines()
    i = lines.index('#line 6 "/tmp/x.cu"')
    assert lines[i + 1] == "  __global__ void k(float* o) { o[0] = f(1.f); }"  # same column too
    assert '#line 3 "/tmp/x.cu"' in lines


def test_unused_helpers_and_other_kernels_left_out():
    text = ("__device__ float used(float x) { return x; }\n__device__ float unused(float x) { return x; }\n"
            "__global__ void a(float* o) { o[0] = used(1.f); }\n__global__ void b(float* o) { o[0] = unused(1.f); }\n")
    u = extract.unit(text, "f.cu", "a")
    assert "used(float" in u.source and "unused" not in u.source and "void b" not in u.source


def test_template_and_namespace_name_expression():
    text = "namespace ns {\ntemplate <typename T> __global__ void k(T* o) { o[0] = T(1); }\n}\n"
    u = extract.unit(text, "f.cu", "k", instantiate="<float>")
    assert u.name_expression == "ns::k<float>"
    assert "namespace ns {" in u.source


def test_replace_kernel_keeps_spec_and_rest():
    text = "/* @astra\ngrid=[1]\n*/\n__global__ void k(float* o) { o[0] = 1.f; }\nint main() {}\n"
    new = extract.replace_kernel(text, "k", "__global__ void k(float* o) { o[0] = 2.f; }")
    assert new.startswith("/* @astra") and "2.f" in new and new.endswith("int main() {}\n")


def test_a_kernel_behind_an_included_non_source_file_is_said_so(tmp_path):
    """`#include ".env"` before the kernel: the device pass reads it in, the kernel no longer reads
    as C++ — said as a possible cause, not only a conditional (and the .env's text is not shown)."""
    import pytest
    from astra_cuda.errors import AstraError
    (tmp_path / ".git").mkdir()
    (tmp_path / ".env").write_text("KEY=canaryValue123\n")
    f = tmp_path / "k.cu"
    f.write_text('#include ".env"\n__global__ void k(float* x) { x[0] = 1; }\n')
    with pytest.raises(AstraError, match="not in the file as nvcc's device pass sees it") as e:
        extract.unit(f.read_text(), str(f), "k")
    assert "an #include of a file that is not source" in e.value.message and "canary" not in e.value.message
