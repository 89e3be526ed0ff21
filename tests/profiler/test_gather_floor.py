"""The roofline floor of an index-driven read (issue 24, item 5): an embedding lookup reads the
table's rows its ids reach, not the whole table; the floor still holds every other time to it."""
import math
from pathlib import Path

import pytest

from astra_cuda.model import source, spec as spec_mod
from astra_cuda.profiler import model

EMBEDDING = Path(__file__).resolve().parent / "data" / "embedding.cu"
CEILING = 3.0e12  # bytes/s, an H100's copy ceiling
BENCH = {"B": 8, "T": 1024, "C": 768, "V": 50257}


def spec_of(text: str, kernel: str):
    m = source.parse(text)
    return spec_mod.load(m.kernel(kernel), m)


def test_an_embedding_lookup_counts_the_rows_its_ids_reach():
    spec = spec_of(EMBEDDING.read_text(), "embedding")
    n, v, c = 8 * 1024, 50257, 768
    rows = math.ceil(v * (1 - (1 - 1 / v) ** n))       # ~7,565 distinct rows of 50,257
    want = n * 4 + n * c * 4 + 1024 * c * 4 + rows * c * 4
    assert model.floor_bytes(spec, BENCH) == want
    assert spec.bytes_moved(BENCH) == want + (v - rows) * c * 4  # the spec's count: the whole table
    # An honest lookup at 95% of the copy ceiling over the bytes it moves: the whole-table floor
    # (3.6x higher) called it impossible; the floor of what the ids reach does not.
    honest_us = want / (0.95 * CEILING) * 1e6
    assert model.implausible(honest_us, 3.0, spec.bytes_moved(BENCH), CEILING)  # the false refusal
    assert not model.implausible(honest_us, 3.0, model.floor_bytes(spec, BENCH), CEILING)


def test_a_lookup_faster_than_the_rows_it_reaches_allow_is_still_implausible():
    spec = spec_of(EMBEDDING.read_text(), "embedding")
    nbytes = model.floor_bytes(spec, BENCH)
    skipped_us = 0.8 * nbytes / CEILING * 1e6   # as if a fifth of the reached rows were never read
    why = model.implausible(skipped_us, 3.0, nbytes, CEILING)
    assert len(why) == 1 and "roofline floor" in why[0] and "the rows they reach" in why[0]


def test_many_ids_reach_every_row():
    spec = spec_of(EMBEDDING.read_text(), "embedding")
    small_table = {**BENCH, "V": 64}  # 8,192 draws over 64 rows: all of them, the full count again
    assert model.floor_bytes(spec, small_table) == spec.bytes_moved(small_table)


CROSS_ENTROPY = """
/* @astra
grid = ["N"]
block = ["256"]
[sizes]
N = [64]
V = [50257]
[args]
losses = { type = "float", shape = ["N"], output = true }
logits = { type = "float", shape = ["N", "V"] }
targets = { type = "int32", shape = ["N"], init = "randint(0, V)" }
N = "N"
V = "V"
*/
__global__ void xent(float* losses, const float* logits, const int* targets, int N, int V) {}
"""


@pytest.mark.parametrize("text,kernel", [(CROSS_ENTROPY, "xent")], ids=["softmax_over_the_vocabulary"])
def test_an_input_not_indexed_by_its_rows_counts_in_full(text, kernel):
    # The targets index the logits' last dimension, and a cross-entropy reads every logit (its
    # softmax): only a leading dimension equal to the ids' bound makes a table.
    spec = spec_of(text, kernel)
    sizes = {"N": 64, "V": 50257}
    assert model.floor_bytes(spec, sizes) == spec.bytes_moved(sizes)


def test_arrays_without_index_reads_keep_the_specs_count():
    ex = Path(__file__).resolve().parents[2] / "examples" / "silu_and_mul.cu"
    spec = spec_of(ex.read_text(), "silu_and_mul")
    for sizes in spec.bench_cases():
        assert model.floor_bytes(spec, sizes) == spec.bytes_moved(sizes)


BLOCK_COPY = """
/* @astra
grid = ["layers"]
block = ["256"]
[sizes]
layers = [2]
C = [64]
V = [100]
[args]
keys    = { type = "float", shape = ["V", "C"], inout = true, table = "layers" }
values  = { type = "float", shape = ["V", "C"], inout = true }
log     = { type = "float", shape = ["C", "V"], inout = true }
mapping = { type = "int64", shape = ["2"], init = "randint(0, V)" }
C = "C"
*/
__global__ void copy_pairs(long* keys, float* values, float* log, const long* mapping, int C) {}
"""


def test_a_read_write_table_counts_the_rows_its_mapping_reaches():
    # A KV-cache block copy (vLLM copy_blocks' shape): one pair of rows named by the mapping is read
    # and written in each layer's cache; counting every row of every cache put the original at 29x
    # the copy ceiling.
    spec = spec_of(BLOCK_COPY, "copy_pairs")
    sizes = {"layers": 11, "C": 2752, "V": 3144}
    row = 2752 * 4
    reached = math.ceil(3144 * -math.expm1(2 * math.log1p(-1 / 3144)))   # 2 draws: 2 rows
    assert reached == 2
    want = 11 * reached * row * 2 + reached * row * 2 + 3144 * row * 2 + 2 * 8
    assert model.floor_bytes(spec, sizes) == want
    assert spec.bytes_moved(sizes) == 11 * 3144 * row * 2 + 3144 * row * 2 * 2 + 2 * 8
