"""Issue 25: patterns of public kernels that inference got wrong, each as a minimal case written
here: per-block partial results sized by the grid, the launcher's own asserts as requirements."""
import pytest

from astra_cuda import api
from astra_cuda.model import source, spec


def infer(project, rel, kernel):
    path = project.root / rel
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)   # what is read, not run
    text = path.read_text()
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p   # raises unless the validator accepts it


def test_per_block_partial_results_are_one_row_per_block_of_the_grid(project):
    project("hist.cu", "#define BINS 64\n"
                       "__global__ void partial_hist(unsigned* partial, const unsigned* data, unsigned n) {\n"
                       "  __shared__ unsigned h[BINS];\n  if (threadIdx.x < BINS) h[threadIdx.x] = 0;\n"
                       "  __syncthreads();\n"
                       "  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
                       "    atomicAdd(&h[data[i] % BINS], 1u);\n  __syncthreads();\n"
                       "  if (threadIdx.x < BINS) partial[blockIdx.x * BINS + threadIdx.x] = h[threadIdx.x];\n}\n"
                       "void run(unsigned* p, const unsigned* d, unsigned n, unsigned blocks) {\n"
                       "  partial_hist<<<blocks, 128>>>(p, d, n);\n}\n")
    s, p = infer(project, "hist.cu", "partial_hist")
    assert s.args["partial"].shape == (s.grid[0], "64") and s.args["data"].shape == ("n",)


def test_the_launchers_asserts_are_required_and_the_bench_meets_them(project):
    project("scan.cu", "#include <cassert>\n#define TB 256\n"
                       "__global__ void tile_scan(unsigned* dst, const unsigned* src, unsigned len) {\n"
                       "  __shared__ unsigned s[TB];\n  unsigned pos = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  s[threadIdx.x % len] = src[pos];\n  __syncthreads();\n  dst[pos] = s[threadIdx.x % len];\n}\n"
                       "void scan(unsigned* d, const unsigned* s, unsigned batch, unsigned len) {\n"
                       "  assert(len >= 4 && (len <= TB));\n  assert((batch * len) % TB == 0);\n"
                       "  tile_scan<<<batch * len / TB, TB>>>(d, s, len);\n}\n")
    s, p = infer(project, "scan.cu", "tile_scan")
    assert {"len >= 4", "len <= 256", "batch * len % 256 == 0"} <= set(s.require)
    assert s.args["dst"].shape in (("batch", "len"), (s.grid[0], "256"))
    assert s.bench_cases() and all(c["len"] <= 256 for c in s.bench_cases())


TILED = ("template <int T> __global__ void tiled_mm(float* C, const float* A, const float* B, int wA, int wB) {\n"
         "  int aBegin = wA * T * blockIdx.y, aEnd = aBegin + wA - 1, bBegin = T * blockIdx.x;\n"
         "  float acc = 0;\n"
         "  for (int a = aBegin, b = bBegin; a <= aEnd; a += T, b += T * wB) {\n"
         "    __shared__ float As[T][T], Bs[T][T];\n"
         "    As[threadIdx.y][threadIdx.x] = A[a + wA * threadIdx.y + threadIdx.x];\n"
         "    Bs[threadIdx.y][threadIdx.x] = B[b + wB * threadIdx.y + threadIdx.x];\n    __syncthreads();\n"
         "    for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n    __syncthreads();\n  }\n"
         "  C[wB * T * blockIdx.y + T * blockIdx.x + wB * threadIdx.y + threadIdx.x] = acc;\n}\n"
         "void mm(float* C, const float* A, const float* B, int bs, const dim3& dimsA, const dim3& dimsB) {\n"
         "  dim3 threads(bs, bs);\n  dim3 grid(dimsB.x / threads.x, dimsA.y / threads.y);\n"
         "  if (bs == 16) tiled_mm<16><<<grid, threads>>>(C, A, B, dimsA.x, dimsB.x);\n"
         "  else tiled_mm<32><<<grid, threads>>>(C, A, B, dimsA.x, dimsB.x);\n}\n"
         "int main() { mm(0, 0, 0, 32, dim3(320, 320), dim3(640, 320)); }\n")


def test_a_tiled_launch_is_read_in_the_branch_that_fixes_its_tile(project):
    """`if (bs == 16) k<16><<<grid(dimsB.x / bs, dimsA.y / bs), dim3(bs, bs)>>>`: inside that branch
    the block is 16 x 16 whatever main passes; a field of the launcher's dim3 is a size of its own,
    and the second index stepped with the loop's (`b += T * wB`) reaches as far as its trips take it."""
    project("mm.cu", TILED)
    s, p = infer(project, "mm.cu", "tiled_mm")
    assert s.instantiate == "<16>" and s.block == ("16", "16")
    assert s.grid == ("wB / 16", "dimsA_y / 16")
    assert s.args["C"].shape == ("dimsA_y", "wB") and s.args["A"].shape == ("dimsA_y", "wA")
    assert s.args["B"].shape == ("wA", "wB")


def test_a_fault_on_a_partial_tile_is_tried_again_with_whole_tiles(project):
    from astra_cuda.infer import Proposal, validate
    first = Proposal("/* @astra a */\n")
    runs = {first.comment: validate.Trial(True, False, "launch: crashed", ("launch",), (("wA", 100),))}
    asked = []

    def redo(decide):
        asked.append(decide)
        return None
    validate.first_that_runs(first, lambda p: runs[p.comment], redo, "cpu")
    assert {"tiles": "block"} in asked
    project("mm.cu", TILED)
    path = project.root / "mm.cu"
    snap = api.snapshot(path.read_text(), str(path))
    tiled = api.infer.infer(snap.model.kernel("tiled_mm"), snap.model, path=str(path), decide={"tiles": "block"})
    assert "wA % 16 == 0" in tiled.comment and any("whole tiles of 16" in n for n in tiled.notes)


def test_a_dim3_set_member_by_member_before_the_launch_is_followed(project):
    project("rows.cu", "__global__ void fill_rows(float* out, int width, int height) {\n"
                       "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  if (x >= width) return;\n"
                       "  out[blockIdx.y * width + x] = 1.0f;\n}\n"
                       "void run(float* out, int width, int height) {\n  dim3 threads, blocks;\n"
                       "  threads.x = 128;\n  blocks.x = (width + 127) / 128;\n  blocks.y = height;\n"
                       "  fill_rows<<<blocks, threads>>>(out, width, height);\n}\n")
    s, p = infer(project, "rows.cu", "fill_rows")
    assert s.grid == ("(width + 127) / 128", "height") and s.block == ("128",)
    assert sorted(s.args["out"].shape) == ["height", "width"]


def test_a_while_loop_index_runs_to_its_bound():
    from astra_cuda.model import access, source
    k = source.parse("__global__ void col(float* out, int h, int w) {\n  int i = threadIdx.x, end = h * w;\n"
                     "  while (i < end) { out[i] = 0.0f; i += w; }\n}\n").kernel("col")
    facts = access.analyse(k, {"h": 8, "w": 32}, (1, 1, 1), (32, 1, 1), {"out": 4}, set(), 100, {})
    assert facts.uses["out"].hi == 8 * 32 - 1   # not only the first row


def test_a_conditional_read_is_bounded_by_its_condition():
    from astra_cuda.model import access, source
    k = source.parse("__global__ void r(int* out, const int* in, unsigned n) {\n"
                     "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "  int v = (i < n) ? in[i] : 0;\n  if (i < n) out[i] = v;\n}\n").kernel("r")
    facts = access.analyse(k, {"n": 1000}, (4, 1, 1), (256, 1, 1), {"in": 4, "out": 4}, set(), 100, {})
    assert facts.uses["in"].hi == 999


def test_only_checks_on_the_launchs_own_path_are_required(project):
    project("two.cu", "#include <cassert>\n"
                      "__global__ void k(float* out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i < n) out[i] = 1.0f;\n}\n"
                      "void run(float* out, int n) {\n  assert(n >= 1);\n"
                      "  if (n > 100000) { assert(n % 1024 == 0); return; }\n"
                      "  k<<<(n + 255) / 256, 256>>>(out, n);\n}\n")
    s, p = infer(project, "two.cu", "k")
    assert "n >= 1" in s.require and not any("1024" in r for r in s.require)


