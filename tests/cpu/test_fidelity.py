"""The fidelity check's own logic on the CPU; the GPU comparison itself is marked `gpu`."""
import numpy as np
import pytest

from astra_cuda.backends.cpu import fidelity


def test_compare_counts_ulps_and_identity():
    a = np.array([1.0, 2.0, -0.0, np.nan], np.float32)
    b = np.nextafter(a, np.float32(np.inf)).astype(np.float32)
    b[3] = np.nan
    r = fidelity.compare(a, b)
    assert r["elements"] == 4 and r["identical"] == 0.25 and r["max_ulp"] == 1
    h = np.array([1, 2, 3], np.float16)
    assert fidelity.compare(h, h) == {"elements": 3, "identical": 1.0, "max_ulp": 0}


def test_saved_cpu_outputs_are_current(cpu):
    """The CPU side saved for GPU machines without g++ must match what the backend computes
    now (regenerate with: python -m astra_cuda.backends.cpu.fidelity --save-cpu tests/cpu/fidelity_cpu.npz)."""
    saved = fidelity._load_npz(fidelity.DEFAULT_NPZ)
    for k, case in enumerate(fidelity.CASES):
        if "example" in case.name:
            continue  # examples belong to another area and may change; the GPU run uses them live
        args = fidelity._inputs(k, case)
        assert bytes(saved[f"{k}_inputs_sha"]).decode() == fidelity._digest(args), case.name
        for j, out in zip(case.outputs, fidelity._run(cpu, case, args)):
            assert fidelity.compare(out, saved[f"{k}_out_{j}"])["identical"] == 1.0, case.name


@pytest.mark.gpu
def test_cpu_backend_matches_the_gpu():
    from astra_cuda.execution import jobs, worker
    from astra_cuda.session import Session

    try:
        gpu = Session().statuses()["gpu"]
        ok, why = gpu.available, gpu.reason
    except Exception as e:  # noqa: BLE001 - any failure means no GPU here
        ok, why = False, str(e)
    if not ok:
        pytest.skip(f"no GPU: {why}")
    report = worker.run(jobs.FidelityJob(str(fidelity.DEFAULT_NPZ)), timeout=600)
    print("\n" + fidelity.markdown(report))
    missed = [r for r in report["results"] if r["meets_target"] is False]
    # Measured on an H200 (benchmarks/results/cpu_fidelity-H200.md): the GPU's rsqrtf (MUFU.RSQ)
    # and logf are not bit-exact with the CPU's, so these two outputs miss the 99.9% share while
    # staying within 4 ulp. Anything else missing, or a wider gap, is a regression.
    known = {"RMSNorm, warp shuffles (float)", "merge_attn_states (example)"}
    unexpected = [r for r in missed if r["kernel"] not in known or r["max_ulp"] > 4]
    assert not unexpected, fidelity.markdown({"results": unexpected})


def test_fidelity_report_end_to_end_with_a_stand_in_gpu(monkeypatch, tmp_path):
    """The report's plumbing, with the CPU backend standing in for the GPU (all identical)."""
    import astra_cuda.backends.gpu as gpu_mod
    from astra_cuda.backends.cpu import CpuBackend

    monkeypatch.setattr(gpu_mod, "GpuBackend", CpuBackend)
    monkeypatch.setattr(fidelity, "CASES", [c for c in fidelity.CASES if "example" not in c.name][:3])
    out = tmp_path / "f.json"
    assert fidelity.main(["--json", str(out), "--cpu-npz", str(tmp_path / "none.npz")]) == 0
    import json

    rows = json.loads(out.read_text())["results"]
    assert rows and all(r["identical"] == 1.0 and r["max_ulp"] == 0 for r in rows)
