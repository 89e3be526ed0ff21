"""Issue 24's fast path for the search (`compile.fastpath`): a candidate is compiled from the
reference's cut by NVRTC only where it is proven that the cut means what the file means — the
proof made once per reference file and cached by content —, and only for a candidate that
rewrites the kernel and adds helpers of new names next to it; any other candidate, and any
reference whose proof fails, is compiled from its whole file by nvcc, as the final verdict always is.

The file below has the shape of the examples (SGLang's activation kernels: a device helper, the
kernel, host code below) with a device helper the kernel does not call and a host overload."""
import dataclasses
import shutil

import pytest

from astra_cuda.compile import cutcheck, extract, fastpath, static
from astra_cuda.model import source

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or static.available() is None,
                                reason="needs a CUDA toolkit (nvcc) and NVRTC")

FILE = """#include <cstdio>
#define SCALE 2.0f
#define UNUSED_SCALE 3.0f
__device__ __forceinline__ float twice(float x) { return SCALE * x; }
__device__ float unused_helper(float x) { return x + 1.0f; }
double pick(int x) { return x; }
__device__ float pick(float x) { return x; }

__global__ void k(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(in[i]);
}

int main() { printf("%d\\n", 1); return 0; }
"""
KERNEL = FILE[FILE.index("__global__"):FILE.index("int main")].rstrip()


def rewrite(body: str, helpers: str = "") -> str:
    new = "__global__ void k(float* out, const float* in, int n) {\n" + body + "\n}"
    return FILE.replace(KERNEL, (helpers + "\n\n" if helpers else "") + new)


@pytest.fixture
def proven(project, monkeypatch, tmp_path):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    fastpath._proofs.clear()
    f = project("k.cu", FILE)
    ref = extract.unit(FILE, str(f), "k")
    proof = fastpath.prove(ref)
    assert proof.ok, proof.reason
    return f, ref, proof


def unit_for(ref, proof, text):
    return fastpath.search_unit(ref, proof, source.parse(FILE), source.parse(text), "k")


@needs_nvcc
def test_the_proof_is_made_once_per_reference_and_cached_by_content(proven, monkeypatch):
    f, ref, proof = proven
    other = extract.unit(FILE.replace("SCALE * x", "SCALE * x + 0.5f"), str(f), "k")
    fastpath._proofs.clear()   # another worker process: the proof is on disk

    def no_compiler(*a, **k):
        raise AssertionError("a cached proof ran a compiler again")
    monkeypatch.setattr(cutcheck.confine, "run", no_compiler)
    monkeypatch.setattr(fastpath, "_same_code", no_compiler)
    assert fastpath.prove(ref) == proof
    # another file text is another proof
    with pytest.raises(AssertionError, match="ran a compiler"):
        fastpath.prove(other)


@needs_nvcc
def test_a_kernel_only_rewrite_is_compiled_by_nvrtc_from_the_proven_cut(proven):
    f, ref, proof = proven
    text = rewrite("  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
                   "    out[i] = four(in[i]) * 0.5f;",
                   "__device__ __forceinline__ float four(float x) { return twice(twice(x)); }")
    u, why = unit_for(ref, proof, text)
    assert u is not None, why
    assert u.search_cut and u.file_text == text   # the whole candidate file: what a final verdict compiles
    assert "four(float x)" in u.source and "i += gridDim.x" in u.source and "if (i < n) out[i]" not in u.source
    r = static.compile_unit(u)
    assert r.ok, r.log
    assert r.compiler.startswith("NVRTC") and "proven" in r.compiler
    # the same unit without the search's mark: the whole file, by nvcc (today's path, the final verdict's)
    whole = static.compile_unit(dataclasses.replace(u, search_cut=""))
    assert whole.ok and whole.compiler.startswith("nvcc"), whole.compiler


@needs_nvcc
@pytest.mark.parametrize("text,why", [
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = unused_helper(in[i]);"), "unused_helper"),
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = sizeof(decltype(pick(1)));"), "pick"),
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = UNUSED_SCALE * in[i];"), "UNUSED_SCALE"),
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = in[i];").replace("return 0;", "return 1;"),
     "changes more than the kernel"),
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = in[i];").replace("SCALE * x", "SCALE * x * x"),
     "changes more than the kernel"),
    (rewrite("  int i = threadIdx.x;\n  if (i < n) out[i] = in[i] + 1;").replace("int n)", "long n)"),
     "parameters"),
])
def test_a_candidate_the_proof_does_not_cover_goes_the_whole_file_way(proven, text, why):
    _, ref, proof = proven
    u, reason = unit_for(ref, proof, text)
    assert u is None and why in reason, reason


@needs_nvcc
def test_no_fast_path_where_the_cut_is_not_proven(project, monkeypatch, tmp_path):
    # the cut leaves out a host overload that device code names in decltype (test_cut's MEANING)
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    text = ("double pick(int x) { return x; }\n__device__ float pick(float x) { return x; }\n"
            "__global__ void k(int* o) { o[0] = sizeof(decltype(pick(1))); }\n")
    f = project("k.cu", text)
    ref = extract.unit(text, str(f), "k")
    proof = fastpath.prove(ref)
    assert not proof.ok and "not proven" in proof.reason
    u, why = fastpath.search_unit(ref, proof, source.parse(text), source.parse(text.replace("o[0] =", "o[0] = 0 +")),
                                  "k")
    assert u is None and why == proof.reason


