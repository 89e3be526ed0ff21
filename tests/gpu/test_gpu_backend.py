"""The GPU backend on a real device: isolation, faults, numerics plumbing, timing stability."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astra import api, extract, source, spec as spec_mod, worker

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.cu"))


@pytest.fixture
def pool():
    p = worker.Pool(1, name="gpu-test")
    yield p
    p.close()


def test_roundtrip_all_float_types(pool):
    res = pool.run("gpu_jobs:roundtrip", None, timeout=300)
    for name, r in res.items():
        assert r["max_err"] == 0.0, (name, r)
        assert r["poison_nan"] and r["x_unchanged"] and r["regs"] > 0
    assert res["axpy<__nv_bfloat16>"]["dtype"] == "bfloat16"


def test_dynamic_shared_memory_above_48k(pool):
    assert pool.run("gpu_jobs:big_shared", None, timeout=300) == 96 * 1024 // 4


def test_hanging_kernel_is_stopped_and_next_job_works(pool):
    before = pool.run("gpu_jobs:pid", None, timeout=120)
    with pytest.raises(Exception) as info:
        pool.run("gpu_jobs:hang", {"launch_timeout": 3.0}, timeout=120)
    assert "did not finish within 3 s" in str(info.value)
    assert pool.run("gpu_jobs:pid", None, timeout=120) != before  # the stuck context was retired
    # And when the whole job overruns, the worker is killed.
    with pytest.raises(worker.WorkerTimeout):
        pool.run("gpu_jobs:hang", {"launch_timeout": 600.0}, timeout=8)
    assert pool.run("gpu_jobs:roundtrip", None, timeout=300)["axpy<float>"]["max_err"] == 0.0


def test_illegal_address_reported_and_next_job_works(pool):
    r = pool.run("gpu_jobs:illegal", None, timeout=300)
    assert r["error"] and "illegal" in r["error"].lower() and r["poisoned"]
    assert pool.run("gpu_jobs:pid", None, timeout=120) != r["pid"]
    assert pool.run("gpu_jobs:roundtrip", None, timeout=300)["axpy<float>"]["max_err"] == 0.0


def test_copy_ceiling_is_measured_and_cached(pool):
    r = pool.run("gpu_jobs:ceiling", None, timeout=300)
    assert 5e11 < r["fresh"] < 2e13
    assert abs(r["cached"] - r["fresh"]) / r["fresh"] < 0.10


def _copy(tmp_path: Path, example: Path) -> Path:
    dst = tmp_path / example.name
    shutil.copy(example, dst)
    return dst


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_examples_pass_the_gate_and_profile(tmp_path, example):
    path = _copy(tmp_path, example)
    text = path.read_text()
    verdicts = api.check(text, str(path), backend="gpu")
    assert verdicts and all(v.passed for v in verdicts), [v.human() for v in verdicts]
    # Now pinned: profile against the pinned baseline, side by side.
    for p in api.profile(text, str(path), backend="gpu"):
        assert p.measured and p.valid, p.to_json()
        for s in p.sizes:
            assert s.reference is not None and 0.8 < s.speedup < 1.25  # the same code
            assert s.candidate.runs >= 100 and s.candidate.gbps > 100
        print(p.summary_line())


def test_planted_wrong_kernel_is_caught(tmp_path):
    path = _copy(tmp_path, ROOT / "examples" / "silu_and_mul.cu")
    text = path.read_text()
    assert all(v.passed for v in api.check(text, str(path), backend="gpu"))  # pins the baseline
    wrong = text.replace("__float2half(silu(x) * y)", "__float2half(silu(x) * y * 1.05f)")
    assert wrong != text
    (v,) = api.check(wrong, str(path), backend="gpu")
    assert not v.passed
    msg = v.human()
    assert "`out`" in msg and "elements differ" in msg and "first at out[" in msg


def test_same_kernel_timed_twice_agrees_within_2_percent(pool):
    path = ROOT / "examples" / "silu_and_mul.cu"
    text = path.read_text()
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("silu_and_mul"), m)
    unit = extract.unit(text, str(path), "silu_and_mul")
    a, b = pool.run("gpu_jobs:profile_twice", {"unit": unit, "spec": spec}, timeout=600)
    for sa, sb in zip(a.sizes, b.sizes):
        ratio = sb.candidate.median_us / sa.candidate.median_us
        assert abs(ratio - 1) <= 0.02, (sa.label, sa.candidate, sb.candidate)
        assert not sa.implausible and not sa.output_failures
