"""Large cases of the main suite drawn, run and judged where the buffers live
(gate/device_case.py), on the NumPy fake GPU (tests/profiler/fake_gpu.py: CuPy's place is NumPy's
here). The threshold is lowered so the fake's small cases take the path a timed size takes on a
GPU; the real GPU's run is `scripts/gpu-check bench` (the search evaluation's suite step)."""
from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

from astra_cuda import gate
from astra_cuda.backends import device_digest, guard
from astra_cuda.gate import device_case, run as gate_run, suite as suites
from astra_cuda.model import dtypes
from astra_cuda.model.harness import parse_init

from tests.gate.conftest import example_spec
from tests.profiler.fake_gpu import FakeBuf, FakeGpu, silu, units


class CountingGpu(FakeGpu):
    """The fake GPU, counting what crosses between host and device."""

    def __init__(self, kernels):
        super().__init__(kernels)
        self.downloads = self.uploads = 0

    def download(self, buf):
        self.downloads += 1
        return super().download(buf)

    def upload(self, host):
        self.uploads += 1
        return super().upload(host)


@pytest.fixture
def on_device(monkeypatch):
    """Every case of the main suite judged on the device; the checks after the suite left out
    (they run on a mid-sized case, the host's way)."""
    monkeypatch.setattr(device_case, "DEVICE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(gate_run._Gate, "statefulness", lambda self, st: None)
    monkeypatch.setattr(gate_run._Gate, "orders", lambda self, st: None)


def check(candidate, quick=True):
    ref, cand, spec = units("cand")
    b = CountingGpu({"// reference": lambda a, n: silu(a), "// cand": candidate})
    return gate.check(ref, cand, spec, b, quick=quick), b


def correct(args, n):
    silu(args)


def test_a_passing_case_crosses_no_bus(on_device):
    """Inputs drawn on the device, nothing uploaded; outputs compared there, nothing downloaded."""
    v, b = check(correct)
    assert v.status == "passed", v.human()
    assert any("on the device" in n for n in v.coverage.notes)
    assert (b.uploads, b.downloads) == (0, 0)
    assert {c.name for c in v.checks if c.passed} >= {"compare", "poison", "inputs_unchanged"}


def test_control_the_host_path_moves_every_buffer(monkeypatch):
    """The control: with the device path off, the same suite uploads and downloads."""
    monkeypatch.setattr(device_case, "DEVICE_MIN_ELEMENTS", 1 << 60)
    monkeypatch.setattr(gate_run._Gate, "statefulness", lambda self, st: None)
    monkeypatch.setattr(gate_run._Gate, "orders", lambda self, st: None)
    v, b = check(correct)
    assert v.status == "passed", v.human()
    assert b.uploads > 0 and b.downloads > 0


def test_wrong_values_fail_with_the_hosts_details(on_device):
    def wrong(args, n):
        silu(args)
        args[0].host.reshape(-1)[7] += 1
    v, _ = check(wrong)
    assert v.status == "failed" and v.failures[0].check == "compare", v.human()
    assert v.failures[0].index is not None and v.failures[0].bad == 1


def test_work_skipped_is_unwritten(on_device):
    v, _ = check(lambda args, n: None)
    assert v.status == "failed" and v.failures[0].check in ("poison", "not_constant"), v.human()


@pytest.mark.parametrize("how", ["write", "zero"])
def test_an_input_written_is_caught(on_device, how):
    def writes(args, n):
        silu(args)
        if how == "zero":
            args[1].host[...] = 0
        else:
            args[1].host.reshape(-1)[3] += 1
    v, _ = check(writes)
    assert v.status == "failed" and v.failures[0].check == "inputs_unchanged", v.human()
    assert "was modified" in v.failures[0].message


def _live(shape, dtype, but):
    return [o for o in gc.get_objects() if isinstance(o, FakeBuf) and o.shape == shape and o.dtype == dtype
            and o is not but]


def test_a_forged_input_is_caught(on_device):
    """A candidate that writes its input and the same into every live buffer shaped like it — the
    pristine copy the gate drew, the reference's — is still caught: the digests it would have to
    match are on the host, keyed with a key no kernel sees."""
    def forges(args, n):
        silu(args)
        inp = args[1]
        inp.host.reshape(-1)[5] += 1
        for b in _live(inp.shape, inp.dtype, inp):
            b.host[...] = inp.host
    v, _ = check(forges)
    assert v.status == "failed" and v.failures[0].check in ("inputs_unchanged", "compare"), v.human()


def test_reference_outputs_rewritten_through_guessed_pointers_fail(on_device):
    """tests/security/test_ground_truth.py's scribbler, with the reference's outputs left on the
    device: their digests, taken before its launch, catch it."""
    def scribbles(args, n):
        out, inp, d = args[0], args[1], args[2].value
        out.host[...] = inp.host[:, :d]
        for b in _live(out.shape, out.dtype, out):
            b.host[...] = out.host
    v, _ = check(scribbles)
    assert v.status == "failed" and v.failures[0].check == "compare", v.human()


def _arg(kind: str, dtype: str):
    spec = example_spec("silu_and_mul")
    a = next(a for a in spec.args.values() if a.pointer and not a.output)
    dt = dtypes.lookup(dtype)
    assert dt is not None
    return dataclasses.replace(a, dtype=dt, init=parse_init(kind))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "int16"])
