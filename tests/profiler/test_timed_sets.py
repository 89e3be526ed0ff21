"""astra_cuda.gate.timed on the NumPy fake GPU: input sets, expectations computed after the fact,
and the checks every timed launch goes through."""
import numpy as np
import pytest

from astra_cuda import gate
from astra_cuda.gate import checks

from .fake_gpu import FakeGpu, silu, units

SIZES = {"num_tokens": 5, "d": 96}


def setup():
    ref, _, spec = units("x")
    b = FakeGpu({"// reference": lambda a, n: silu(a)})
    sets = gate.prepare_timed(spec, b, SIZES, sets=2, seed=3)
    mod = b.compile(ref.source, [ref.name_expression])
    return spec, b, sets, mod, ref


POS = np.array([0, 100, 479])


def expect(spec, b, sets, mod, ref):
    gate.expect(spec, b, sets, (mod, ref.name_expression), {"out": (POS, b.upload(POS))})


def test_second_set_is_a_rotation_and_expectations_follow_it():
    spec, b, sets, mod, ref = setup()
    s0, s1 = (b.download(s.pristine["input"]) for s in sets)
    roll = sets[1].rolls["input"]
    assert 0 < roll < s0.size and np.array_equal(np.roll(s0.reshape(-1), roll), s1.reshape(-1))
    assert all(s.outputs is None for s in sets)
    expect(spec, b, sets, mod, ref)
    for s, x in zip(sets, (s0, s1)):
        want = np.empty((5, 96), np.float16)
        silu([type("B", (), {"host": want})(), type("B", (), {"host": x})(), checks.Scalar("int", 96, "int32")])
        assert np.array_equal(s.expected(b, "out"), want) and np.array_equal(s.samples["out"], want.reshape(-1)[POS])
    pos = np.array([0, 7, 959])
    assert np.array_equal(sets[1].input_values("input", pos), s1.reshape(-1)[pos])


@pytest.mark.parametrize("device_compare", [True, False])
def test_checks_of_a_launch(device_compare):
    spec, b, sets, mod, ref = setup()
    b.device_compare = device_compare
    expect(spec, b, sets, mod, ref)
    ts = sets[0]
    good = b.upload(ts.expected(b, "out"))
    assert gate.check_outputs(spec, b, ts, {"out": good}, poison=0xFF, where="after launch 1") == []
    bad = b.upload(ts.expected(b, "out"))
    bad.host.reshape(-1).view(np.uint8)[-2:] = 0xFF  # the last element never written
    f = gate.check_outputs(spec, b, ts, {"out": bad}, poison=0xFF, where="after launch 9")
    assert len(f) == 1 and f[0].message.startswith("after launch 9: `out`: 1 of 480 elements were never written")
    # Samples: rows of gathered elements, one per launch.
    pos = POS
    rows = np.stack([ts.samples["out"]] * 4)
    assert gate.check_samples(spec, ts, "out", pos, rows, [0xFF, 0xA5] * 2, [f"launch {i}" for i in range(4)]) is None
    rows[2, 1] = np.frombuffer(b"\xff\xff", np.float16)[0]
    row, f = gate.check_samples(spec, ts, "out", pos, rows, [0xFF, 0xA5] * 2, [f"launch {i}" for i in range(4)])
    assert row == 2 and "after launch 2" in f.message and "never written" in f.message and f.index == [1, 4]
    # Read-only inputs: unchanged bytes, on the device and in samples.
    copy = b.view(b.allocate(ts.pristine["input"].nbytes), 0, np.float16, (5, 192))
    b.copy(copy, ts.pristine["input"])
    assert gate.check_inputs_unchanged(spec, b, ts, {"input": copy}, where="after x") == []
    copy.host[1, 3] += 1
    f = gate.check_inputs_unchanged(spec, b, ts, {"input": copy}, where="after x")
    assert len(f) == 1 and "`input` was modified (1 elements)" in f[0].message
    vals = ts.input_values("input", pos)[None, :].copy()
    assert gate.check_samples(spec, ts, "input", pos, vals, [None], ["l"]) is None
    vals[0, 0] += 1
    assert "read-only input `input` was modified" in gate.check_samples(spec, ts, "input", pos, vals, [None],
                                                                        ["l"])[1].message


def test_inputs_drawn_ahead_are_the_ones_the_timing_would_draw():
    """The profiler draws the next size's inputs while it times this one (`gate.timed_host` with
    `timing.ahead_seed`): the sets made from them hold the same values as those drawn in place."""
    from concurrent.futures import Future

    from astra_cuda.profiler import timing
    _, _, spec = units("x")
    b = FakeGpu({})
    here = gate.prepare_timed(spec, b, SIZES, sets=2, seed=11)
    drawn = gate.timed_host(spec, SIZES, 11)
    ahead = gate.prepare_timed(spec, b, SIZES, sets=2, seed=11, host=drawn)
    for s, t in zip(here, ahead):
        assert s.rolls == t.rolls and np.array_equal(b.download(s.pristine["input"]), b.download(t.pristine["input"]))
    # measure_size(seed=S) gives prepare_timed the seed ahead_seed(S) names
    rng = np.random.default_rng(5)
    assert timing.ahead_seed(5) == int(rng.integers(1, 2**31 - 1))
    f: Future = Future()
    f.set_result(gate.timed_host(spec, SIZES, timing.ahead_seed(5)))
    assert np.array_equal(f.result()["input"], gate.prepare_timed(spec, b, SIZES, seed=timing.ahead_seed(5))[0].host["input"])


def test_expectations_come_from_the_host_inputs_and_spoiled_sets_are_named():
    """A set the loop copied from, written while it ran (no launch was given it): the reference
    runs on the host's inputs all the same, the set is named, and read-only inputs are compared
    with the host's values from then on."""
    spec, b, sets, mod, ref = setup()
    honest = gate.prepare_timed(spec, b, SIZES, sets=2, seed=3)
    expect(spec, b, honest, mod, ref)
    want = [s.expected(b, "out") for s in honest]
    sets[1].pristine["input"].host[...] = 0   # the rotated set, spoiled
    expect(spec, b, sets, mod, ref)
    assert sets[0].changed == [] and sets[1].changed == ["input"]
    for s, w in zip(sets, want):
        assert np.array_equal(s.expected(b, "out"), w)
    assert np.array_equal(b.download(sets[1].pristine["input"]), b.download(honest[1].pristine["input"]))
