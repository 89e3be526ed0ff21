"""Issue 25: a kernel body's `#ifdef`/`#ifndef` decided by the program's macros, as its file's own
items are. sgl-kernel's KV-cache transfer (transfer.cu's `transfer_item_warp`) copies with PTX under
`#ifndef USE_ROCM` and with `__builtin_nontemporal_load/store` under its `#else`: both branches were
walked, the ROCm one a call Astra cannot see into, so every buffer's extent was unknown and each got a
guessed shape — the copy's stores then ran past `dst_v` into `src_v` ("the read-only input was modified")."""
import pytest

from tests.realcode.test_infer_asm_accesses import infer

COPY = ("__global__ void copy_items(const float* src, float* dst, int n, int width) {\n"
        "  int i = blockIdx.x;\n  if (i >= n) return;\n"
        "  for (int j = threadIdx.x; j < width; j += blockDim.x) {\n"
        "#ifndef USE_OTHER_GPU\n    dst[i * width + j] = src[i * width + j];\n"
        "#else\n    __builtin_nontemporal_store(__builtin_nontemporal_load(src + i * width + j), dst + i * width + j);\n"
        "#endif\n  }\n}\n"
        "void run(const float* s, float* d, int n, int w) { copy_items<<<n, 128>>>(s, d, n, w); }\n")


def test_a_branch_for_a_macro_nothing_defines_is_not_walked(project):
    """`USE_OTHER_GPU` is defined nowhere: the plain copy is the build's, both buffers n rows of width."""
    s, p = infer(project, "copy.cu", COPY, "copy_items")
    assert s.args["src"].shape == s.args["dst"].shape == ("n", "width"), p.notes
    assert s.args["dst"].output and not s.args["src"].output and not _unbounded(p)


def test_a_branch_for_a_macro_the_file_defines_is_the_one_walked(project):
    """With `#define USE_OTHER_GPU` the `#else` side is the build's: what it does with the pointers is
    unknown, and the notes say some accesses could not be bounded."""
    s, p = infer(project, "copy2.cu", "#define USE_OTHER_GPU\n" + COPY, "copy_items")
    assert _unbounded(p), p.notes


@pytest.mark.parametrize("macro", ["__CUDA_ARCH__", "CUDART_VERSION"])
def test_a_compiler_or_toolkit_macro_keeps_both_branches(project, macro):
    """`__CUDA_ARCH__` differs between nvcc's host and device passes, and `CUDART_VERSION` is defined
    by the toolkit's headers, which the program's macros do not list: both sides stay walked, and
    what either reaches counts (the unknown builtin included)."""
    s, p = infer(project, "copy3.cu", COPY.replace("USE_OTHER_GPU", macro).replace("#ifndef", "#ifdef"),
                 "copy_items")
    assert _unbounded(p), p.notes


def _unbounded(p) -> bool:
    return any("could not be bounded" in n or "could not be read" in n for n in p.notes)