def test_a_row_moved_by_vectors_is_a_whole_number_of_them(project):
    """vLLM rms_norm: rows read and written through `vec_n_t<T, VEC>` (a vector template over the
    element): the accesses are measured in elements of the vector, and the row length is a multiple
    of its width (a GPU faults on a misaligned vector access; the loop leaves a tail unwritten)."""
    project("vec.cu", "template <typename T, int N> struct alignas(sizeof(T) * N) vec_n_t { T v[N]; };\n"
                      "template <typename T, int VEC>\n"
                      "__global__ void rows_copy(T* out, const T* in, int hidden) {\n"
                      "  const T* row = in + blockIdx.x * hidden;\n"
                      "  auto* vi = reinterpret_cast<const vec_n_t<T, VEC>*>(row);\n"
                      "  auto* vo = reinterpret_cast<vec_n_t<T, VEC>*>(out + blockIdx.x * hidden);\n"
                      "  for (int i = threadIdx.x; i < hidden / VEC; i += blockDim.x) vo[i] = vi[i];\n}\n"
                      "void launch(float* o, const float* i, int rows, int hidden) {\n"
                      "  rows_copy<float, 4><<<rows, 256>>>(o, i, hidden);\n}\n")
    s, p = infer(project, "vec.cu", "rows_copy")
    assert s.args["out"].shape == ("rows", "hidden") and s.args["in"].shape == ("rows", "hidden")
    assert "hidden % 4 == 0" in s.require and all(c["hidden"] % 4 == 0 for c in s.cases())


def test_the_general_launch_is_read_in_its_own_branch_and_only_its_constexpr_path_walked(project):
    """vLLM activation_kernel: a launcher macro launches `<.., true, true>` (vector loads, 256-bit on a
    newer GPU: an assert elsewhere), `<.., true, false>` and `<.., false>` (any width), each branch
    declaring its own `dim3 block`. The general launch is the one without a switched-on feature; its
    block is the declaration in its own branch; the kernel's accesses are read on the `if constexpr`
    path that instance compiles (the vector path's types would make them unreadable)."""
    project("act.cu", "template <typename T> __device__ T twice(const T& x) { return x * 2; }\n"
                      "template <typename T, T (*F)(const T&), bool use_vec, bool wide = false>\n"
                      "__global__ void act_kernel(T* out, const T* in, const int d) {\n"
                      "  const T* ip = in + blockIdx.x * d;\n  T* op = out + blockIdx.x * d;\n"
                      "  if constexpr (use_vec) {\n"
                      "    using vec_t = typename Traits<wide>::vec_t;\n"
                      "    const vec_t* v = reinterpret_cast<const vec_t*>(ip);\n"
                      "    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) reinterpret_cast<vec_t*>(op)[i] = v[i];\n"
                      "  } else {\n"
                      "    for (int i = threadIdx.x; i < d; i += blockDim.x) op[i] = F(ip[i]);\n  }\n}\n"
                      "#define LAUNCH(K) \\\n  dim3 grid(n); \\\n"
                      "  if (d % 4 == 0) { \\\n    dim3 block(d / 4 < 1024 ? d / 4 : 1024); \\\n"
                      "    if (wide) act_kernel<float, K<float>, true, true><<<grid, block>>>(o, i, d); \\\n"
                      "    else act_kernel<float, K<float>, true, false><<<grid, block>>>(o, i, d); \\\n"
                      "  } else { \\\n    dim3 block(d < 1024 ? d : 1024); \\\n"
                      "    act_kernel<float, K<float>, false><<<grid, block>>>(o, i, d); \\\n  }\n"
                      "void run(float* o, const float* i, int n, int d, bool wide) { LAUNCH(twice); }\n")
    s, p = infer(project, "act.cu", "act_kernel")
    assert s.instantiate.replace(" ", "").endswith("twice<float>,false,false>")
    assert s.block == ("min(d, 1024)",)
    assert s.args["out"].shape == ("n", "d") and s.args["in"].shape == ("n", "d") and s.args["out"].output


def test_a_launch_in_an_else_branch_sees_the_sizes_that_reach_it(project):
    """exllamav2 cuda_vector_add_: `if (width % 8 == 0) { dim3 blockDim, gridDim; ... k8<<<..>>> }
    else { dim3 blockDim, gridDim; blockDim.x = 32; gridDim.x = DIVIDE(width, 64); ... k<<<..>>> }`:
    the else branch's own dim3s (set member by member) through the project's function-like macro,
    and only widths that are not multiples of 8 reach that launch."""
    project("add.cu", "#define DIVIDE(x, size) (((x) + (size) - 1) / (size))\n#define TX 32\n"
                      "__global__ void add8(float* d, const float* s, int h, int w) {}\n"
                      "__global__ void add1(float* d, const float* s, int h, int w) {\n"
                      "  int x = blockIdx.x * TX + threadIdx.x;\n  if (x >= w) return;\n"
                      "  for (int y = blockIdx.y * 16; y < min(blockIdx.y * 16 + 16, h); ++y) d[y * w + x] += s[x];\n}\n"
                      "void add(float* d, const float* s, int h, int w) {\n"
                      "  if (w % 8 == 0) {\n    dim3 blockDim, gridDim;\n    blockDim.x = 128;\n"
                      "    gridDim.x = DIVIDE(w, 1024);\n    add8<<<gridDim, blockDim>>>(d, s, h, w);\n  } else {\n"
                      "    dim3 blockDim, gridDim;\n    blockDim.x = TX;\n    gridDim.x = DIVIDE(w, TX);\n"
                      "    gridDim.y = DIVIDE(h, 16);\n    add1<<<gridDim, blockDim>>>(d, s, h, w);\n  }\n}\n")
    s, p = infer(project, "add.cu", "add1")
    assert s.block == ("32",) and s.grid == ("(w + 32 - 1) / 32", "(h + 16 - 1) / 16")
    assert "w % 8 != 0" in s.require and s.cases() and all(c["w"] % 8 for c in s.cases())
    assert s.args["d"].shape == ("h", "w") and s.args["s"].shape == ("w",)


def test_a_vector_type_named_in_the_body_is_followed_to_its_width(project):
    """vLLM merge_attn_states: `using pack_128b_t = uint4;` inside the kernel, then
    `reinterpret_cast<const pack_128b_t*>(head_ptr)[pack]`: 4 floats per access, so the heads'
    extent is read and their stride gets its contiguous value (a free stride misaligned the packs)."""
    project("merge.cu", "__global__ void merge(float* out, const float* in, const unsigned tokens,\n"
                        "                      const unsigned heads, const unsigned head_size, const unsigned head_stride) {\n"
                        "  using pack_t = uint4;\n  const unsigned pack = 16 / sizeof(float);\n"
                        "  const unsigned per_head = head_size / pack;\n"
                        "  const unsigned g = blockIdx.x * 128 + threadIdx.x;\n"
                        "  if (g >= tokens * heads * per_head) return;\n"
                        "  const unsigned th = g / per_head, p = g % per_head;\n"
                        "  const float* src = in + th * head_stride;\n  float* dst = out + th * head_size;\n"
                        "  reinterpret_cast<pack_t*>(dst)[p] = reinterpret_cast<const pack_t*>(src)[p];\n}\n"
                        "void run(float* o, const float* i, unsigned t, unsigned h, unsigned d, unsigned s) {\n"
                        "  merge<<<(t * h * (d / 4) + 127) / 128, 128>>>(o, i, t, h, d, s);\n}\n")
    s, p = infer(project, "merge.cu", "merge")
    assert s.args["in"].shape == ("tokens", "heads", "head_size") == s.args["out"].shape
    assert s.args["head_stride"].value == "head_size" and "head_stride" not in s.sizes


