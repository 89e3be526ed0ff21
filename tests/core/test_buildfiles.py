"""The flags a project's CMakeLists.txt / setup.py give nvcc (astra_cuda.compile.buildfiles), read where
no compile_commands.json says them (issue 24: vLLM's __device__ lambdas, llm-awq's -U flags)."""
import json
from pathlib import Path

from astra_cuda.compile import buildfiles, project, torch_ext

# the shape of llm-awq's awq/kernels/setup.py (written here)
SETUP = '''
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
extra_compile_args = {
    "cxx": ["-O3", "-std=c++17"],
    "nvcc": ["-O3", "-std=c++17", "-DENABLE_BF16", "-U__CUDA_NO_HALF_OPERATORS__",
             "-U__CUDA_NO_HALF_CONVERSIONS__"] + ["--expt-relaxed-constexpr", "--expt-extended-lambda"],
}
setup(name="ext", ext_modules=[CUDAExtension(name="ext", sources=["csrc/pybind.cpp", "csrc/act.cu"],
                                             extra_compile_args=extra_compile_args)])
'''


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    r = tmp_path / "repo"
    (r / ".git").mkdir(parents=True)
    for rel, text in files.items():
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text(text)
    return r


def test_a_setup_py_gives_its_extensions_nvcc_flags(tmp_path):
    r = _repo(tmp_path, {"kernels/setup.py": SETUP, "kernels/csrc/act.cu": "", "kernels/csrc/utils.cuh": ""})
    for f in ("kernels/csrc/act.cu", "kernels/csrc/utils.cuh"):   # a source it lists, a header beside
        ctx = project.resolve(str(r / f), root=str(r))
        assert ctx.defines == (("ENABLE_BF16", None),) and ctx.std == "c++17"
        assert ctx.undefines == ("__CUDA_NO_HALF_OPERATORS__", "__CUDA_NO_HALF_CONVERSIONS__")
        assert ctx.flags == ("--expt-relaxed-constexpr", "--extended-lambda")   # nvcc's and NVRTC's spelling
        assert "-O3" in ctx.ignored and any("setup.py" in o for o in ctx.origin)
        # torch's defines the build undoes stay undone
        assert "-D__CUDA_NO_HALF_OPERATORS__" not in torch_ext.defines(ctx)


def test_flags_computed_at_build_time_are_not_guessed():
    computed = SETUP.replace('["--expt-relaxed-constexpr", "--expt-extended-lambda"]', "cc_flags()")
    assert buildfiles.setup_nvcc_flags(computed, "csrc/act.cu") == ()
    two = SETUP + 'CUDAExtension(name="b", sources=["csrc/b.cu"], extra_compile_args={"nvcc": ["-DB"]})\n'
    assert buildfiles.setup_nvcc_flags(two, "csrc/b.cu") == ("-DB",)
    assert buildfiles.setup_nvcc_flags(two, "csrc/other.cuh") == ()   # extensions differ, none lists it
    assert buildfiles.setup_nvcc_flags("def broken(:\n", "a.cu") == ()
    # a name assigned again under a condition (apex's version macros) is not a literal
    again = SETUP.replace("extra_compile_args = {", "import sys\nextra = []\nif sys.version_info > (3,):\n"
                          "    extra = ['-DNEW']\nextra_compile_args = {").replace('"nvcc": [', '"nvcc": extra + [')
    assert buildfiles.setup_nvcc_flags(again, "csrc/act.cu") == ()
    assert buildfiles.setup_nvcc_flags(again.replace("    extra = ['-DNEW']\n", "    pass\n"), "csrc/act.cu")[0] == "-O3"


def test_a_cmake_project_that_finds_torch_gets_torchs_cuda_flags(tmp_path):
    cmake = "project(x LANGUAGES CXX CUDA)\n# find_package(Python)\nfind_package(Torch REQUIRED)\n"
    r = _repo(tmp_path, {"CMakeLists.txt": cmake, "csrc/quant/k.cu": ""})
    ctx = project.resolve(str(r / "csrc/quant/k.cu"), root=str(r))
    assert ctx.flags == ("--expt-relaxed-constexpr", "--extended-lambda")
    commented = _repo(tmp_path / "b", {"CMakeLists.txt": "# find_package(Torch REQUIRED)\n", "k.cu": ""})
    assert project.resolve(str(commented / "k.cu"), root=str(commented)).empty
    # a compile_commands.json is the build itself: the build files are not read then
    (r / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(r), "file": "csrc/quant/k.cu", "arguments": ["nvcc", "-DX", "-c", "csrc/quant/k.cu"]}]))
    assert project.resolve(str(r / "csrc/quant/k.cu"), root=str(r)).flags == ()
