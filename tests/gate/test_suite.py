import numpy as np

from astra_cuda.gate import suite

from .conftest import example_spec


def test_suite_covers_spec_edges_bench_distributions_and_holds_out_part():
    spec = example_spec("silu_and_mul")
    st = suite.build(spec, measures_time=False, nonce=1234)
    labels = {c.label for c in st.cases}
    assert labels == {"spec", "edge", "bench", "distribution"}
    assert len({c.seed for c in st.cases if c.label == "spec"}) >= 2
    # Edge sizes respect require, and include sizes that are not multiples of 2/32.
    edge_d = {c.sizes["d"] for c in st.cases if c.label == "edge"}
    assert 1 in edge_d and any(d % 2 == 1 and d > 1 for d in edge_d)
    # CPU: the timed sizes' inner dimension kept, the outer one reduced to fit.
    bench = [c.sizes for c in st.cases if c.label == "bench"]
    assert {b["d"] for b in bench} == {11008, 13824, 28672, 128}
    assert {"num_tokens": 4096, "d": 128} in bench  # the timed batch size itself, with a small row
    assert all(spec.elements(b) <= suite.CPU_MAX_ELEMENTS for b in bench)
    assert "not measured" in st.bench_note
    assert {c.distribution for c in st.cases} >= {"spec", "wide", "tiny", "large", "negative"}
    assert 0 < st.held_out < len(st.cases)
    assert all(c.visible for c in st.cases if c.label == "spec" and c.seed == st.cases[0].seed)


def test_gpu_suite_checks_every_timed_size_in_full():
    spec = example_spec("silu_and_mul")
    st = suite.build(spec, measures_time=True, nonce=1)
    bench = [c.sizes for c in st.cases if c.label == "bench"]
    assert {(b["num_tokens"], b["d"]) for b in bench} == {(4096, 11008), (4096, 13824), (4096, 28672)}


def test_edges_respect_require():
    spec = example_spec("silu_and_mul")
    spec.require = ("d % 8 == 0",)
    edges = suite.edge_sizes(spec, suite.CPU_MAX_ELEMENTS)
    assert edges and all(c["d"] % 8 == 0 for c in edges)


def test_inputs_fresh_per_seed_follow_init_and_never_default_to_zeros():
    spec = example_spec("merge_attn_states")
    sizes = {"num_tokens": 9, "num_heads": 32, "head_dim": 64}
    a = suite.inputs(spec, sizes, "spec", 1)
    b = suite.inputs(spec, sizes, "spec", 2)
    assert set(a) == {"v_a", "lse_a", "v_b", "lse_b"}  # outputs are poisoned, not generated
    assert not np.array_equal(a["v_a"], b["v_a"])
    assert np.array_equal(a["v_a"], suite.inputs(spec, sizes, "spec", 1)["v_a"])
    assert a["lse_a"].min() >= -10 and a["lse_a"].max() <= 10 and a["lse_a"].dtype == np.float32
    assert np.count_nonzero(a["v_a"]) > 0.99 * a["v_a"].size
    large = suite.inputs(spec, sizes, "large", 3)
    assert np.abs(large["v_a"].astype(np.float32)).min() >= 10
    assert (suite.inputs(spec, sizes, "negative", 3)["v_a"] <= 0).all()
    # Explicit inits keep their range under other distributions.
    assert large["lse_a"].max() <= 10


def test_quick_suite_is_small():
    spec = example_spec("fused_add_rmsnorm")
    full = suite.build(spec, measures_time=False, nonce=5)
    quick = suite.build(spec, measures_time=False, nonce=5, quick=True)
    assert len(quick.cases) < len(full.cases) / 2


def test_large_inputs_are_drawn_in_parallel_chunks_reproducibly():
    """Timed sizes (~10^8 elements) are drawn chunk by chunk on all cores: the values depend on
    the seed only, every chunk has its own stream, and the distribution is the spec's."""
    spec = example_spec("merge_attn_states")
    sizes = {"num_tokens": 2 * suite.PARALLEL_MIN // 128 + 3, "num_heads": 1, "head_dim": 128}
    a = suite.inputs(spec, sizes, suite.SPEC_DIST, 7)
    b = suite.inputs(spec, sizes, suite.SPEC_DIST, 7)
    c = suite.inputs(spec, sizes, suite.SPEC_DIST, 8)
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name])
        assert not np.array_equal(a[name], c[name])
    v = a["v_a"].reshape(-1)
    assert v.dtype == np.float16 and v.size > 2 * suite.PARALLEL_MIN
    n = suite.PARALLEL_MIN
    assert not np.array_equal(v[:1000], v[n:n + 1000]) and not np.array_equal(v[n:n + 1000], v[2 * n:2 * n + 1000])
    f = v.astype(np.float32)
    assert abs(f.mean()) < 0.01 and abs(f.std() - 1.0) < 0.01 and (f == 0).mean() < 1e-4
    assert not np.array_equal(a["v_a"], a["v_b"])