def test_a_type_its_traits_are_defined_for_not_float(project):
    """FlashInfer ConcatMLAKKernel: `using Traits = ConcatMLAVecTraits<DType>;` where the traits are
    only declared, then specialized for half, bfloat16 and fp8: float would not compile (an
    incomplete type), so the type parameter takes a type the traits offer."""
    project("cat.cu", "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                      "template <typename T> struct VecTraits;\n"
                      "template <> struct VecTraits<__half> { using V = int2; };\n"
                      "template <> struct VecTraits<__nv_bfloat16> { using V = int2; };\n"
                      "template <typename DType>\n__global__ void cat(DType* out, const DType* a, int n) {\n"
                      "  using Traits = VecTraits<DType>;\n  typename Traits::V unused;\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = a[i];\n}\n")
    s, p = infer(project, "cat.cu", "cat")
    assert s.instantiate == "<__half>" and s.args["out"].dtype.name == "half"


def test_a_thread_blocks_indices_and_a_namespaces_constant_are_read(project):
    """DeepSpeed gather_tokens: `tb.group_index().x` / `tb.thread_index().x` of a cooperative-groups
    thread_block are blockIdx / threadIdx, and `td_data::granularity` (a namespace's constexpr) is its
    value in the kernel and in the launcher's block (`(channels + vals - 1) / vals` threads)."""
    project("gather.cu", "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                         "namespace td { constexpr int granularity = 16; }\n"
                         "template <typename T>\n__global__ void pick(T* out, const int* idx, int tokens, int channels) {\n"
                         "  constexpr int vals = td::granularity / sizeof(T);\n"
                         "  cg::thread_block tb = cg::this_thread_block();\n"
                         "  const int g = idx[tb.group_index().x * tokens + tb.group_index().y];\n"
                         "  for (int i = tb.thread_index().x * vals; i < channels; i += blockDim.x * vals)\n"
                         "    out[(tb.group_index().x * tokens + tb.group_index().y) * channels + i] = g;\n}\n"
                         "template <typename T>\nvoid launch(T* out, const int* idx, int batch, int tokens, int channels) {\n"
                         "  constexpr int vals = td::granularity / sizeof(T);\n"
                         "  const int steps = (channels + vals - 1) / vals;\n"
                         "  const int threads = (steps >= 1024) ? 1024 : steps;\n"
                         "  dim3 block(threads);\n  dim3 grid(batch, tokens);\n"
                         "  pick<T><<<grid, block>>>(out, idx, tokens, channels);\n}\n"
                         "template void launch<float>(float*, const int*, int, int, int);\n")
    s, p = infer(project, "gather.cu", "pick")
    assert s.block == ("min((channels + 16 / 4 - 1) / (16 / 4), 1024)",)
    assert s.args["idx"].shape == ("batch", "tokens")


def test_a_local_constant_the_launch_passes_as_a_template_argument_is_no_size(project):
    """sgl-kernel per_token_quant_fp8: `const int TOKENS_PER_CTA = 8; dim3 grid((n + TOKENS_PER_CTA - 1)
    / TOKENS_PER_CTA); k<T, TOKENS_PER_CTA><<<grid, ...>>>`: a compile-time constant, not a problem size."""
    project("tok.cu", "template <typename T, int TPC>\n__global__ void per_token(T* out, const T* in, int n, int d) {\n"
                      "  int t = blockIdx.x * TPC + threadIdx.x / 32;\n  if (t >= n) return;\n"
                      "  for (int i = threadIdx.x % 32; i < d; i += 32) out[t * d + i] = in[t * d + i];\n}\n"
                      "void run(float* o, const float* i, int n, int d) {\n  const int TOKENS_PER_CTA = 8;\n"
                      "  dim3 grid((n + TOKENS_PER_CTA - 1) / TOKENS_PER_CTA);\n  dim3 block(TOKENS_PER_CTA * 32);\n"
                      "  per_token<float, TOKENS_PER_CTA><<<grid, block>>>(o, i, n, d);\n}\n")
    s, p = infer(project, "tok.cu", "per_token")
    assert s.grid == ("(n + 8 - 1) / 8",) and s.block in (("8 * 32",), ("256",))
    assert set(s.sizes) == {"n", "d"} and s.instantiate == "<float, 8>"


def test_an_input_is_drawn_from_the_range_the_program_fills_it_with(project):
    """cuda-samples BlackScholes: `h_S[i] = RandFloat(5.0f, 30.0f); cudaMemcpy(d_S, h_S, ...)`: the
    kernel's input is drawn from that range (a normal draw gives negative prices, NaN everywhere)."""
    project("bs.cu", "float RandFloat(float lo, float hi) { return lo + (hi - lo) * 0.5f; }\n"
                     "__global__ void price(float* out, const float* s, int n) {\n"
                     "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = sqrtf(s[i]);\n}\n"
                     "int main() {\n  const int N = 4096;\n  float *h_S = new float[N], *d_S, *d_O;\n"
                     "  for (int i = 0; i < N; i++) h_S[i] = RandFloat(5.0f, 30.0f);\n"
                     "  cudaMemcpy(d_S, h_S, N * sizeof(float), cudaMemcpyHostToDevice);\n"
                     "  price<<<(N + 127) / 128, 128>>>(d_O, d_S, N);\n}\n")
    s, p = infer(project, "bs.cu", "price")
    assert s.args["s"].init.kind == "uniform" and s.args["s"].init.params == (5.0, 30.0) and s.args["out"].output


NESTED = ("template <typename T, int UNROLL, int THREADS> __global__ void scale_rows(T* out, const T* in, int width) {\n"
          "  const int row = blockIdx.x * width;\n"
          "  for (int u = 0; u < UNROLL; u++) {\n"
          "    const int i = threadIdx.x + u * THREADS;\n    if (i < width) out[row + i] = in[row + i] * 2;\n  }\n}\n"
          "#define LAUNCH_ONE(U, TH) scale_rows<T, U, TH><<<rows, TH, 0, stream>>>(out, in, width);\n"
          "#define LAUNCH_ANY(U, TH) if (in_place) { LAUNCH_ONE(U, TH) } else { LAUNCH_ONE(U, TH) }\n"
          "template <typename T> void launch(T* out, const T* in, int rows, int width, bool in_place, int stream) {\n"
          "  constexpr int per_thread = sizeof(T) == 4 ? 4 : 2;\n"
          "  LAUNCH_ANY(1 * per_thread, 128);\n}\n"
          "template void launch<float>(float*, const float*, int, int, bool, int);\n")


def test_a_launch_macro_used_inside_another_macro_is_a_launch(project):
    """`#define LAUNCH_ANY(U) if (p) { LAUNCH_ONE(U) } else { ... }`: the launch two macros deep is
    found where the outer one is used, its grid and block read there."""
    project("nested.cu", NESTED)
    s, p = infer(project, "nested.cu", "scale_rows")
    assert s.block == ("128",) and s.grid == ("rows",)
    assert not any("no launch site" in n for n in p.notes)


def test_a_launchers_constant_chosen_by_sizeof_its_type_is_a_template_argument(project):
    """`constexpr int per_thread = sizeof(T) == 4 ? 4 : 2` with T = float: the launch's
    `1 * per_thread` is 4, not a guess."""
    project("nested.cu", NESTED)
    s, p = infer(project, "nested.cu", "scale_rows")
    assert s.instantiate == "<float, 4, 128>"


