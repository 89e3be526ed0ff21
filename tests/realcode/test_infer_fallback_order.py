"""A shape inference cannot read from the kernel's indexing is guessed from the sizes, outermost
first (row-major): the count the grid covers (rows, tokens, groups) first, a row's own extent last.
In parameter order SGLang's per_token_quant_fp8 (`hidden_dim, num_tokens`) got
["hidden_dim", "num_tokens"], and the size ladder's decode rungs then shrank the hidden size."""
from astra_cuda.infer.shape_fits import fallback_order

from tests.realcode.test_infer_asm_accesses import infer

# `Load::get`: an access through a template parameter's function, which inference does not follow
KERNEL = ("template <typename Load>\n"
          "__global__ void k(const float* in, float* out, int hidden, int tokens) {\n"
          "  int t = blockIdx.x; if (t >= tokens) return;\n  float s = 0.f;\n"
          "  for (int i = threadIdx.x; i < hidden; i += blockDim.x) s += Load::get(in, t * hidden + i);\n"
          "  if (threadIdx.x == 0) out[t] = s;\n}\n"
          "struct L { static __device__ float get(const float* p, int i) { return p[i]; } };\n"
          "void run(const float* in, float* out, int hidden, int tokens) { k<L><<<tokens, 128>>>(in, out, hidden, tokens); }\n")


def test_a_guessed_shape_lists_the_count_the_grid_covers_first(project):
    s, p = infer(project, "k.cu", KERNEL, "k")
    assert s.args["in"].shape == ("tokens", "hidden"), p.comment
    assert any('could not be read from the kernel\'s indexing: set to ["tokens", "hidden"]' in n for n in p.notes), p.notes


def test_fallback_order_keeps_parameter_order_where_the_grid_decides_nothing():
    assert fallback_order(["group_size", "num_groups"], ["num_groups / groups_per_block"]) == ["num_groups", "group_size"]
    assert fallback_order(["rows", "cols"], ["rows", "cdiv(cols, 32)"]) == ["rows", "cols"]   # both read
    assert fallback_order(["rows", "cols"], ["132"]) == ["rows", "cols"]                       # neither
    assert fallback_order(["rows", "cols"], ["(("]) == ["rows", "cols"]                        # unreadable
