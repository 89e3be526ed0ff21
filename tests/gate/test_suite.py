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