SCHEDULED = ("__global__ void norm_small(float* out, const float* in, int width);\n"
             "template <int UNROLL, int GROUP> __global__ void norm_rows(float* out, const float* in, int width) {\n"
             "  const int row = blockIdx.x * width;\n"
             "  for (int u = 0; u < UNROLL; u++) {\n"
             "    const int i = threadIdx.x + u * blockDim.x;\n    if (i < width) out[row + i] = in[row + i];\n  }\n}\n"
             "inline int next_pow2(int v) { int n = v - 1; n |= n >> 1; n |= n >> 2; n |= n >> 4; n |= n >> 8;"
             " n |= n >> 16; return n + 1; }\n"
             "void launch(float* out, const float* in, int rows, int width) {\n"
             "  constexpr int most = 256;\n"
             "  const bool small = (width <= 128) ? true : false;\n"
             "  const int per_step = small ? 1 : 4;\n"
             "  const int wanted = next_pow2((width + per_step - 1) / per_step);\n"
             "  const int threads = (wanted < most) ? wanted : most;\n"
             "  const int unroll = (width + threads * per_step - 1) / (threads * per_step);\n"
             "  dim3 block(threads);\n"
             "  if (small) {\n    norm_small<<<rows, block>>>(out, in, width);\n"
             "  } else if (unroll == 1) {\n    norm_rows<4, most><<<rows, block>>>(out, in, width);\n  }\n}\n")


def test_a_block_the_launcher_computes_through_flags_and_next_pow2_is_read_in_the_launchs_branch(project):
    """`threads = min(next_pow2(cdiv(width, small ? 1 : 4)), 256)`, launched in the `else if (unroll
    == 1)` branch of `if (small)`: the block is that expression with the flag decided by the branch
    (`small` false: per_step 4), and both conditions are required of the sizes."""
    from astra_cuda.model import exprs
    project("sched.cu", SCHEDULED)
    s, p = infer(project, "sched.cu", "norm_rows")
    assert s.instantiate == "<4, 256>"
    assert s.block == ("min(next_pow2((width + 4 - 1) / 4), 256)",)
    assert "width > 128" in s.require and len(s.require) == 2
    for width, block in ((129, 64), (300, 128), (1024, 256)):
        assert exprs.evaluate_int(s.block[0], {"width": width}) == block
    assert all(exprs.evaluate(r, {"width": 1024}) for r in s.require)
    assert not exprs.evaluate(s.require[0] if s.require[0] != "width > 128" else s.require[1], {"width": 1025})


def test_simplify_folds_constants_and_the_branches_a_condition_decides():
    from astra_cuda.model import exprs
    assert exprs.simplify("min(next_pow2((n + (16 / 4 if n <= 128 else 16 / 4 * 4) - 1) / 16), 256)", ["n > 128"]) \
        == "min(next_pow2((n + 16 - 1) / 16), 256)"
    assert exprs.simplify("a if n == 1 else b", ["n != 1"]) == "b"
    assert exprs.simplify("a if n < 2 else b", []) == "a if n < 2 else b"
    assert exprs.evaluate_int("next_pow2(5)", {}) == 8 and exprs.evaluate_int("next_pow2(8)", {}) == 8


def test_a_vector_helper_called_with_a_namespaced_template_argument_is_followed(project):
    """`mem::load<cfg::bytes>(dst, src)`: the helper is `load` (not `bytes>`), followed into its
    16-byte `uint4` copy, so rows move 4 floats at a time and must be whole vectors."""
    project("vec16.cu", "namespace cfg { constexpr int bytes = 16; }\n"
                        "namespace mem {\ntemplate <int N> __device__ void load(void* dst, const void* src);\n"
                        "template <> __device__ void load<16>(void* dst, const void* src) {\n"
                        "  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);\n}\n}\n"
                        "__global__ void copy_rows(float* out, const float* in, int width) {\n"
                        "  const int i = threadIdx.x * 4;\n  if (i < width) {\n    float v[4];\n"
                        "    mem::load<cfg::bytes>(v, in + blockIdx.x * width + i);\n"
                        "    for (int j = 0; j < 4; j++) out[blockIdx.x * width + i + j] = v[j];\n  }\n}\n"
                        "void run(float* o, const float* x, int rows, int width) {\n"
                        "  copy_rows<<<rows, (width + 3) / 4>>>(o, x, width);\n}\n")
    s, p = infer(project, "vec16.cu", "copy_rows")
    assert "width % 4 == 0" in s.require
    assert s.args["in"].shape == ("rows", "width")


def test_a_branch_a_template_flag_rules_out_writes_nothing(project):
    """`if (STORE && i < n) side[i] = ...` in the instance with STORE false: `side` is untouched
    (the launcher passes nullptr for it), so it is no output whose writes the check would wait for."""
    project("flag.cu", "template <bool STORE> __global__ void add_res(float* out, float* side, const float* a, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  if (STORE && i < n) side[i] = a[i];\n  if (i < n) out[i] = a[i] + 1;\n}\n"
                       "void run(float* o, const float* a, int n) {\n"
                       "  add_res<false><<<(n + 255) / 256, 256>>>(o, nullptr, a, n);\n}\n")
    s, p = infer(project, "flag.cu", "add_res")
    assert s.instantiate == "<false>"
    assert not s.args["side"].output and not s.args["side"].inout and s.args["out"].output


def test_an_index_modulo_a_size_addresses_a_table_of_that_many_entries(project):
    """`bias[i % width]` with i < total: the table has `width` entries (two floats each through a
    float2), however few of them a small total reaches."""
    project("mod.cu", "__global__ void add_bias(float* x, const float* bias, int total, int width) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  if (i < total) {\n    float2* x2 = reinterpret_cast<float2*>(x);\n"
                      "    const float2* b2 = reinterpret_cast<const float2*>(bias);\n"
                      "    float2 v = x2[i], b = b2[i % width];\n    v.x += b.x; v.y += b.y;\n    x2[i] = v;\n  }\n}\n"
                      "void run(float* x, const float* b, int total, int width) {\n"
                      "  add_bias<<<(total + 255) / 256, 256>>>(x, b, total, width);\n}\n")
    s, p = infer(project, "mod.cu", "add_bias")
    assert s.args["bias"].shape == ("2 * width",) and s.args["x"].shape == ("2 * total",)


def test_a_namespaces_constant_is_read_where_a_launcher_local_of_the_same_name_hides_it(project):
    """`const int threads = std::min(steps, cfg::threads)`: the right side is the namespace's 1024,
    not the local being defined (which read itself and left the block a guess)."""
    project("ns.cu", "namespace cfg { constexpr int threads = 1024; }\n"
                     "__global__ void halve(float* out, const float* in, int rows, int cols) {\n"
                     "  const int c = threadIdx.x;\n  if (c < cols) out[blockIdx.x * cols + c] = in[blockIdx.x * cols + c] / 2;\n}\n"
                     "void run(float* o, const float* x, int rows, int cols) {\n"
                     "  const int threads = std::min(cols, cfg::threads);\n  dim3 block(threads);\n"
                     "  halve<<<rows, block>>>(o, x, rows, cols);\n}\n")
    s, p = infer(project, "ns.cu", "halve")
    assert s.block == ("min(cols, 1024)",) and not any(n.startswith("block") for n in p.notes)


def test_an_output_of_half_the_inputs_row_is_a_fraction_of_the_size(project):
    """A gated activation reads `cols` per row and writes `cols / 2` (`out + row * cols / 2`): the
    output's shape is [rows, cols / 2], not [rows, cols] with half of it never written."""
    project("gate.cu", "__global__ void gate(float* out, const float* in, int rows, int cols) {\n"
                       "  const float* x = in + blockIdx.x * cols;\n  float* y = out + blockIdx.x * cols / 2;\n"
                       "  for (int c = threadIdx.x; c < cols / 2; c += blockDim.x) y[c] = x[2 * c] * x[2 * c + 1];\n}\n"
                       "void run(float* o, const float* x, int rows, int cols) {\n"
                       "  gate<<<rows, 256>>>(o, x, rows, cols);\n}\n")
    s, p = infer(project, "gate.cu", "gate")
    assert s.args["out"].shape == ("rows", "cols / 2") and s.args["in"].shape == ("rows", "cols")


