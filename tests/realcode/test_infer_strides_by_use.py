"""Issue 25: a size the kernel uses only as a factor of an offset is a stride by its use, whatever
its name (sgl-kernel transfer_kernel_impl: `src_layout_dim`, a layer's bytes in a layer-first KV
cache, reached two calls deep through the offset function a template argument binds). Drawn free
(1001 bytes) it moved the 8-byte loads off their alignment: the GPU faulted (misaligned address)."""
from tests.realcode.test_infer_asm_accesses import infer

PAGES = ("#include <cstdint>\n"
         "__device__ __forceinline__ void copy_words(int lane, const void* from, void* to, int64_t bytes) {\n"
         "  const uint64_t* s = static_cast<const uint64_t*>(from);\n  uint64_t* d = static_cast<uint64_t*>(to);\n"
         "  for (int j = lane; j < bytes / 8; j += 32) d[j] = s[j];\n}\n"
         "template <typename T>\n"
         "__device__ T* layer_first(T* base, int64_t layer, int64_t layer_dim, int64_t page, int64_t item_bytes) {\n"
         "  return base + layer * layer_dim + page * item_bytes;\n}\n"
         "template <auto Fn>\n"
         "__global__ void gather_pages(const void* src, void* dst, const int64_t* pages, int64_t n, int64_t layers,\n"
         "                             int64_t item_bytes, int64_t src_layer_dim) {\n"
         "  int64_t item = blockIdx.x;\n  if (item >= n) return;\n"
         "  for (int64_t layer = 0; layer < layers; ++layer) {\n"
         "    const char* s = Fn(static_cast<const char*>(src), layer, src_layer_dim, pages[item], item_bytes);\n"
         "    char* d = static_cast<char*>(dst) + (item * layers + layer) * item_bytes;\n"
         "    copy_words(threadIdx.x, s, d, item_bytes);\n  }\n}\n"
         "void run(const void* s, void* d, const int64_t* p, int64_t n, int64_t l, int64_t b, int64_t sl) {\n"
         "  gather_pages<layer_first<const char>><<<n, 32>>>(s, d, p, n, l, b, sl);\n}\n")


def test_a_size_only_multiplied_into_an_offset_is_the_contiguous_stride(project):
    s, p = infer(project, "pages.cu", PAGES, "gather_pages")
    assert "src_layer_dim" not in s.sizes, s.sizes
    layer = s.args["src_layer_dim"].value.replace(" ", "")
    assert "item_bytes" in layer and layer != "item_bytes", layer   # a layer holds all the pages' items
    assert "item_bytes % 8 == 0" in s.require, s.require             # the 8-byte words stay aligned
    assert any("`src_layer_dim` is a stride of a contiguous layout" in n for n in p.notes), p.notes


def test_a_size_that_bounds_a_loop_is_no_stride_by_use(project):
    # `item_bytes` is a factor of the page's offset too, but it bounds the copy: a size
    s, _ = infer(project, "pages.cu", PAGES, "gather_pages")
    assert "item_bytes" in s.sizes and s.args["item_bytes"].value == "item_bytes"


SLICES = ("__global__ void lookup(float* out, const float* table, const int* ids, int tokens, int width, int ite) {\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < tokens * width; i += blockDim.x * gridDim.x) {\n"
          "    const int row = i / width;\n"
          "    out[i] = table[ids[row + ite * tokens] * width + i % width];\n  }\n}\n"
          "void run(float* o, const float* t, const int* d, int n, int w, int it) {\n"
          "  lookup<<<(n * w + 255) / 256, 256>>>(o, t, d, n, w, it);\n}\n")


def test_a_size_multiplied_by_an_extent_is_a_slice_index_not_a_stride(project):
    # FasterTransformer embeddingLookupPosEncoding: `ite * local_token_num` picks the ite-th slice of
    # the ids; `tokens` bounds the loop, so `ite` is the index and no contiguous stride
    s, _ = infer(project, "slices.cu", SLICES, "lookup")
    assert "ite" in s.sizes and s.args["ite"].value == "ite", (s.sizes, s.args["ite"].value)
