"""The GPU backend on a real device: isolation, faults, numerics plumbing, timing stability."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod

import gpu_jobs
from gpu_jobs import Call

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.cu"))


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-test")
    yield p
    p.close()


def test_roundtrip_all_float_types(pool):
    res = pool.run(Call(gpu_jobs.roundtrip), timeout=300)
    for name, r in res.items():
        assert r["max_err"] == 0.0, (name, r)
        assert r["poison_nan"] and r["x_unchanged"] and r["regs"] > 0
    assert res["axpy<__nv_bfloat16>"]["dtype"] == "bfloat16"


def test_dynamic_shared_memory_above_48k(pool):
    assert pool.run(Call(gpu_jobs.big_shared), timeout=300) == 96 * 1024 // 4


def test_hanging_kernel_is_stopped_and_next_job_works(pool):
    before = pool.run(Call(gpu_jobs.pid), timeout=120)
    with pytest.raises(Exception) as info:
        pool.run(Call(gpu_jobs.hang, {"launch_timeout": 3.0}), timeout=120)
    assert "did not finish within 3 s" in str(info.value)
    assert pool.run(Call(gpu_jobs.pid), timeout=120) != before  # the stuck context was retired
    # And when the whole job overruns, the worker is killed.
    with pytest.raises(worker.WorkerTimeout):
        pool.run(Call(gpu_jobs.hang, {"launch_timeout": 600.0}), timeout=8)
    assert pool.run(Call(gpu_jobs.roundtrip), timeout=300)["axpy<float>"]["max_err"] == 0.0


def test_illegal_address_reported_and_next_job_works(pool):
    r = pool.run(Call(gpu_jobs.illegal), timeout=300)
    assert r["error"] and "illegal" in r["error"].lower() and r["poisoned"]
    assert pool.run(Call(gpu_jobs.pid), timeout=120) != r["pid"]
    assert pool.run(Call(gpu_jobs.roundtrip), timeout=300)["axpy<float>"]["max_err"] == 0.0


def test_copy_ceiling_is_measured_and_cached(pool):
    r = pool.run(Call(gpu_jobs.ceiling), timeout=300)
    assert 5e11 < r["fresh"] < 2e13
    assert abs(r["cached"] - r["fresh"]) / r["fresh"] < 0.10


def _kernels():
    for path in EXAMPLES:
        text = path.read_text()
        m = source.parse(text)
        for k in m.kernels:
            if k.spec is not None:
                yield path, text, k.name, spec_mod.load(k, m)


def _smallest_bench(spec):
    """Keep the tests inside the device time: time only the smallest bench size (the full set
    runs in benchmarks/backend_bench.py)."""
    small = min(spec.bench_cases(), key=spec.elements)
    spec.bench = {k: [v] for k, v in small.items() if k in spec.bench or not spec.bench}
    return spec


KERNELS = list(_kernels())


@pytest.mark.parametrize("path, text, name, spec", KERNELS, ids=[k[2] for k in KERNELS])
def test_examples_pass_the_gate_and_profile(pool, path, text, name, spec):
    unit = extract.unit(text, str(path), name)
    spec = _smallest_bench(spec)
    v = pool.run(jobs.CheckJob("gpu", unit, unit, spec, quick=True), timeout=300)
    assert v.passed, v.human()
    p = pool.run(jobs.ProfileJob("gpu", unit, unit, spec), timeout=300)
    flagged = [(s.label, s.role, s.output_failures, s.implausible) for s in p.sizes if s.output_failures or s.implausible]
    assert p.measured and p.valid, (p.errors, p.implausible, flagged)
    for s in p.bench_sizes:   # the ladder's decode sizes are launch-bound: throughput is asked of the bench sizes
        assert s.reference is not None and 0.8 < s.speedup < 1.25  # the same code, side by side
        assert s.candidate.runs >= 100 and s.candidate.gbps > 100
    print(p.summary_line())


def test_planted_wrong_kernel_is_caught(pool):
    path = ROOT / "examples" / "silu_and_mul.cu"
    text = path.read_text()
    wrong = text.replace("__float2half(silu(x) * y)", "__float2half(silu(x) * y * 1.05f)")
    assert wrong != text
    m = source.parse(text)
    spec = _smallest_bench(spec_mod.load(m.kernel("silu_and_mul"), m))
    v = pool.run(jobs.CheckJob("gpu", extract.unit(text, str(path), "silu_and_mul"),
                                                       extract.unit(wrong, str(path), "silu_and_mul"), spec,
                                                       quick=True), timeout=300)
    assert not v.passed
    msg = v.human()
    assert "`out`" in msg and "elements differ" in msg and "first at out[" in msg, msg


def test_same_kernel_timed_twice_agrees_within_2_percent(pool):
    path = ROOT / "examples" / "silu_and_mul.cu"
    text = path.read_text()
    m = source.parse(text)
    spec = _smallest_bench(spec_mod.load(m.kernel("silu_and_mul"), m))
    unit = extract.unit(text, str(path), "silu_and_mul")
    a, b = pool.run(Call(gpu_jobs.profile_twice, {"unit": unit, "spec": spec}), timeout=600)
    assert a.sizes and len(a.sizes) == len(b.sizes)
    for sa, sb in zip(a.sizes, b.sizes):
        ratio = sb.candidate.median_us / sa.candidate.median_us
        assert abs(ratio - 1) <= 0.02, (sa.label, sa.candidate, sb.candidate)
        assert not sa.implausible and not sa.output_failures


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) not on the PATH")
def test_ncu_metrics_and_hot_lines(pool):
    path = ROOT / "examples" / "silu_and_mul.cu"
    text = path.read_text()
    m = source.parse(text)
    spec = spec_mod.load(m.kernel("silu_and_mul"), m)
    unit = extract.unit(text, str(path), "silu_and_mul")
    metrics, hot, report = pool.run(Call(gpu_jobs.ncu_profile, {"unit": unit, "spec": spec,
                                                          "sizes": {"num_tokens": 4096, "d": 11008}}), timeout=300)
    print(metrics, hot)
    assert metrics.get("duration_us", 0) > 0 and metrics.get("dram_pct", 0) > 10
    assert metrics.get("achieved_occupancy_pct", 0) > 0 and metrics["stalls"]
    kernel_lines = range(m.kernel("silu_and_mul").span.start_line - 25, m.kernel("silu_and_mul").span.end_line + 1)
    assert hot and all(line in kernel_lines for line, _, _ in hot), metrics.get("source_page_head")
    assert report and len(report) > 1000   # the .ncu-rep the editor keeps in .astra/profiles/


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer not on the PATH")
def test_sanitizer_pool_catches_a_one_element_overread(pool):
    from astra_cuda.backends import gpu_sanitizer
    assert "compute-sanitizer" in pool.run(Call(gpu_jobs.sanitize_refused), timeout=120)
    san = gpu_sanitizer.sanitizer_pool("memcheck")
    try:
        # 1000 floats: CuPy's pool would round this up to 4096 bytes and hide the overread.
        r = san.run(Call(gpu_jobs.off_by_one, {"n": 1000}), timeout=300)
    finally:
        san.close()
    assert r["sanitizer"] == "memcheck" and r["exact"]
    assert r["error"] and "Invalid __global__ read" in r["error"], r


def test_cupy_compile_reads_nothing_private(pool, tmp_path):
    """The attack catalogue's NVRTC entries through the GPU backend's (CuPy's) compile."""
    from tests.security import catalogue
    secret = tmp_path / "secret.txt"
    secret.write_text("sk-canaryAstraSecretGpu\n")
    proj, subs = catalogue.stage_nvrtc(tmp_path, secret)
    files = []
    for a in catalogue.NVRTC:
        if a.name == "fifo_in_project":  # stops a worker for the compile time limit: the static test has it
            continue
        path = proj / f"{a.name}.cu"
        path.write_text(catalogue.nvrtc_source(a, subs))
        files.append((a.name, str(path), path.read_text()))
    said = pool.run(Call(gpu_jobs.hostile_includes, files), timeout=300)
    for name, r in said.items():
        assert "sk-canaryAstraSecretGpu" not in r["said"] and "root:" not in r["said"], (name, r)
    assert not said["absolute_include_in_kernel"]["ok"] and not said["dev_zero"]["ok"]
    # the device pass's preprocessor refuses a private header at file scope before any compile
    assert not said["absolute_include_at_file_scope"]["ok"] and "cannot read" in said["absolute_include_at_file_scope"]["said"]
