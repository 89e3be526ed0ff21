"""Issue 25: minimal cases written here of what DeepSpeed's `ragged_embed_kernel`
(deepspeed/inference/v2/kernels/ragged_ops/embed/embed_cuda.cu) shows. It loads a token id, returns
on ids at `vocab_size` and above, and reads the id's row of the embedding table: the rows it reaches
are those below the smaller of `vocab_size` and the table the ids are probed below. Once 262f8bc
took its two position parameters 0 (read only where the null `position_weight` is tested), the
probes of the sizes after them moved, and the table fell below `vocab_size` at one probe: the reach,
a min() of the two, fit no shape, and the equal-sizes draft took `vocab_size = n_tokens * …`, with
the ids drawn below the table — most ids then returned early and no output was written. The table
is now probed above such a bound, so the rows reached are `vocab_size`'s at every probe."""
import pathlib
import tempfile

from astra_cuda import api, infer
from astra_cuda.model import source, spec

from tests.realcode.test_infer_asm_accesses import infer as infer_first

LOOKUP = """__global__ void lookup(float* out, const int* ids, const float* rows, int dim, int vocab) {
  int t = blockIdx.y;
  int id = ids[t];
  if (id >= vocab || id < 0) return;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < dim) out[t * dim + c] = rows[id * dim + c];
}
void launch(float* out, const int* ids, const float* rows, int n, int dim, int vocab) {
  lookup<<<dim3((dim + 127) / 128, n), 128>>>(out, ids, rows, dim, vocab);
}
"""

# the same kernel, its sizes in the other order: the table then probed below `vocab` at every probe
SWAPPED = LOOKUP.replace("int dim, int vocab)", "int vocab, int dim)").replace(
    "rows, dim, vocab)", "rows, vocab, dim)").replace("int n, int dim, int vocab", "int n, int vocab, int dim")


def _served_rows(s) -> None:
    """The ids are drawn below `vocab`, and the table holds `vocab` rows of `dim`."""
    assert s.args["vocab"].value == "vocab"
    assert sorted(s.args["rows"].shape) == ["dim", "vocab"], s.args["rows"].shape
    assert "randint(0, vocab)" in str(s.args["ids"].init)


def _drafted(text: str, kernel: str, decide: dict[str, str]):
    root = pathlib.Path(tempfile.mkdtemp())
    (root / ".git").mkdir()
    (root / "lookup.cu").write_text(text)
    snap = api.snapshot(text, str(root / "lookup.cu"))
    p = infer.infer(snap.model.kernel(kernel), snap.model, path=snap.path, context=snap.context, decide=decide)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


def test_ids_returned_on_at_a_size_read_that_many_rows_whatever_the_order_of_the_sizes(project):
    # before: `rows` shaped [V, dim] (the table below `vocab` at every probe) with the ids drawn
    # below `vocab`: every id from V on read past the table
    for name, text in (("lookup.cu", LOOKUP), ("swapped.cu", SWAPPED)):
        s, _ = infer_first(project, name, text, "lookup")
        _served_rows(s)


def test_the_equal_sizes_draft_keeps_the_bound_a_size_of_its_own():
    # before: the table above `vocab` at two probes and below it at the third, the reach fit no
    # shape and `vocab` was taken equal to `n * dim`, the ids drawn below the table
    s, p = _drafted(LOOKUP, "lookup", {"sizes": "equal"})
    _served_rows(s)
    assert not any("taken equal to" in n for n in p.notes), p.notes