@needs_nvcc
def test_a_proof_that_could_not_be_made_is_not_kept_on_disk(project, monkeypatch, tmp_path):
    """nvcc past its time limit on a busy machine says nothing about the cut: the next run tries again."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    fastpath._proofs.clear()
    f = project("k.cu", FILE)
    ref = extract.unit(FILE, str(f), "k")
    busy = cutcheck.CutCheck(True, False, "the cut is not checked: nvcc does not compile the file (nvcc did not "
                                          "finish within 240 s)")
    monkeypatch.setattr(cutcheck, "check", lambda *a, **k: busy)
    monkeypatch.setattr(fastpath, "_same_code", lambda *a, **k: ("", fastpath.SEARCH_NVRTC))
    assert not fastpath.prove(ref).ok
    assert not list((tmp_path / "cache").rglob("fastpath-*.json"))


@needs_nvcc
@pytest.mark.parametrize("nvrtc_says", ["refuses", "differs"])
def test_where_nvrtcs_code_is_not_nvccs_the_search_compiles_the_cut_with_nvcc(project, monkeypatch, tmp_path,
                                                                               nvrtc_says):
    """An NVRTC of another version than the toolkit's makes other code (the torch example on the GPU
    machine: other register counts), and NVRTC lacks headers nvcc has (CUB): the proof then
    compares nvcc's code for the cut with its code for the file, and the search compiles the cut with
    nvcc — seconds where a PyTorch extension's whole file takes ~20 (torch's headers)."""
    from astra_cuda.compile import nvrtc
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    fastpath._proofs.clear()
    real = nvrtc.compile_program

    def other_nvrtc(*a, **k):
        done = real(*a, **k)
        if nvrtc_says == "refuses":
            return nvrtc.Compiled(False, 'astra_unit.cu(1): catastrophic error: cannot open source file "cub/cub.cuh"',
                                  "", {})
        assert ".reg .f32" in done.ptx
        return dataclasses.replace(done, ptx=done.ptx.replace(".reg .f32", ".reg .f32 %extra;\n.reg .f32"))
    monkeypatch.setattr(nvrtc, "compile_program", other_nvrtc)
    f = project("k.cu", FILE)
    ref = extract.unit(FILE, str(f), "k")
    proof = fastpath.prove(ref)
    assert proof.ok and proof.compiler == fastpath.SEARCH_NVCC, proof
    assert "nvcc's code for the cut is nvcc's for the file" in proof.reason
    text = rewrite("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = twice(in[i]) + 0.0f;")
    u, why = unit_for(ref, proof, text)
    assert u is not None and u.search_cut == fastpath.SEARCH_NVCC, why
    r = static.compile_unit(u)
    assert r.ok and r.compiler.startswith(fastpath.SEARCH_NVCC + ": nvcc "), r.compiler
    assert fastpath.reference_unit(ref, proof).search_cut == fastpath.SEARCH_NVCC   # both sides alike
    # the same candidate as a final verdict: its whole file, nvcc, no mark
    whole = static.compile_unit(dataclasses.replace(u, search_cut=""))
    assert whole.ok and whole.compiler.startswith("nvcc "), whole.compiler


@needs_nvcc
def test_no_fast_path_where_neither_compilers_code_for_the_cut_is_the_files(project, monkeypatch, tmp_path):
    """An inliner that decides otherwise in the larger file: neither NVRTC's nor nvcc's optimised
    code for the cut is the file's (the cut's PTX is made to differ here; nvcc's unoptimised
    code, cutcheck's, is left alone)."""
    from astra_cuda.compile import nvrtc
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    fastpath._proofs.clear()
    other = ".reg .f32 %extra;\n.reg .f32"
    real_nvrtc, real_nvcc = nvrtc.compile_program, cutcheck.nvcc_ptx

    def nvrtc_other(*a, **k):
        done = real_nvrtc(*a, **k)
        return dataclasses.replace(done, ptx=done.ptx.replace(".reg .f32", other))

    def nvcc_other(nvcc, text, *a, optimised=False, **k):
        ptx, log = real_nvcc(nvcc, text, *a, optimised=optimised, **k)
        cut = "int main()" not in text   # the file has its host code; the cut does not
        return (ptx.replace(".reg .f32", other) if ptx and optimised and cut else ptx), log
    monkeypatch.setattr(nvrtc, "compile_program", nvrtc_other)
    monkeypatch.setattr(cutcheck, "nvcc_ptx", nvcc_other)
    f = project("k.cu", FILE)
    proof = fastpath.prove(extract.unit(FILE, str(f), "k"))
    assert not proof.ok and not proof.compiler
    assert "NVRTC's code for the cut is not nvcc's" in proof.reason and "nvcc's code for the cut is not" in proof.reason
