"""Issue 25: what the case a launch stands in fixes — minimal cases written here of FlashInfer's
MergeStateKernel: `DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, { constexpr uint32_t vec_size =
std::max(16U / sizeof(DTypeIn), HEAD_DIM / 32U); ... kernel<vec_size, DTypeIn, DTypeO> })`. The
vector width was taken as 1 (`sizeof(DTypeIn)` was read before `DTypeIn` was), and `head_dim` as
a free size beside the case's 64: 48 of 64 elements of each row were never written."""
from .test_infer_patterns import infer

MERGE = """#include <algorithm>
#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...) \\
  switch (head_dim) {                              \\
    case 64: { constexpr size_t HEAD_DIM = 64; __VA_ARGS__ break; } \\
    case 128: { constexpr size_t HEAD_DIM = 128; __VA_ARGS__ break; } \\
  }
template <unsigned vec_size, typename DTypeIn, typename DTypeO>
__global__ void merge(const DTypeIn* a, const DTypeIn* b, DTypeO* out, unsigned num_heads, unsigned head_dim) {
  unsigned row = blockIdx.x * num_heads + threadIdx.y;
  for (unsigned i = 0; i < vec_size; ++i) {
    unsigned j = row * head_dim + threadIdx.x * vec_size + i;
    out[j] = a[j] + b[j];
  }
}
template <typename DTypeIn, typename DTypeO>
void launch(const DTypeIn* a, const DTypeIn* b, DTypeO* out, unsigned seq_len, unsigned num_heads, unsigned head_dim) {
  DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, {
    constexpr unsigned vec_size = std::max(16U / sizeof(DTypeIn), HEAD_DIM / 32U);
    dim3 nthrs(HEAD_DIM / vec_size, num_heads);
    merge<vec_size, DTypeIn, DTypeO><<<seq_len, nthrs>>>(a, b, out, num_heads, head_dim);
  });
}
"""


def test_a_value_argument_over_the_size_of_a_later_type_argument(project):
    project("merge.cu", MERGE)
    s, p = infer(project, "merge.cu", "merge")
    assert s.instantiate == "<4, float, float>"


def test_the_size_a_dispatch_macro_switches_on_is_its_cases_value(project):
    project("merge.cu", MERGE)
    s, p = infer(project, "merge.cu", "merge")
    assert s.args["head_dim"].value == "64" and s.block == ("16", "num_heads")
    assert s.args["out"].shape == ("seq_len", "num_heads", "64") and s.args["a"].shape == ("seq_len", "num_heads", "64")


def test_a_launch_in_the_case_of_a_switch_over_the_block_is_read_at_the_default_block(project):
    """cuda-samples reduce6: `switch (threads) { case 512: k<T, 512, false><<<g, dimBlock>>>; ...
    case 1: k<T, 1, false> }` — the launch whose case is the block size taken (256), not the one
    with the smallest template arguments (a blockSize of 1 under a block of 256 threads)."""
    project("red.cu", "template <class T, unsigned B, bool P>\n"
            "__global__ void red(T* in, T* out, unsigned n) {\n"
            "  unsigned i = blockIdx.x * B + threadIdx.x;\n  if (i < n) out[i] = in[i];\n}\n"
            "template <class T> void reduce(int size, int threads, int blocks, T* in, T* out) {\n"
            "  dim3 dimBlock(threads, 1, 1), dimGrid(blocks, 1, 1);\n  switch (threads) {\n"
            "    case 512: red<T, 512, false><<<dimGrid, dimBlock>>>(in, out, size); break;\n"
            "    case 256: red<T, 256, false><<<dimGrid, dimBlock>>>(in, out, size); break;\n"
            "    case 1: red<T, 1, false><<<dimGrid, dimBlock>>>(in, out, size); break;\n  }\n}\n"
            "template void reduce<int>(int, int, int, int*, int*);\n")
    s, _ = infer(project, "red.cu", "red")
    assert s.instantiate == "<int, 256, false>" and s.block[0] == "256"


def test_a_dispatch_macro_behind_a_vendored_librarys_many_headers_is_read(project):
    """FlashInfer's cascade.cuh includes cp_async.cuh (and through it 60-odd CCCL headers of its
    3rdparty/ folder) before utils.cuh, which defines DISPATCH_HEAD_DIM: a compile unit's budget of
    project headers was spent before it, so the macro went unread."""
    for i in range(80):
        project(f"vendor/v{i}.h", f"#pragma once\n#define VENDOR_{i} {i}\n")
    project("vendor/all.h", "".join(f'#include "v{i}.h"\n' for i in range(80)))
    macro, rest = MERGE.split("template <unsigned vec_size", 1)
    project("utils.h", macro.replace("#include <algorithm>\n", ""))
    project("merge.cu", '#include <algorithm>\n#include "vendor/all.h"\n#include "utils.h"\n'
            "template <unsigned vec_size" + rest)
    s, p = infer(project, "merge.cu", "merge")
    assert s.args["head_dim"].value == "64" and s.instantiate == "<4, float, float>"


def test_a_defaulted_type_argument_is_resolved_after_the_arguments_its_default_names(project):
    """sgl-kernel per_token_group_quant_8bit: `typename scale_packed_t = std::conditional_t<SCALE_UE8M0,
    uint32_t, float>` after `bool SCALE_UE8M0`: resolving type arguments first must not leave the
    default naming a parameter not yet bound."""
    project("q.cu", "#include <type_traits>\n"
            "template <typename T, bool S, typename P = std::conditional_t<S, unsigned, float>>\n"
            "__global__ void q(const T* in, P* out, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = (P)in[i];\n}\n"
            "void launch(const float* in, float* out, int n) {\n"
            "  q<float, false><<<(n + 255) / 256, 256>>>(in, out, n);\n}\n")
    s, _ = infer(project, "q.cu", "q")
    assert s.instantiate == "<float, false, std::conditional_t<false, unsigned, float>>"


def test_a_fixed_multiple_is_a_dimension_only_where_a_size_is_fixed_to_it():
    """An extent 256 times a size is [n, 256] where a dimension is fixed to 256 (a dispatch's case),
    not where a guessed grid of 256 blocks bounds the rows written (apex index_mul_2d)."""
    from astra_cuda.infer.shape_fits import fit_product
    values = [({"n": n}, n * 256 - 1 + 1) for n in (96, 160, 288)]
    assert fit_product(values, ["n"]) is None and fit_product(values, ["n"], frozenset({256})) == ["n", "256"]