def test_a_schedule_the_launcher_computes_from_the_sizes_is_passed_as_that_expression(project):
    """`reduce_width = min(max(next_pow2(cdiv(len, 4)), 32), 256)` handed to the kernel, which
    partitions its block by it: the parameter is that expression of `len`, not a free size."""
    project("sched2.cu", "inline int next_pow2(int v) { int p = 1; while (p < v) p <<= 1; return p; }\n"
                         "__global__ void row_max(float* out, const float* in, int rows, int len, int width) {\n"
                         "  const int row = blockIdx.x * (blockDim.x / width) + threadIdx.x / width;\n"
                         "  if (row < rows && threadIdx.x % width == 0) {\n    float m = in[row * len];\n"
                         "    for (int i = 1; i < len; i++) m = fmaxf(m, in[row * len + i]);\n    out[row] = m;\n  }\n}\n"
                         "void run(float* o, const float* x, int rows, int len) {\n"
                         "  const int steps = next_pow2((len + 3) / 4);\n"
                         "  const int at_least = steps < 32 ? 32 : steps;\n"
                         "  const int width = at_least < 256 ? at_least : 256;\n"
                         "  row_max<<<(rows + 256 / width - 1) / (256 / width), 256>>>(o, x, rows, len, width);\n}\n")
    s, p = infer(project, "sched2.cu", "row_max")
    assert s.args["width"].value == "min(max(next_pow2((len + 3) / 4), 32), 256)"


DEQUANT = ("__global__ void dequant(float* out, const signed char* in, const float* scale, int rows, int cols,\n"
           "                        int groups, int merge) {\n"
           "  unsigned merged = cols >> merge;\n  unsigned per_group = (merged * rows) / groups;\n"
           "  for (unsigned t = threadIdx.x; t < rows; t += blockDim.x) {\n"
           "    unsigned i = t + blockIdx.x * rows;\n    out[i] = scale[i / per_group] * (float)in[i];\n  }\n}\n"
           "void run(float* o, const signed char* q, const float* s, int rows, int cols, int groups, int merge) {\n"
           "  dequant<<<cols, 1024>>>(o, q, s, rows, cols, groups, merge);\n}\n")


def test_a_parameter_the_kernel_shifts_by_is_a_bit_count_not_a_size(project):
    """`cols >> merge`: merge is a bit count — a size's values (128, 4096) would shift every bit
    out and divide by zero after; it is taken 0, with a note, and is no size of the tests."""
    project("dq.cu", DEQUANT)
    s, p = infer(project, "dq.cu", "dequant")
    assert s.args["merge"].value == "0" and "merge" not in s.sizes
    assert any("shift count" in n for n in p.notes)


def test_a_product_of_sizes_divided_into_groups_requires_whole_groups(project):
    """`per_group = (cols * rows) / groups` computed once at the top: the launcher passes a
    divisor, so `cols * rows % groups == 0` is required (else the last index's group is past the
    table of `groups` scales)."""
    project("dq.cu", DEQUANT)
    s, p = infer(project, "dq.cu", "dequant")
    assert "cols * rows % groups == 0" in s.require
    assert s.args["scale"].shape == ("groups",)


def test_a_buffer_this_instance_never_touches_is_one_element(project):
    """`if (STOCHASTIC) r = rand[...]` in the instance with STOCHASTIC false: `rand` is never read,
    so its shape is one element (not a guess of the sizes that would be allocated and timed)."""
    project("stoch.cu", "template <int STOCHASTIC> __global__ void q(unsigned char* out, const float* a, const float* rand,\n"
                        "                                          int rand_offset, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  float r = 0.5f;\n"
                        "  if (STOCHASTIC) r = rand[(i + rand_offset) % 1020];\n"
                        "  if (i < n) out[i] = (unsigned char)(a[i] + r);\n}\n"
                        "void run(unsigned char* o, const float* a, int n) {\n"
                        "  q<0><<<(n + 255) / 256, 256>>>(o, a, nullptr, 0, n);\n}\n")
    s, p = infer(project, "stoch.cu", "q")
    assert s.instantiate == "<0>" and s.args["rand"].shape == ("1",)




def test_a_buffer_handed_to_a_view_object_is_not_taken_for_untouched():
    """`RowView out_(out, rows, cols)` is read as a declaration whose `out` is a type: `out` is
    still named outside the dead branch, so it may be touched (vLLM's gptq MatrixView) — only
    `rand`, named nowhere but under `if (first)` with first false, is one element."""
    from astra_cuda.infer.roles import only_in_dead_branches
    k = source.parse("template <bool first> __global__ void fill(float* out, const float* rand, int rows, int cols) {\n"
                     "  RowView out_(out, rows, cols);\n  if (first) out_.set(0, 0, rand[0]);\n}\n").kernel("fill")
    assert only_in_dead_branches(k, ["out", "rand"], {"first": 0}) == {"rand"}
    assert only_in_dead_branches(k, ["out", "rand"], {"first": 1}) == set()


def test_a_member_type_of_a_class_template_is_read_from_its_specialization(project):
    """FasterTransformer addBiasGeluV2: the launcher's `using T2 = typename TypeConverter<T>::Type;`
    launches `k<T2, N>`; `TypeConverter` is a primary template (`using Type = half2;`) and explicit
    specializations: the element type is the member type for those arguments (half2: halves), not
    a guess of float the CPU build refuses."""
    project("conv.cuh", "#include <cuda_fp16.h>\n"
                        "template <typename T> struct Conv { using Type = half2; };\n"
                        "template <> struct Conv<half2> { using Type = half; };\n"
                        "template <typename T, int K> struct Pack;\n"
                        "template <typename T> struct Pack<T, 1> { using type = T; };\n"
                        "template <> struct Pack<float, 2> { typedef float2 type; };\n")
    project("act.cu", "#include \"conv.cuh\"\n"
                      "template <typename T2>\n__global__ void act(T2* out, const T2* in, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = in[i];\n}\n"
                      "template <typename T>\nvoid run(T* o, const T* x, int n) {\n"
                      "  using T2 = typename Conv<T>::Type;\n"
                      "  act<T2><<<(n / 2 + 255) / 256, 256>>>((T2*)o, (const T2*)x, n / 2);\n}\n"
                      "template void run(half* o, const half* x, int n);\n")
    s, p = infer(project, "act.cu", "act")
    assert s.args["out"].dtype.name == "half" and s.args["in"].dtype.name == "half"
    from astra_cuda.infer.types import Types
    act = project.root / "act.cu"
    t = Types(source.parse(act.read_text()), str(act), None)
    assert t.resolve("typename Conv<half2>::Type")[0] == "half"      # the explicit specialization
    assert t.resolve("Conv<float>::Type")[0] == "half2"              # the primary template
    assert t.resolve("Pack<float, 2>::type")[0] == "float2"
    assert t.resolve("Pack<half, 1>::type")[0] is None               # a partial specialization may match


def test_a_plain_if_over_a_template_flag_is_decided_by_the_instance(project):
    """FasterTransformer generalLayerNorm<T, DYNAMIC_SCALING>: `if (DYNAMIC_SCALING)` (a plain if)
    writes `dynamic_scale[blockIdx.x]`; launched with false the instance never touches it, so it
    is no output (a poison check would fail on it), and one element is enough."""
    project("ln.cu", "template <typename T, bool DYN>\n"
                     "__global__ void ln(T* out, const T* in, float* dyn, int m, int n) {\n"
                     "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = in[blockIdx.x * n + i];\n"
                     "  if (DYN) {\n    if (threadIdx.x == 0) dyn[blockIdx.x] = 1.f;\n  }\n}\n"
                     "void run(float* o, const float* x, float* d, int m, int n) {\n"
                     "  if (d != nullptr) ln<float, true><<<m, 256>>>(o, x, d, m, n);\n"
                     "  else ln<float, false><<<m, 256>>>(o, x, d, m, n);\n}\n")
    s, p = infer(project, "ln.cu", "ln")
    assert s.instantiate == "<float, false>"
    assert s.args["dyn"].shape == ("1",) and not (s.args["dyn"].output or s.args["dyn"].inout)
    assert s.args["out"].shape == ("m", "n") and s.args["out"].output


