"""Issue 25: sgl-kernel's KV-cache transfer (kvcacheio/transfer.cu, `transfer_kernel_impl`) copies
pages `src_indices[i]` of layers `start_layer_id` … `start_layer_id + num_layers - 1` to pages
`dst_indices[i]`, each layer `layer_dim` elements apart. The written buffer is reached at a sum of
sizes (a window of the caller's cache), which no product of sizes fits: it got no shape (a guess),
and `dst_indices`, one of two index arrays, was drawn with repeats (two items racing for a page).
Written here: the same pattern, small."""
from tests.realcode.test_infer_asm_accesses import infer

PAGES = ("__global__ void copy_pages(const float* src, float* dst, const long* src_idx, const long* dst_idx,\n"
         "                           int start_layer, int num_layers, int n, int page, long layer_dim) {\n"
         "  int item = blockIdx.x;\n  if (item >= n) return;\n"
         "  const long s = src_idx[item], d = dst_idx[item];\n"
         "  for (int l = start_layer; l < start_layer + num_layers; ++l)\n"
         "    for (int j = threadIdx.x; j < page; j += blockDim.x)\n"
         "      dst[l * layer_dim + d * page + j] = src[l * layer_dim + s * page + j];\n}\n"
         "void run(const float* s, float* d, const long* si, const long* di, int st, int nl, int n, int p, long ld) {\n"
         "  copy_pages<<<n, 128>>>(s, d, si, di, st, nl, n, p, ld);\n}\n")


def test_a_buffer_written_at_a_sum_of_sizes_is_a_window_kept_around_the_writes(project):
    """`dst` reaches layers up to `start_layer + num_layers`: shaped like `src` (the polynomial that
    measures it) and inout — the layers and pages the kernel skips are the caller's, kept."""
    s, p = infer(project, "pages.cu", PAGES, "copy_pages")
    assert s.args["dst"].shape == s.args["src"].shape, p.notes
    assert "start_layer" in " ".join(s.args["dst"].shape) and "V" in " ".join(s.args["dst"].shape)
    assert s.args["dst"].inout and not s.args["src"].inout and not s.args["src"].output
    assert s.args["layer_dim"].value == "page * V"


def test_of_two_index_arrays_the_one_placing_written_rows_is_a_scatter(project):
    """`dst_idx` places pages of the written buffer only: distinct pages (`permutation(V)`, with
    `V >= n`); `src_idx` reads, repeats allowed."""
    s, p = infer(project, "pages2.cu", PAGES, "copy_pages")
    assert (s.args["dst_idx"].init.kind, s.args["dst_idx"].init.exprs) == ("permutation", ("V",)), p.notes
    assert s.args["src_idx"].init.kind == "randint"
    assert "V >= n" in s.require