def test_cases_where_a_bounded_init_is_empty_are_not_run():
    """DeepSpeed's ragged logits_gather reads row `start + count - 1` of a table of V rows, each
    drawn from randint(1, V / 2 + 1): at the edge size V = 1 that range is empty, and the value
    it would give reads past the table (two GPU runs then disagreed). Such a size is no case of
    the program's: edges skip it, and a listed case is skipped with a note."""
    from astra_cuda.model import source, spec as spec_mod
    text = ("struct Seq { int start; int count; };\n/* @astra\ngrid = [\"n\"]\nblock = [32]\n"
            "[sizes]\nn = [4, 9]\nV = [1, 64, 100]\nd = [32]\n[args]\n"
            "out = { type = \"float\", shape = [\"n\", \"d\"], output = true }\n"
            "acts = { type = \"float\", shape = [\"V\", \"d\"] }\n"
            "seqs = { records = \"n\", start = { init = \"randint(1, V / 2 + 1)\" }, "
            "count = { init = \"randint(1, V / 2 + 1)\" } }\n"
            "ids = { type = \"int32\", shape = [\"n\"], init = \"randint(0, V - 1)\" }\n*/\n"
            "__global__ void g(float* out, const float* acts, const Seq* seqs, const int* ids) {}\n")
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("g"), m)
    assert not suite.drawable(spec, {"n": 4, "V": 1, "d": 32})
    assert suite.drawable(spec, {"n": 4, "V": 2, "d": 32}) and suite.drawable(spec, {"n": 4, "V": 64, "d": 32})
    st = suite.build(spec, measures_time=False, nonce=7)
    assert st.cases and all(c.sizes["V"] >= 2 for c in st.cases)
    assert {c.sizes["V"] for c in st.cases if c.label == "spec"} == {64, 100}
    assert any("no value to draw" in n for n in st.notes), st.notes
    # An input's own bounds count too: randint(0, V - 1) is empty at V = 1.
    fixed = text.replace('start = { init = "randint(1, V / 2 + 1)" }', "start = 0").replace(
        'count = { init = "randint(1, V / 2 + 1)" }', "count = 1")
    m = source.parse(fixed)
    only_ids = spec_mod.load(m.kernel("g"), m)
    assert not only_ids.args["seqs.start"].drawn
    assert not suite.drawable(only_ids, {"n": 4, "V": 1, "d": 32})
    assert suite.drawable(only_ids, {"n": 4, "V": 2, "d": 32})


def test_inputs_are_drawn_ahead_with_the_same_values_and_one_large_case_at_most():
    """The gate takes each case's inputs from `Drawn`, which draws them on a thread ahead of their
    turn: the values are `inputs`' own, and no more than one large case waits drawn."""
    spec = example_spec("merge_attn_states")
    big = {"num_tokens": 2 * suite.PARALLEL_MIN // 128 + 3, "num_heads": 1, "head_dim": 128}
    small = {"num_tokens": 9, "num_heads": 4, "head_dim": 64}
    cases = [suite.Case(small, "spec", 1, True, "spec"), suite.Case(small, "wide", 2, False, "distribution"),
             suite.Case(big, "spec", 3, False, "bench"),
             suite.Case(big, "spec", 4, False, "bench"), suite.Case(small, "spec", 5, False, "edge")]
    drawn = suite.Drawn(spec, cases)
    try:
        first = drawn.get(0)
        large_ahead = [i for i in drawn.ahead if spec.elements(cases[i].sizes) >= suite.PARALLEL_MIN]
        assert large_ahead == [2], drawn.ahead.keys()   # the second large case waits for the first
        for i, c in enumerate(cases):
            host = first if i == 0 else drawn.get(i)
            want = suite.inputs(spec, c.sizes, c.distribution, c.seed)
            assert set(host) == set(want) and all(np.array_equal(host[k], want[k]) for k in want)
    finally:
        drawn.close()


def test_the_checks_after_the_suite_take_their_fresh_inputs_drawn_ahead():
    """The statefulness and determinism checks draw fresh inputs of their own (seed + 11, + 7,
    + 13): announced as `later`, they are drawn on the inputs thread while the suite's cases run,
    with `inputs`' own values; a draw nobody announced is drawn on the spot, still its own."""
    spec = example_spec("merge_attn_states")
    small = {"num_tokens": 9, "num_heads": 4, "head_dim": 64}
    mid = {"num_tokens": 33, "num_heads": 4, "head_dim": 64}
    cases = [suite.Case(small, "spec", 1, True, "spec"), suite.Case(mid, "spec", 1, True, "spec"),
             suite.Case(small, "wide", 2, False, "distribution")]
    assert suite.stateful_case(spec, cases).sizes == mid
    assert [c.sizes for c in suite.schedule_cases(spec, cases, quick=True)] == [mid]
    later = [suite.Case(mid, "spec", 12, False, "stateful"), suite.Case(mid, "spec", 8, False, "stateful")]
    drawn = suite.Drawn(spec, cases, later)
    try:
        for i in range(len(cases)):
            drawn.get(i)
        assert set(drawn.ahead) == {3, 4}   # both later draws queued (drawn) before anyone asks
        for c in later + [suite.Case(small, "spec", 99, False, "schedule")]:
            host = drawn.take(c.sizes, c.distribution, c.seed)
            want = suite.inputs(spec, c.sizes, c.distribution, c.seed)
            assert set(host) == set(want) and all(np.array_equal(host[k], want[k]) for k in want)
        assert not drawn.ahead
    finally:
        drawn.close()