def test_a_write_through_a_local_table_of_the_parameters_pointers_writes_them(project):
    """FasterTransformer add_fusedQKV_bias_transpose_kernel: `T* qkv_ptr[3] = {q_buf, k_buf, v_buf};`
    then `qkv_ptr[qkv_id][...] = val`: the three buffers are outputs, measured by that index (they
    were taken as read-only inputs, and the check saw them modified)."""
    project("split.cu", "__global__ void split(float* q, float* k, const float* qk, int n) {\n"
                        "  float* dst[2] = {q, k};\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  if (i < 2 * n) dst[i / n][i % n] = qk[i];\n}\n"
                        "void run(float* q, float* k, const float* qk, int n) {\n"
                        "  split<<<(2 * n + 255) / 256, 256>>>(q, k, qk, n);\n}\n")
    s, p = infer(project, "split.cu", "split")
    assert s.args["q"].output and s.args["k"].output
    assert s.args["q"].shape == ("n",) == s.args["k"].shape and s.args["qk"].shape == ("2 * n",)


def test_an_offset_variable_reused_loop_after_loop_is_measured_in_each(project):
    """FasterTransformer softmax_kernel: `int64_t qk_offset;` set in the first loop (reading qk) and
    set again in the last (writing attn_score): after the first loop it held nothing known, and
    joining the new value with that lost attn_score's extent (a guessed shape, a write past it)."""
    project("sm.cu", "__global__ void sm(float* out, const float* in, int rows, int n) {\n"
                     "  long off;\n  float v = 0.f;\n"
                     "  for (long i = 0; blockDim.x * i + threadIdx.x < n; i++) {\n"
                     "    off = blockIdx.x * n + blockDim.x * i + threadIdx.x;\n    v += in[off];\n  }\n"
                     "  for (long i = 0; blockDim.x * i + threadIdx.x < n; i++) {\n"
                     "    off = blockIdx.x * n + blockDim.x * i + threadIdx.x;\n    out[off] = v;\n  }\n}\n"
                     "void run(float* o, const float* x, int rows, int n) {\n  sm<<<rows, 128>>>(o, x, rows, n);\n}\n")
    s, p = infer(project, "sm.cu", "sm")
    assert s.args["out"].shape == ("rows", "n") == s.args["in"].shape
    from astra_cuda.model import access
    k = source.parse((project.root / "sm.cu").read_text()).kernel("sm")
    facts = access.analyse(k, {"rows": 3, "n": 100}, (3, 1, 1), (128, 1, 1), {"out": 4, "in": 4}, set(), 100, {})
    assert facts.uses["out"].hi == 299 and not facts.uses["out"].unknown


