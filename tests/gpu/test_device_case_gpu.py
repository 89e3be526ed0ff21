"""gate/device_case.py with CuPy: the device's draw has the host's distribution for every dtype and
init it draws, and the digest and poison checks on the device agree with NumPy's on the same
bytes. `PYTEST_GPU_FILES=tests/gpu/test_device_case_gpu.py scripts/gpu-check wheels import pytest-gpu`;
the gate's whole path on the device runs in `scripts/gpu-check bench` (the search evaluation)."""
from __future__ import annotations

import pytest

from astra_cuda.execution import worker
from astra_cuda.gate import suite as suites

import gpu_jobs
from gpu_jobs import Call
from tests.gate.conftest import example_spec

pytestmark = pytest.mark.gpu


def test_device_draws_match_the_hosts_distributions():
    spec = example_spec("silu_and_mul")
    proto = next(a for a in spec.args.values() if a.pointer and not a.output)
    cases = [(dt, "normal", d, proto) for dt in ("float32", "float16", "bfloat16", "float64")
             for d in suites.DISTRIBUTIONS]
    cases += [(dt, k, "spec", proto) for dt in ("float32", "bfloat16", "int32", "uint8")
              for k in ("normal(2, 3)", "uniform(-4, 9)", "randint(-3, 40)")]
    pool = worker.Pool(1, name="gpu-test")
    try:
        res = pool.run(Call(gpu_jobs.device_draws, cases), timeout=600)
    finally:
        pool.close()
    for (dt, kind, dist, _), r in zip(cases, res):
        assert r is not None, f"{dt} {kind} {dist} is drawn on the host"
        (dev, host), same_digest, same_poison, got = r
        assert same_digest and same_poison, (dt, kind, dist)
        scale = max(host[1], 1e-3)
        assert abs(dev[0] - host[0]) < 0.01 * scale + 0.01 * abs(host[0]), (dt, kind, dist, dev, host)
        assert abs(dev[1] - host[1]) < 0.01 * scale, (dt, kind, dist, dev, host)
        assert host[2] - scale <= dev[2] and dev[3] <= host[3] + scale, (dt, kind, dist, dev, host)   # its range
        assert abs(dev[4] - host[4]) < 0.01, (dt, kind, dist, dev, host)   # zeros no more often than the host's
