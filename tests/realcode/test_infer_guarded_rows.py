"""Issue 25: rows a kernel guards by a compound condition and a launcher that sizes its block by
the widest vector dividing the row — minimal cases written here of what FlashInfer's norms showed:
`if ((i * num_threads + tid) * VEC < d) v.load(in + row * stride + i * num_threads * VEC + tid * VEC)`
launched through `cudaLaunchKernelEx` with `vec_size = std::gcd(16 / sizeof(T), d)`. The offset
was taken past the row (the condition was not seen to bound it), so the strides stayed free sizes
(`stride = 1`: rows overlapping) and the block a guess without its shared memory (a fault)."""
from astra_cuda.model import access, exprs, source

from .test_infer_patterns import infer

NORM = """#include <numeric>
template <typename T, int N> struct vec_t {
  T d[N];
  __device__ void load(const T* p) { for (int i = 0; i < N; i++) d[i] = p[i]; }
  __device__ void store(T* p) const { for (int i = 0; i < N; i++) p[i] = d[i]; }
};
template <int VEC, typename T>
__global__ void scale_rows(const T* in, T* out, unsigned d, unsigned stride_in, unsigned stride_out) {
  const unsigned tid = threadIdx.x + threadIdx.y * 32, num_threads = blockDim.y * 32;
  extern __shared__ float smem[];
  smem[threadIdx.y] = 1.f;
  for (unsigned i = 0; i < (d + VEC * num_threads - 1) / (VEC * num_threads); i++) {
    vec_t<T, VEC> v;
    if ((i * num_threads + tid) * VEC < d) {
      v.load(in + blockIdx.x * stride_in + i * num_threads * VEC + tid * VEC);
      v.store(out + blockIdx.x * stride_out + i * num_threads * VEC + tid * VEC);
    }
  }
}
template <typename T>
void launch(const T* in, T* out, unsigned rows, unsigned d, unsigned stride_in, unsigned stride_out) {
  const unsigned vec_size = std::gcd(16 / sizeof(T), d);
  const unsigned block_size = std::min<unsigned>(1024, d / vec_size);
  const unsigned num_warps = (block_size + 31) / 32;
  dim3 nthrs(32, num_warps);
  cudaLaunchConfig_t config;
  config.gridDim = dim3(rows);
  config.blockDim = nthrs;
  config.dynamicSmemBytes = num_warps * sizeof(float);
  auto kernel = scale_rows<4, T>;
  cudaLaunchKernelEx(&config, kernel, in, out, d, stride_in, stride_out);
}
template void launch<float>(const float*, float*, unsigned, unsigned, unsigned, unsigned);
"""


def test_gcd_is_a_size_function():
    assert exprs.evaluate_int("gcd(16 / 4, 1004)", {}) == 4 and exprs.evaluate_int("gcd(4, d)", {"d": 6}) == 2


def test_a_compound_condition_bounds_an_offset_however_it_is_spelled():
    k = source.parse("template <int VEC> __global__ void k(float* out, int n) {\n"
                     "  int nt = blockDim.x;\n"
                     "  for (int i = 0; i < 8; i++)\n"
                     "    if ((i * nt + threadIdx.x) * VEC < n) out[i * nt * VEC + threadIdx.x * VEC] = 0.f;\n"
                     "}\n").kernel("k")
    facts = access.analyse(k, {"n": 1000}, (1, 1, 1), (64, 1, 1), {"out": 4}, set(), 100, {"VEC": 4})
    assert facts.uses["out"].hi == 999   # not 2044: the condition bounds the sum it spells otherwise
    # the bound holds only under the condition: the same store outside it reaches the loop's end
    k = source.parse("template <int VEC> __global__ void k(float* out, int n) {\n"
                     "  int nt = blockDim.x;\n  for (int i = 0; i < 8; i++) {\n"
                     "    if ((i * nt + threadIdx.x) * VEC < n) out[0] = 1.f;\n"
                     "    out[i * nt * VEC + threadIdx.x * VEC] = 0.f;\n  }\n}\n").kernel("k")
    facts = access.analyse(k, {"n": 1000}, (1, 1, 1), (64, 1, 1), {"out": 4}, set(), 100, {"VEC": 4})
    assert facts.uses["out"].hi == 7 * 64 * 4 + 63 * 4


