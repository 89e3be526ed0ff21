"""Issue 25: a vector class's static copy (`vec_t<T, N>::memcpy(dst, src)`) moves one vector through
each pointer, and a stride that moves a vector-accessed buffer is a whole number of vectors — minimal
cases written here of what FlashInfer's paged-cache append showed: strides of 1 and 100 put its
`float4` copies off their boundary (a misaligned-address fault on the GPU)."""
from astra_cuda.model import access, source, spec
from astra_cuda import api

VEC = ("template <typename T, int N> struct vec_t {\n"
       "  static __device__ void memcpy(T* dst, const T* src) {\n"
       "    for (int i = 0; i < N / 4; ++i) ((float4*)dst)[i] = ((const float4*)src)[i];\n  }\n};\n")

COPY = VEC + ("template <int vec>\n"
              "__global__ void copy_rows(float* out, const float* in, int rows, int out_stride, int in_stride) {\n"
              "  for (int r = blockIdx.x; r < rows; r += gridDim.x)\n"
              "    vec_t<float, vec>::memcpy(out + r * out_stride + threadIdx.x * vec,\n"
              "                             in + r * in_stride + threadIdx.x * vec);\n}\n"
              "void run(float* out, const float* in, int rows, int os, int is) {\n"
              "  copy_rows<4><<<rows, 32>>>(out, in, rows, os, is);\n}\n")


def test_a_vector_classs_static_copy_writes_its_first_pointer_and_reads_its_second():
    """Before, `vec_t<float, vec>::memcpy(…)` was a call Astra could not see into: every extent
    unknown and both pointers outputs."""
    k = source.parse(COPY).kernel("copy_rows")
    facts = access.analyse(k, {"rows": 8, "out_stride": 128, "in_stride": 256}, (8, 1, 1), (32, 1, 1),
                           {"out": 4, "in": 4}, set(), 100, {"vec": 4}, type_bytes={"vec_t<float, vec>": 16}.get)
    out, inp = facts.uses["out"], facts.uses["in"]
    assert out.written and not out.read and out.hi == 7 * 128 + 32 * 4 - 1 and out.packet == 4
    assert inp.read and not inp.written and inp.hi == 7 * 256 + 32 * 4 - 1 and inp.packet == 4


PAGED = VEC + ("__device__ unsigned page_of(const int* table, unsigned i);\n"
               "template <int vec>\n"
               "__global__ void append(float* cache, const float* key, const int* table, int n,\n"
               "                       int stride_page, int stride_n, int key_stride) {\n"
               "  for (int i = blockIdx.x; i < n; i += gridDim.x) {\n"
               "    unsigned page = page_of(table, i);\n"
               "    vec_t<float, vec>::memcpy(cache + page * stride_page + (i % 4) * stride_n + threadIdx.x * vec,\n"
               "                             key + i * key_stride + threadIdx.x * vec);\n  }\n}\n"
               "void run(float* c, const float* k, const int* t, int n, int sp, int sn, int ks) {\n"
               "  append<4><<<n, 16>>>(c, k, t, n, sp, sn, ks);\n}\n")


def test_strides_that_move_vector_accessed_buffers_are_whole_vectors(project):
    """The cache is addressed through a page a helper not read gives (its reach unknown): its strides
    are taken to move it; the key's stride moves the key. Each is required a multiple of 4 floats, so no
    test case puts a `float4` off its 16-byte boundary."""
    path = project("paged.cu", PAGED)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "append", run=False)
    k = source.parse(PAGED).kernel("append")
    m = source.parse(PAGED[:k.span.start_byte] + p.comment + PAGED[k.span.start_byte:])
    s = spec.load(m.kernel("append"), m)
    required = {"stride_page % 4 == 0", "stride_n % 4 == 0"}
    assert required <= set(s.require), s.require
    key_stride = s.args["key_stride"].value
    if key_stride == "key_stride":   # a free size (not taken contiguous): required whole vectors too
        assert "key_stride % 4 == 0" in s.require
    for c in s.cases():
        assert c["stride_page"] % 4 == 0 and c["stride_n"] % 4 == 0


STRUCT_LAUNCH = VEC + (
    "template <typename T> struct cache_t {\n  unsigned heads;\n  unsigned stride_h;\n  T* data;\n};\n"
    "template <unsigned D, unsigned vec, typename T>\n"
    "__global__ void fill(cache_t<T> c, const T* src, unsigned n) {\n"
    "  for (unsigned i = blockIdx.x; i < n; i += gridDim.x)\n"
    "    vec_t<T, vec>::memcpy(c.data + (i * c.heads + threadIdx.y) * c.stride_h + threadIdx.x * vec,\n"
    "                          src + (i * c.heads + threadIdx.y) * D + threadIdx.x * vec);\n}\n"
    "template <typename T> void run(cache_t<T> c, const T* src, unsigned n) {\n"
    "  constexpr unsigned D = 64;\n"
    "  constexpr unsigned vec = 16 / sizeof(T) > D / 32 ? 16 / sizeof(T) : D / 32;\n"
    "  unsigned heads = c.heads;\n"
    "  int per_sm = 0, sms = 0;\n"
    "  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);\n"
    "  auto kernel = fill<D, vec, T>;\n"
    "  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0);\n"
    "  dim3 blocks(per_sm * sms);\n  dim3 threads(D / vec, heads);\n"
    "  void* args[] = {(void*)&c, (void*)&src, (void*)&n};\n"
    "  cudaLaunchKernel((void*)kernel, blocks, threads, args, 0, 0);\n}\n"
    "template void run<float>(cache_t<float>, const float*, unsigned);\n")


def test_a_launch_through_an_argument_array_reads_its_grid_product_and_the_structs_field(project):
    """FlashInfer's append launcher: `dim3 nblks(num_blocks_per_sm * num_sms)` (a product tree-sitter
    reads as a function declaration) and a block of `HEAD_DIM / vec_size` by the struct's own
    `num_heads`, the struct handed through `cudaLaunchKernel`'s array of argument pointers. Before,
    both were guessed (a block made of a stride, so its vectors reached past every row)."""
    path = project("fill.cu", STRUCT_LAUNCH)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "fill", run=False)
    assert not any("guessed" in n for n in p.notes), p.notes
    k = source.parse(STRUCT_LAUNCH).kernel("fill")
    m = source.parse(STRUCT_LAUNCH[:k.span.start_byte] + p.comment + STRUCT_LAUNCH[k.span.start_byte:])
    s = spec.load(m.kernel("fill"), m)
    assert s.block == ("16", "heads"), s.block