def test_a_size_masked_minus_one_in_a_helper_is_a_power_of_two(project):
    # cuda-samples scan: `tid & (size - 1)` two helpers deep, with size / 4 passed down; its launcher's
    # power-of-two check is a call no spec expression reads. Non-powers (the usual 1001) left lanes
    # overlapping in shared memory: two runs on a GPU disagreed.
    project("pow2.cu", "__device__ unsigned lane_of(unsigned i, unsigned n) { return i & (n - 1); }\n"
                       "__device__ unsigned part(unsigned i, unsigned n) { return lane_of(i, n / 4); }\n"
                       "__global__ void segs(unsigned* out, const unsigned* in, unsigned size) {\n"
                       "  unsigned pos = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "  out[pos] = in[pos] + part(threadIdx.x, size);\n}\n"
                       "void run(unsigned* o, const unsigned* i, unsigned batch, unsigned size) {\n"
                       "  segs<<<batch * size / 256, 256>>>(o, i, size);\n}\n")
    s, p = infer(project, "pow2.cu", "segs")
    assert "((size / 4) & (size / 4 - 1)) == 0" in s.require, s.require
    assert s.cases() and all((c["size"] // 4) & (c["size"] // 4 - 1) == 0 for c in s.cases())
    assert 1024 in {c["size"] for c in s.cases()}   # the usual 1001 raised to the next power of two


def test_a_kernel_that_counts_the_blocks_warps_gets_at_least_one_warp(project):
    # vLLM reshape_and_cache_flash: `head += blockDim.x >> 5` never ends under a block of 1 thread
    project("heads.cu", "__global__ void copy_heads(const float* src, float* dst, int num_heads, int head_size) {\n"
                        "  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;\n"
                        "  for (int h = threadIdx.x >> 5; h < num_heads; h += warps)\n"
                        "    for (int i = lane; i < head_size; i += 32)\n"
                        "      dst[(blockIdx.x * num_heads + h) * head_size + i] = "
                        "src[(blockIdx.x * num_heads + h) * head_size + i];\n}\n"
                        "void run(const float* s, float* d, int tokens, int num_heads, int head_size) {\n"
                        "  copy_heads<<<tokens, std::min(num_heads * head_size, 512)>>>(s, d, num_heads, head_size);\n}\n")
    s, _ = infer(project, "heads.cu", "copy_heads")
    assert "min(num_heads * head_size, 512) >= 32" in s.require
    assert s.cases() and all(s.launch_dims(c)[1][0] >= 32 for c in s.cases() + s.bench_cases())


def test_a_projects_own_atomic_add_is_an_atomic_read_and_write(project):
    # vLLM gptq's compat.cuh: `atomicAdd(half2*, half2)` for old GPUs, a CAS loop over the address's
    # bits; followed as a helper, the output it accumulates into was never touched (an input, then
    # "the read-only input `c` was modified")
    project("acc.cu", "#include <cuda_fp16.h>\n"
                      "__device__ __forceinline__ void atomicAdd(half* address, half val) {\n"
                      "  unsigned int* word = (unsigned int*)((char*)address - ((size_t)address & 2));\n"
                      "  unsigned int old = *word, assumed;\n"
                      "  do { assumed = old;\n"
                      "       unsigned short h = (size_t)address & 2 ? (old >> 16) : (old & 0xffff);\n"
                      "       unsigned short s = __half_as_ushort(__hadd(__ushort_as_half(h), val));\n"
                      "       old = atomicCAS(word, assumed, (size_t)address & 2 ? (old & 0xffff) | (s << 16)"
                      " : (old & 0xffff0000) | s);\n"
                      "  } while (assumed != old);\n}\n"
                      "__global__ void acc(const half* x, half* out, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) atomicAdd(&out[i], x[i]);\n}\n"
                      "void run(const half* x, half* out, int n) { acc<<<(n + 255) / 256, 256>>>(x, out, n); }\n")
    s, _ = infer(project, "acc.cu", "acc")
    assert s.args["out"].shape == ("n",) and s.args["out"].inout


def test_a_group_size_the_kernel_divides_by_is_a_whole_part(project):
    # vLLM gptq: `groupsize = size_k / groups` then `offset_k / groupsize`: probes with fewer rows
    # than groups divided by 0 and left every access after it unread
    project("dq.cu", "__global__ void dq(const float* w, const float* scales, float* out, int size_k, int n,"
                     " int groups) {\n"
                     "  int col = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;\n  if (col >= n) return;\n"
                     "  int groupsize = size_k / groups;\n  int g = k / groupsize;\n"
                     "  out[k * n + col] = w[k * n + col] * scales[g * n + col];\n}\n"
                     "void run(const float* w, const float* s, float* o, int size_k, int n, int groups) {\n"
                     "  dq<<<dim3((n + 127) / 128, size_k), 128>>>(w, s, o, size_k, n, groups);\n}\n")
    s, _ = infer(project, "dq.cu", "dq")
    assert "size_k % groups == 0" in s.require and s.args["out"].shape == ("size_k", "n")
    assert sorted(s.args["scales"].shape) == ["groups", "n"]


def test_a_launchers_value_named_like_the_kernels_template_parameter_is_its_argument(project):
    # vLLM gptq: the launcher's `m_count` sizes the grid and picks `kernel<true, m_count>` through a
    # function pointer: a free size of 1 … 8192 beside the instance's 1 fitted no shape
    project("pick.cu", "template <int m_count> __global__ void rows_k(const float* a, float* c, int size_m,"
                       " int size_n) {\n"
                       "  int col = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col >= size_n) return;\n"
                       "  for (int m = 0; m < m_count; m++) {\n    int r = blockIdx.y * m_count + m;\n"
                       "    if (r < size_m) c[r * size_n + col] = a[r * size_n + col];\n  }\n}\n"
                       "typedef void (*fp)(const float*, float*, int, int);\n"
                       "fp pick(int m_count) {\n  if (m_count == 1) return rows_k<1>;\n"
                       "  if (m_count == 2) return rows_k<2>;\n  return nullptr;\n}\n"
                       "void run(const float* a, float* c, int size_m, int size_n, int m_count) {\n"
                       "  dim3 grid((size_n + 127) / 128, (size_m + m_count - 1) / m_count);\n"
                       "  fp k = pick(m_count);\n  k<<<grid, 128>>>(a, c, size_m, size_n);\n}\n")
    s, _ = infer(project, "pick.cu", "rows_k")
    assert s.instantiate.strip("<>") == "1" and "m_count" not in s.sizes
    assert s.args["a"].shape == ("size_m", "size_n") == s.args["c"].shape and not s.require


def test_addresses_computed_through_a_function_template_argument_are_followed_into_it(project):
    # sgl-kernel transfer_kernel_impl: `SrcOffsetFn(src_k, tbl, layer, ...)`, the function a template
    # argument `instantiate` binds (`at_row<const char>`): the accesses follow the call into it as
    # into any helper, so the rows it picks through `rows[i]` measure `src` (its shape was a guess)
    project("fn.cu", "template <typename T> __device__ T* at_row(T* base, long row, long bytes) "
                     "{ return base + row * bytes; }\n"
                     "template <auto Fn>\n"
                     "__global__ void copy_rows(const char* src, char* dst, const long* rows, long n, long bytes) {\n"
                     "  long i = blockIdx.x;\n  if (i >= n) return;\n  const char* s = Fn(src, rows[i], bytes);\n"
                     "  for (long b = threadIdx.x; b < bytes; b += blockDim.x) dst[i * bytes + b] = s[b];\n}\n"
                     "void run(const char* src, char* dst, const long* rows, long n, long bytes) {\n"
                     "  copy_rows<at_row<const char>><<<n, 128>>>(src, dst, rows, n, bytes);\n}\n")
    s, p = infer(project, "fn.cu", "copy_rows")
    assert s.args["dst"].shape == ("n", "bytes") and s.args["dst"].output
    assert s.args["src"].shape[-1] == "bytes" and len(s.args["src"].shape) == 2, s.args["src"].shape
    assert s.args["src"].shape[0] in str(s.args["rows"].init), s.args["rows"].init
    assert not any("could not be read" in n or "does not follow" in n for n in p.notes), p.notes


def test_a_block_size_the_launcher_rounds_from_itself_is_read(project):
    # vLLM moe_align_block_size: `int threads = 1024; threads = ((threads + WARP_SIZE - 1) / WARP_SIZE)
    # * WARP_SIZE;` was "chosen by the caller: took 256" (its cub::BlockScan<int, 1024> needs 1024)
    project("thr.cu", "#define WARP_SIZE 32\n"
                      "__global__ void count(const int* ids, int* counts, int n) {\n"
                      "  for (int i = threadIdx.x; i < n; i += blockDim.x) counts[i] = ids[i] + 1;\n}\n"
                      "void launch(const int* ids, int* counts, int n) {\n  int threads = 1000;\n"
                      "  threads = ((threads + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;\n"
                      "  count<<<2, threads>>>(ids, counts, n);\n}\n")
    s, p = infer(project, "thr.cu", "count")
    assert s.block == ("1024",) or list(s.block) == ["1024"], s.block
    assert not any("chosen by the caller" in n for n in p.notes), p.notes


# each row's largest element, the row split between P blocks of B threads (FasterTransformer's
# topk_stage1): a block whose lane starts past the row's end has nothing and writes at index -1
SPLIT_ROWS = ("template <int B, int P>\n"
              "__global__ void lane_max(const float* x, int* arg, int n) {\n"
              "  const int row = blockIdx.x / P, lane = blockIdx.x % P;\n"
              "  __shared__ int best;\n  if (threadIdx.x == 0) best = -1;\n  __syncthreads();\n"
              "  for (int e = threadIdx.x + lane * B; e < n; e += B * P)\n"
              "    if (x[row * n + e] > 0.0f) atomicMax(&best, row * n + e);\n"
              "  __syncthreads();\n  if (threadIdx.x == 0) arg[blockIdx.x] = x[best] > 0.0f ? best : 0;\n}\n"
              "void run(const float* x, int* arg, int rows, int n) { lane_max<128, 8><<<rows * 8, 128>>>(x, arg, n); }\n")


def test_a_row_several_blocks_split_is_at_least_their_whole_step(project):
    project("split.cu", SPLIT_ROWS)
    s, p = infer(project, "split.cu", "lane_max")
    assert "n >= 1024" in s.require, p.comment


# a launcher's width passed halved to a kernel over pairs (FasterTransformer's half2 transpose:
# `size_per_head / 2`, its block `seq_per_block * size_per_head / 2`): in the launch's grid and block
# the launcher's width is twice the kernel's
PAIRS = ("__global__ void twice(float2* out, const float2* in, int d) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  out[i] = make_float2(2.0f * in[i].x, 2.0f * in[i].y);\n}\n"
         "void run(float* out, const float* in, int rows, int d) {\n"
         "  twice<<<rows / 4, 4 * d / 2>>>((float2*)out, (const float2*)in, d / 2);\n}\n")


@pytest.mark.parametrize("text", [PAIRS, PAIRS.replace("(const float2*)in, d / 2)", "(const float2*)in, pairs)")
                                  .replace("  twice<<<", "  const int pairs = d / 2;\n  twice<<<")],
                         ids=["argument", "local"])
def test_a_size_passed_halved_is_half_the_launchers_in_the_launch(project, text):
    from astra_cuda.model import exprs
    assert "d / 2" in text
    project("pairs.cu", text)
    s, p = infer(project, "pairs.cu", "twice")
    assert exprs.evaluate_int(s.block[0], {"d": 5}) == 20, p.comment   # four rows of 5 pairs


def test_indices_a_block_index_outreaches_at_the_probes_are_still_drawn_within_their_rows(project):
    """FlashInfer SamplingFromProb: `row = idx == nullptr ? blockIdx.x : idx[blockIdx.x]`. Where the
    probes' table was smaller than the grid, the block index alone set the reach and `idx` got no
    bounds (small signed numbers: a negative row faulted); probed with the table the largest size,
    its values are drawn below the rows they pick."""
    project("pick.cu", "__global__ void pick_rows(float* out, const float* x, const int* idx, int d) {\n"
                       "  int row = idx == nullptr ? blockIdx.x : idx[blockIdx.x];\n"
                       "  for (int j = threadIdx.x; j < d; j += blockDim.x) out[blockIdx.x * d + j] = x[row * d + j];\n}\n"
                       "void run(float* o, const float* x, const int* idx, int rows, int d) {\n"
                       "  pick_rows<<<rows, 128>>>(o, x, idx, d);\n}\n")
    s, p = infer(project, "pick.cu", "pick_rows")
    init = s.args["idx"].init
    assert init.kind == "randint" and init.exprs[0] == "0" and init.exprs[1] == s.args["x"].shape[0], (init, p.comment)
def test_a_block_store_method_writes_and_a_shift_by_log2_requires_a_power_of_two(project):
    # bitsandbytes kDequantizeBlockwise: `StoreT(tmp).Store(&out[i], vals, n - i)` (CUB's block store,
    # a method of an object) writes `out`; `i >> (31 - __clz(blocksize))` divides by a power of two
    project("deq.cu", "template <typename T> struct BlockStore {\n"
                      "  struct TempStorage {};\n  __device__ BlockStore(TempStorage& t) {}\n"
                      "  template <typename P> __device__ void Store(P* p, T (&v)[4], int valid);\n};\n"
                      "__global__ void deq(const float* absmax, float* out, int blocksize, int n) {\n"
                      "  __shared__ BlockStore<float>::TempStorage tmp;\n  float v[4];\n"
                      "  const int i = blockIdx.x * 256;\n"
                      "  for (int j = 0; j < 4; j++) v[j] = absmax[(i + threadIdx.x * 4) >> (31 - __clz(blocksize))];\n"
                      "  BlockStore<float>(tmp).Store(&out[i], v, n - i);\n}\n"
                      "void run(const float* a, float* o, int bs, int n) { deq<<<(n + 255) / 256, 64>>>(a, o, bs, n); }\n")
    s, p = infer(project, "deq.cu", "deq")
    assert s.args["out"].output and not s.args["out"].inout, p.comment
    assert "(blocksize & (blocksize - 1)) == 0" in s.require, s.require
    assert all(c["blocksize"] & (c["blocksize"] - 1) == 0 for c in s.cases())


def test_a_launch_through_a_function_pointer_sees_the_launchers_locals(project):
    # vLLM moe_align_block_size: `auto align_kernel = …kernel<scalar_t>; align_kernel<<<2, threads, …>>>`
    # is read as the launch it stands for, with its function's bytes: no local was visible at it
    # where another branch declares its own `threads` (block "chosen by the caller: took 256")
    project("ptr.cu", "__global__ void fill(int* out, int n) {\n"
                      "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i;\n}\n"
                      "__global__ void small(int* out, int n) { out[threadIdx.x] = n; }\n"
                      "void run(int* out, int n) {\n  int threads = 512;\n"
                      "  if (n < 64) {\n    const int threads = 64;\n    small<<<1, threads>>>(out, n);\n"
                      "  } else {\n    auto kern = fill;\n    kern<<<2, threads>>>(out, n);\n  }\n}\n")
    s, p = infer(project, "ptr.cu", "fill")
    assert list(s.block) == ["512"], s.block
    assert not any("chosen by the caller" in n for n in p.notes), p.notes


def test_a_size_the_launcher_rounds_up_to_a_multiple_is_computed_from_the_other(project):
    # vLLM moe_align_block_size: `padded_num_experts = ((num_experts + WARP_SIZE - 1) / WARP_SIZE) *
    # WARP_SIZE` passed beside num_experts was a free size (1 … 4096, below num_experts too)
    project("pad.cu", "#define WARP_SIZE 32\n"
                      "__global__ void zero(int* counts, int experts, int padded) {\n"
                      "  for (int i = threadIdx.x; i < padded; i += blockDim.x) counts[i] = i < experts;\n}\n"
                      "void run(int* counts, long experts) {\n"
                      "  long padded = ((experts + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;\n"
                      "  zero<<<1, 256>>>(counts, experts, padded);\n}\n")
    s, _ = infer(project, "pad.cu", "zero")
    assert "padded" not in s.sizes and s.cases()
    assert all(s.scalar("padded", c) == -(-c["experts"] // 32) * 32 for c in s.cases())


def test_a_launcher_loop_that_halves_the_grid_up_to_a_bound_is_read_trip_by_trip(project):
    """FasterTransformer's transpose: `while (per_block < 4 && grid.x % 2 == 0) { grid.x /= 2;
    per_block *= 2; }` runs its two trips where the sizes allow, each trip's condition required."""
    project("halve.cu", "__global__ void copy_rows(const float* src, float* dst, int rows, int width) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  dst[i] = src[i];\n}\n"
                        "void run(const float* src, float* dst, int batch, int heads, int width) {\n"
                        "  dim3 grid, block;\n  int per_block = 1;\n  grid.x = batch * heads / per_block;\n"
                        "  while (per_block < 4 && grid.x % 2 == 0) {\n    grid.x /= 2;\n    per_block *= 2;\n  }\n"
                        "  block.x = per_block * width;\n"
                        "  copy_rows<<<grid, block>>>(src, dst, batch * heads, width);\n}\n")
    s, p = infer(project, "halve.cu", "copy_rows")
    assert s.grid == ("rows / 1 / 2 / 2",) and s.block == ("4 * width",)
    assert set(s.require) == {"rows / 1 % 2 == 0", "rows / 1 / 2 % 2 == 0"}
    assert sorted(s.args["dst"].shape) == ["rows", "width"]


def test_a_launcher_loop_that_keeps_the_grid_within_the_device_limit_runs_no_trip(project):
    """exllamav2's rope: `while (DIVIDE(rows, threads_y) > 65535) threads_y *= 2;` moves rows into
    the block only past the grid's limit: the block keeps the launcher's 4 and the limit is required."""
    project("limit.cu", "#define DIVIDE(x, size) (((x) + (size) - 1) / (size))\nconst int THREADS_Y = 4;\n"
                        "__global__ void scale_rows(float* x, int rows, int cols) {\n"
                        "  int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;\n"
                        "  if (c < cols && r < rows) x[r * cols + c] *= 2.0f;\n}\n"
                        "void run(float* x, int rows, int cols) {\n  int threads_y = THREADS_Y;\n"
                        "  while (DIVIDE(rows, threads_y) > 65535) threads_y *= 2;\n"
                        "  dim3 block(32, threads_y), grid(DIVIDE(cols, 32), DIVIDE(rows, threads_y));\n"
                        "  scale_rows<<<grid, block>>>(x, rows, cols);\n}\n")
    s, p = infer(project, "limit.cu", "scale_rows")
    assert s.block == ("32", "4") and s.grid[1] == "(rows + 4 - 1) / 4"
    assert list(s.require) == ["(rows + 4 - 1) / 4 <= 65535"]


def test_an_if_that_throws_and_a_projects_check_macro_are_the_launchers_checks(project):
    # FlashInfer's `if (head_dim < rotary_dim) { ...; FLASHINFER_ERROR(msg); }` and FLASHINFER_CHECK
    project("checked.cu", "#include <stdexcept>\n"
                          "#define MY_ERROR(msg) throw std::runtime_error(msg)\n"
                          "#define MY_CHECK(cond, ...) do { if (!(cond)) { MY_ERROR(\"failed: \" #cond); } } while (0)\n"
                          "__global__ void scale(float* out, const float* in, unsigned n, unsigned w) {\n"
                          "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) out[i] = in[i] * w;\n}\n"
                          "void launch(float* out, const float* in, unsigned n, unsigned w) {\n"
                          "  if (w > 1024) { throw std::invalid_argument(\"w\"); }\n"
                          "  if (n % 4 != 0 || 8 > n) MY_ERROR(\"n\");\n"
                          "  if (n > 100) { printf(\"large\"); }\n"
                          "  MY_CHECK(w >= 2, \"w\");\n"
                          "  scale<<<(n + 255) / 256, 256>>>(out, in, n, w);\n}\n")
    s, p = infer(project, "checked.cu", "scale")
    assert {"w <= 1024", "n % 4 == 0", "8 <= n", "w >= 2"} <= set(s.require)
    assert "n <= 100" not in s.require   # an `if` that does not throw rules nothing out
    # every test value meets them on its own, a bound written either way round (`8 <= n`)
    assert all(8 <= n and n % 4 == 0 for n in s.sizes["n"]) and all(2 <= w <= 1024 for w in s.sizes["w"])


def test_an_output_written_only_as_constants_is_a_status_flag(project):
    # FlashInfer SamplingFromProb's `valid[bx] = true` / `false`: constant on valid inputs, by design
    project("pick.cu", "__global__ void pick(const float* probs, int* out, bool* valid, int d) {\n"
                       "  int last = -1;\n"
                       "  for (int i = 0; i < d; ++i) if (probs[blockIdx.x * d + i] > 0.f) last = i;\n"
                       "  if (last < 0) { out[blockIdx.x] = 0; valid[blockIdx.x] = false; return; }\n"
                       "  out[blockIdx.x] = last;\n  valid[blockIdx.x] = (true);\n}\n"
                       "void launch(const float* p, int* o, bool* v, int rows, int d) { pick<<<rows, 1>>>(p, o, v, d); }\n")
    s, p = infer(project, "pick.cu", "pick")
    assert s.args["valid"].flag and s.args["valid"].output
    assert not s.args["out"].flag   # it also holds what the kernel computes