def test_a_block_sized_by_the_widest_vector_dividing_the_row_is_read(project):
    project("norm.cu", NORM)
    s, p = infer(project, "norm.cu", "scale_rows")
    assert s.block == ("32", "(min(1024, d / gcd(16 / 4, d)) + 31) / 32")
    case = s.cases()[0]
    warps = exprs.evaluate_int(s.block[1], case)
    assert exprs.evaluate_int(s.shared_mem, case) == 4 * warps


def test_rows_guarded_by_a_compound_condition_get_contiguous_strides(project):
    project("norm.cu", NORM)
    s, p = infer(project, "norm.cu", "scale_rows")
    assert s.args["stride_in"].value == "d" and s.args["stride_out"].value == "d"
    assert s.args["in"].shape == ("rows", "d") and s.args["out"].shape == ("rows", "d")


# bitsandbytes' kgemm_4bit_inference_naive: A, one row of K halves, read 8 at a time as int4 under a
# guard written in elements with a constant in it, `k + (VALS / 4) + (i * VALS / 4) < K`, while the
# vector's index is `k / (VALS / 4) + i`; A's reach was K + 24 (the guard unseen), no shape fitted
# and A fell back to [M, N]: 128 of the 4096 halves read at N = 128, K = 4096
VECTOR_ROW = """#define VALS 32
__global__ void gemv(int M, int K, const __half* A, float* out) {
  int row = blockIdx.x * 4 + threadIdx.x / 32;
  float acc = 0.0f;
  __half a[8];
  for (int k = (threadIdx.x % 32) * VALS; k < K; k += 32 * VALS)
    for (int i = 0; i < 4; i++) {
      if (k + (VALS / 4) + (i * VALS / 4) < K)
        reinterpret_cast<int4(&)[1]>(a)[0] = reinterpret_cast<const int4*>(A)[k / (VALS / 4) + i];
      else
        for (int j = 0; j < 8; j++) a[j] = k + i * 8 + j < K ? A[k + i * 8 + j] : __float2half(0.0f);
      for (int j = 0; j < 8; j++) acc += __half2float(a[j]);
    }
  if (row < M && threadIdx.x % 32 == 0) out[row] = acc;
}
void launch(int m, int k, const __half* A, float* out) { gemv<<<(m + 3) / 4, 128>>>(m, k, A, out); }
"""


def test_a_row_read_as_vectors_under_a_guard_in_elements_is_its_length(project):
    project("gemv.cu", "#include <cuda_fp16.h>\n" + VECTOR_ROW)
    s, p = infer(project, "gemv.cu", "gemv")
    assert s.args["A"].shape == ("K",), p.comment
    # the bound holds only under the guard: the same vector read outside it reaches three vectors on
    project("gemv.cu", "#include <cuda_fp16.h>\n" + VECTOR_ROW.replace("(k + (VALS / 4) + (i * VALS / 4) < K)", "(M > 0)"))
    s, p = infer(project, "gemv.cu", "gemv")
    assert s.args["A"].shape != ("K",), p.comment



def test_a_tail_guard_with_an_exact_quotient_of_a_macro_bounds_its_index():
    """The same row as bitsandbytes' kgemm_4bit_inference_naive reads it: the lane a local and the
    scalar tail `A[k + j + (i * VALS / 4)]` under `if (k + (i * VALS / 4) + j < K)`. `i * VALS / 4`
    is an exact quotient (8 * i): taken as `x / 4` it scaled the other terms by 4 and missed the
    guard, so A reached K + 31 at K = 928 (one trip of the lanes' loop) and fell back to [M, N]."""
    text = VECTOR_ROW.replace("for (int k = (threadIdx.x % 32) * VALS;", "int lane = threadIdx.x % 32;\n"
                              "  for (int k = lane * VALS;").replace(
        "a[j] = k + i * 8 + j < K ? A[k + i * 8 + j] : __float2half(0.0f);",
        "if (k + (i * VALS / 4) + j < K) a[j] = A[k + j + (i * VALS / 4)]; else a[j] = __float2half(0.0f);")
    assert text.count("lane * VALS") == 1 and text.count("(i * VALS / 4)") == 3
    k = source.parse(text).kernel("gemv")
    facts = access.analyse(k, {"M": 8, "K": 928}, (2, 1, 1), (128, 1, 1), {"A": 2, "out": 4}, set(), 100, {"VALS": 32})
    assert facts.uses["A"].hi == 927
