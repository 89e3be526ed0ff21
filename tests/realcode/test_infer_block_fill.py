"""Issue 25: an output filled one entry per block of elements up to a count the kernel is handed
as a macro's value — a minimal case written here of what vLLM's and sgl-kernel's
moe_align_block_size_kernel showed: `expert_ids[i / block_size]` at positions the kernel computes
itself (a prefix sum it stored in `cumsum`), then `expert_ids[i]` filled up to
`max_num_m_blocks = CEILDIV(max_num_tokens_padded, block_size)`, passed to a device helper. Its
shape was guessed from unrelated names, so most of it was never written. The shape the fill
measures is kept in the draft, but the draft is refused: the prefix-sum stores reach as far as the
data makes them, which no C++ relates to the sizes (tests/realcode/test_infer_data_positions.py)."""
from astra_cuda import api
from astra_cuda.model import access, source, spec

ALIGN = (
    "#define CEILDIV(x, y) (((x) + (y) - 1) / (y))\n"
    "__device__ void align(const int* ids, int* sorted, int* expert_ids, int* cumsum, int experts, int block_size,\n"
    "                      int numel, int max_tokens, int max_blocks) {\n"
    "  if (blockIdx.x % 2) {\n"
    "    for (int it = threadIdx.x; it < max_tokens; it += blockDim.x) sorted[it] = numel;\n"
    "    return;\n  }\n"
    "  if (threadIdx.x == 0) {\n    int s = 0;\n"
    "    for (int e = 0; e < experts; ++e) { cumsum[e] = s; s += numel; }\n"
    "    cumsum[experts] = s;\n  }\n  __syncthreads();\n"
    "  if (threadIdx.x < experts)\n"
    "    for (int i = cumsum[threadIdx.x]; i < cumsum[threadIdx.x + 1]; i += block_size)\n"
    "      expert_ids[i / block_size] = threadIdx.x;\n"
    "  for (int i = cumsum[experts] / block_size + threadIdx.x; i < max_blocks; i += blockDim.x)\n"
    "    expert_ids[i] = -1;\n}\n"
    "__global__ void align_kernel(const int* ids, int* sorted, int* expert_ids, int* cumsum, int experts,\n"
    "                             int block_size, int numel, int max_tokens) {\n"
    "  align(ids, sorted, expert_ids, cumsum, experts, block_size, numel, max_tokens,\n"
    "        CEILDIV(max_tokens, block_size));\n}\n")


def test_a_macro_passed_to_a_helper_is_its_value():
    m = source.parse(ALIGN)
    helper = ALIGN[ALIGN.index("__device__"):ALIGN.index("__global__")]
    helpers = access.helpers_of([helper], ["#define CEILDIV(x, y) (((x) + (y) - 1) / (y))"])
    sizes = {"experts": 8, "block_size": 16, "numel": 100, "max_tokens": 200}
    facts = access.analyse(m.kernel("align_kernel"), sizes, (2, 1, 1), (256, 1, 1), {}, {"ids", "cumsum"}, 64, {},
                           helpers=helpers)
    # the fill loop's bound is CEILDIV(200, 16) = 13 entries; the stores at the kernel's own prefix
    # sums (read back from `cumsum`, which it wrote) are unbounded, not indices below the table
    assert facts.uses["expert_ids"].hi == 12 and facts.uses["expert_ids"].unknown
    assert facts.uses["cumsum"].hi == 8 and not facts.uses["cumsum"].table_loads


def test_an_output_filled_per_block_up_to_a_quotient(project):
    path = project("align.cu", ALIGN)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "align_kernel", run=False)
    # the stores at the prefix sums reach as far as the data makes them (here experts * numel, past
    # the 13 entries of the fill): no C++ says how long the caller makes it, so it is refused
    # (`data_positions`) — the draft still carries what the bounded stores measure
    assert [x for x in p.problems if x.startswith("cannot be inferred: `expert_ids`") and "`cumsum`" in x], p.problems
    k = source.parse(ALIGN).kernel("align_kernel")
    m = source.parse(ALIGN[:k.span.start_byte] + p.comment + ALIGN[k.span.start_byte:])
    s = spec.load(m.kernel("align_kernel"), m)
    # one entry per block of the padded tokens, as the macro the kernel hands its helper says
    assert s.args["expert_ids"].shape == ("cdiv(max_tokens, block_size)",)
    assert s.args["expert_ids"].output
    # the prefix sum's last entry, one past the experts, written by a scalar store: no vector overhang
    assert s.args["cumsum"].shape == ("experts + 1",)
