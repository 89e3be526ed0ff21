"""Issue 25: vLLM's `copy_blocks_kernel` copies, for each pair `i` of one index array, block
`map[2 * i]` of a cache to block `map[2 * i + 1]` of the same cache. Drawn with repeats, two pairs
could store into one block, or one pair's destination be another's source: the result depended on
the blocks' order, two runs disagreed, and only a one-pair draft (3.6 MiB of bench traffic) stayed.
An index array whose values choose both the stores and the loads of one buffer is drawn as distinct
rows of it (`permutation(V)`, `V` at least its length). Written here: the same pattern, small."""
from tests.realcode.test_infer_asm_accesses import infer

PAIRS = ("__global__ void move_rows(float* buf, const long* pairs, int width) {\n"
         "  const long from = pairs[2 * blockIdx.x], to = pairs[2 * blockIdx.x + 1];\n"
         "  for (int j = threadIdx.x; j < width; j += blockDim.x)\n"
         "    buf[to * width + j] = buf[from * width + j];\n}\n"
         "void run(float* b, const long* p, int npairs, int width) {\n"
         "  move_rows<<<npairs, 128>>>(b, p, width);\n}\n")

# the index chooses where `out` is added to, atomically: repeats are what the kernel is written for
ATOMIC = ("__global__ void add_rows(float* out, const float* x, const int* idx, int n, int width) {\n"
          "  int i = blockIdx.x;\n  if (i >= n) return;\n"
          "  for (int j = threadIdx.x; j < width; j += blockDim.x)\n"
          "    atomicAdd(&out[idx[i] * width + j], x[i * width + j]);\n}\n"
          "void run(float* o, const float* x, const int* idx, int n, int width) {\n"
          "  add_rows<<<n, 128>>>(o, x, idx, n, width);\n}\n")

# the index chooses the rows read only: a gather, repeats allowed
GATHER = ("__global__ void pick_rows(float* out, const float* table, const int* idx, int n, int width) {\n"
          "  int i = blockIdx.x;\n  if (i >= n) return;\n"
          "  for (int j = threadIdx.x; j < width; j += blockDim.x)\n"
          "    out[i * width + j] = table[idx[i] * width + j];\n}\n"
          "void run(float* o, const float* t, const int* idx, int n, int width) {\n"
          "  pick_rows<<<n, 128>>>(o, t, idx, n, width);\n}\n")


def test_pairs_copying_within_one_buffer_are_distinct_rows_of_it(project):
    """`pairs` chooses both the rows `buf` is read from and those it is written to: every value a
    different row (`permutation(V)`), at most V of them (`V >= 2 * npairs`), so the copy gives the
    same result in any block order; `buf` keeps the rows no pair names (inout)."""
    s, p = infer(project, "pairs.cu", PAIRS, "move_rows")
    assert (s.args["pairs"].init.kind, s.args["pairs"].init.exprs) == ("permutation", ("V",)), p.notes
    assert list(s.args["pairs"].shape) == ["2 * npairs"]
    assert "V >= 2 * npairs" in s.require, s.require
    assert s.args["buf"].inout and s.args["buf"].shape[0] == "V"


def test_an_atomic_destination_and_a_gather_keep_their_repeats(project):
    """Neither index array chooses a plain store and a load of one buffer: both stay drawn with
    repeats, below the table's rows."""
    for name, text, kernel in (("add.cu", ATOMIC, "add_rows"), ("pick.cu", GATHER, "pick_rows")):
        s, p = infer(project, name, text, kernel)
        assert (s.args["idx"].init.kind, s.args["idx"].init.exprs) == ("randint", ("0", "V")), (kernel, p.notes)
        assert not any(r.startswith("V >=") for r in s.require), (kernel, s.require)