@pytest.mark.parametrize("kind,dist", [("normal", d) for d in suites.DISTRIBUTIONS] +
                         [("normal(2, 3)", "spec"), ("uniform(-4, 9)", "spec"), ("randint(-3, 40)", "spec")])
def test_the_device_draw_is_the_hosts(dtype, kind, dist):
    """With NumPy's generator the device's draw is the host's, value for value: the same calls,
    ranges and conversions (bfloat16 rounded to nearest even from its bits, as ml_dtypes casts) —
    so with CuPy's generator it has the host's distribution."""
    a = _arg(kind, dtype)
    host = suites.sample(a, (3, 1000), np.random.Generator(np.random.PCG64(9)), dist)
    dev = device_case.device_sample(np, np.random.Generator(np.random.PCG64(9)), a, (3, 1000), dist)
    if dev is None:
        pytest.fail(f"{dtype} {kind} is not drawn on the device")
    assert np.array_equal(dev.view(host.dtype), host), (dev[:5], host[:5])
    assert np.count_nonzero(host) > host.size // 2 or "randint" in kind or "int" in dtype


def test_what_the_device_cannot_draw_is_the_hosts():
    assert device_case.device_sample(np, np.random.default_rng(1), _arg("permutation", "int32"), (10,), "spec") is None
    assert device_case.device_sample(np, np.random.default_rng(1), _arg("randint(0, 9)", "int64"), (10,), "spec") is None


def test_the_digest_sees_every_change_and_depends_on_its_key():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(4099).astype(np.float32)
    key = (12345, 67890)
    d = device_digest.digest(np, a, key)
    assert d == device_digest.digest(np, a.copy(), key)
    assert d != device_digest.digest(np, a, (12346, 67890))
    for change in (lambda x: x.__setitem__(0, x[0] + 1), lambda x: x.__setitem__(slice(None), 0),
                   lambda x: x.__setitem__([1, 2], x[[2, 1]]), lambda x: x.view(np.uint8).__setitem__(16395, 1)):
        b = a.copy()
        change(b)
        assert device_digest.digest(np, b, key) != d
    assert device_digest.holds_pattern(np, np.array([1.0, np.nan], np.float32).view(np.uint32) | 0, 4, 0xFF) is False
    raw = np.zeros(6, np.float16)
    raw.view(np.uint8)[4:6] = 0xA5
    assert device_digest.holds_pattern(np, raw, 2, 0xA5) and not device_digest.holds_pattern(np, raw[:2], 2, 0xA5)


class GuardedGpu(FakeGpu):
    """The fake GPU placing a guard after each run buffer of a device case, as the GPU backend
    does (`Backend.guarded`, `backends/guard.py`); `raw` the whole allocation, guard included."""

    def guarded(self, dtype, shape):
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        raw = np.empty(nbytes + guard.GUARD_BYTES, dtype=np.uint8)
        guard.fill(np, raw, nbytes)
        buf = FakeBuf(raw[:nbytes].view(dt).reshape(shape))
        buf.raw = raw
        return buf

    def overrun(self, buf):
        raw = getattr(buf, "raw", None)
        return None if raw is None else guard.first_changed(np, raw, buf.nbytes)


@pytest.mark.parametrize("which", [0, 1])   # the output; a read input's run copy
def test_a_write_past_a_device_case_buffer_is_named(on_device, which):
    """A candidate that writes one byte past the end of a device case's buffer (its output, or its
    run copy of an input) fails naming that buffer, as an uploaded buffer's overrun does — the
    write reaches the guard after it, not whatever the allocator placed next."""
    def overruns(args, n):
        silu(args)
        b = args[which]
        raw = getattr(b, "raw", b.host.reshape(-1).view(np.uint8))
        raw[b.nbytes + 3 if raw.size > b.nbytes else 0] ^= 0x5A   # past the end where there is a past
    ref, cand, spec = units("cand")
    b = GuardedGpu({"// reference": lambda a, n: silu(a), "// cand": overruns})
    v = gate.check(ref, cand, spec, b, quick=True)
    name = ["out", "input"][which]
    assert v.status == "failed" and v.failures[0].check == "launch", v.human()
    assert f"`{name}`: the kernel wrote past its end" in v.failures[0].message, v.failures[0].message
