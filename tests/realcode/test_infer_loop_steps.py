"""Issue 25: a pointer a loop moves by a fixed amount each trip, also from inside a nested loop of
a fixed trip count — minimal case written here of the pattern of vLLM's GPTQ
`gemm_half_q_half_gptq_4bit_kernel` and exllamav2's `reconstruct_kernel` (`while (k < end_k) {
for (j = 0; j < 4; j++) { ... *b_ptr ...; b_ptr += size_n; } k += 32; }`), whose packed weights'
shape went unread: the body, walked once, showed the first trip's rows only."""
from astra_cuda.model import loop_steps, syntax

from tests.realcode.test_infer_asm_accesses import infer

DEQUANT = (
    "#include <cuda_fp16.h>\n#include <cstdint>\n"
    "__global__ void dequant8(const uint32_t* w, half* out, const int k, const int n) {{\n"
    "  int col = blockIdx.x * 128 + threadIdx.x;\n  int offset_k = blockIdx.y * 16;\n"
    "  if (col >= n) return;\n"
    "  const uint32_t* p = w + (offset_k / 4) * n + col;\n  half* o = out + (offset_k / 4) * n + col;\n"
    "  int kk = offset_k;\n"
    "  while (kk < {bound}) {{\n"
    "    for (int j = 0; j < 2; j++) {{\n"
    "      uint32_t q = *p;\n      p += n;\n      *o = __int2half_rn(q & 255);\n      o += n;\n    }}\n"
    "    kk += 8;\n  }}\n}}\n"
    "void run(const uint32_t* w, half* out, int k, int n) {{\n"
    "  dequant8<<<dim3((n + 127) / 128, k / 16), 128>>>(w, out, k, n);\n}}\n")


def test_pointers_a_while_loop_moves_each_trip_through_a_nested_for_reach_every_trip(project):
    """Two trips of the `while` (16 rows of k a block, 8 a trip), two steps of a row each in the
    nested `for`: both the packed input and the output reach k / 4 rows of n, all of them."""
    s, p = infer(project, "dq.cu", DEQUANT.format(bound="offset_k + 16"), "dequant8")
    for name in ("w", "out"):
        assert " * ".join(s.args[name].shape) in ("k / 4 * n", "k * n / 4"), (name, s.args[name].shape)
    assert s.args["out"].output and not any("could not be read" in n for n in p.notes)


def test_a_bound_that_is_a_min_counts_the_trips_of_its_first_argument(project):
    """`end_k = min(offset_k + 16, k)`: at most offset_k + 16, so the same two trips a block."""
    text = DEQUANT.format(bound="end_k").replace("  int kk = offset_k;\n",
                                                 "  int end_k = min(offset_k + 16, k);\n  int kk = offset_k;\n")
    s, _ = infer(project, "dqmin.cu", text, "dequant8")
    assert " * ".join(s.args["w"].shape) in ("k / 4 * n", "k * n / 4")


def _loop(text: str):
    code = syntax.parser().parse(f"void f() {{ {text} }}".encode()).root_node
    return next(n for n in syntax.walk(code) if n.type in loop_steps.LOOPS)


def test_steps_under_a_condition_or_after_a_break_are_not_counted_per_trip():
    """A pointer moved only on some trips (under an `if`) has no fixed step a trip; a loop that
    may leave early has no fixed trips."""
    loop = _loop("while (k < n) { if (k & 1) p += s; q += s; for (int j = 0; j < 4; j++) r += s; k += 8; }")
    steps = loop_steps.pointer_steps(loop, {"p", "q", "r"})
    assert set(steps) == {"q", "r"} and len(steps["r"][0][1]) == 1
    assert loop_steps.while_counter(loop)[0] == "k"
    assert loop_steps.jumps(_loop("while (k < n) { if (x) break; k += 8; }").child_by_field_name("body"))
    assert loop_steps.while_counter(_loop("while (k < n) { if (x) k += 8; }")) is None
