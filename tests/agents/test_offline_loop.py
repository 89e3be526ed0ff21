"""The offline team end to end on the CPU backend (correctness only: speed is not measured):
each example gets its best transformations through the full gate; resume, report, limits."""
import json

import pytest

from astra_cuda.model import source, spec as spec_mod
from astra_cuda.agents import Limits, optimize, report
from astra_cuda.execution.evaluator import local_evaluator

from agent_helpers import example

EXPECTED = {  # the transformations each example must get through the gate
    "silu_and_mul": {"vectorize", "fast_math", "unroll_vector"},
    "fused_add_rmsnorm": {"vectorize", "warp_reduce", "fast_math"},
    "merge_attn_states": {"pack_rows", "hoist", "vectorize", "fast_math"},
}


@pytest.fixture(scope="module")
def cpu():
    try:
        from astra_cuda.backends.cpu import CpuBackend
        return CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")


def setup(name, cpu, quick=False):
    text, path, kernel = example(name)
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    return text, path, kernel, sp, local_evaluator(path, kernel, sp, cpu, text, quick=quick)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_offline_team_on_example(name, cpu, tmp_path):
    # Quick gate in the loop (every candidate), the full gate on the result.
    text, path, kernel, sp, ev = setup(name, cpu, quick=True)
    full = local_evaluator(path, kernel, sp, cpu, text)
    steps = []
    r = optimize(text, path, kernel, ev, rounds=8, spec=sp, runs_dir=tmp_path, progress=steps.append)
    adopted = {x.plan.idea for x in r.rounds if x.adopted}
    assert EXPECTED[name] <= adopted, r.summary_markdown()
    assert all(x.evaluation.passed for x in r.rounds), r.summary_markdown()  # no transform breaks a kernel
    assert r.improved and not r.measured and "not measured" in r.speed_note
    # the best candidate passes the full gate again, freshly (new random inputs)
    assert full(r.best).passed
    assert r.best_kernel_source in r.best and r.diff.startswith("--- a/")
    assert steps[0].step == "baseline" and steps[-1].step == "done"
    assert steps[-1].round == len(r.rounds) and steps[-1].message
    md = r.summary_markdown()
    assert "What changed and why" in md and "not measured" in md
    log = tmp_path / r.run_id
    assert json.loads((log / "run.json").read_text())["status"] == "done"
    assert (log / "best.cu").read_text() == r.best


def test_resume_continues_from_the_log(cpu, tmp_path):
    text, path, kernel, sp, ev = setup("silu_and_mul", cpu, quick=True)
    first = optimize(text, path, kernel, ev, rounds=1, spec=sp, runs_dir=tmp_path)
    assert len(first.rounds) == 1 and first.rounds[0].adopted
    calls = []

    def counting(t):
        calls.append(t)
        return ev(t)

    again = optimize(text, path, kernel, counting, rounds=3, spec=sp, runs_dir=tmp_path, resume=first.run_id)
    assert again.rounds[0].index == 1 and again.rounds[0].candidate == first.rounds[0].candidate
    assert len(again.rounds) > 1 and all(r.plan.idea != "vectorize" for r in again.rounds[1:])
    assert first.best not in calls and text not in calls  # cached evaluations were reused


def test_time_limit_and_patience(cpu, tmp_path):
    text, path, kernel, sp, ev = setup("silu_and_mul", cpu, quick=True)
    r = optimize(text, path, kernel, ev, rounds=5, spec=sp, limits=Limits(max_seconds=0.0))
    assert r.rounds == [] and "time limit" in r.stopped and r.best == r.original


def test_original_failing_gate_is_reported(cpu, tmp_path):
    text, path, kernel, sp, ev = setup("silu_and_mul", cpu, quick=True)
    broken = text.replace("out[token * d + i] = __float2half(silu(x) * y);", "out[token * d + i] = undefined_thing;")
    r = optimize(broken, path, kernel, lambda t: ev(t), rounds=2, spec=sp)
    assert r.error and "does not pass" in r.error and r.rounds == []
    assert "Could not optimize" in r.summary_markdown()


def test_html_report(cpu, tmp_path):
    text, path, kernel, sp, ev = setup("silu_and_mul", cpu, quick=True)
    r = optimize(text, path, kernel, ev, rounds=2, spec=sp)
    out = report.write(r, tmp_path / "report")
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert "Rounds" in page and "vectorized" in page and "not measured" in page


SCALE = """#include <cuda_fp16.h>
/* @astra
grid = ["rows"]
block = ["min(n, 256)"]
[sizes]
rows = [1, 3, 17]
n = [1, 5, 33, 1001, 4096]
[args]
o = { type = "TYPE", shape = ["rows", "n"], output = true }
x = { type = "TYPE", shape = ["rows", "n"] }
n = "n"
*/
__global__ void scale(CTYPE* __restrict__ o, const CTYPE* __restrict__ x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    o[blockIdx.x * n + i] = CONV(2.0f * LOAD(x[blockIdx.x * n + i]) + 1.0f);
  }
}
"""


@pytest.mark.parametrize("dtype", ["float", "half"])
@pytest.mark.parametrize("transform", ["vectorize", "vectorize64", "vectorize32"])
def test_vectorized_rows_misaligned_and_tails_pass_the_gate(cpu, tmp_path, dtype, transform):
    """Odd row lengths make most rows misaligned (scalar fallback) and leave tails."""
    from astra_cuda.agents.offline import TRANSFORMS, Context
    ctype, conv, load = ("float", "", "") if dtype == "float" else ("__half", "__float2half", "__half2float")
    text = SCALE.replace("CTYPE", ctype).replace("TYPE", dtype).replace("CONV", conv).replace("LOAD", load)
    path = tmp_path / "scale.cu"
    path.write_text(text)
    m = source.parse(text)
    sp = spec_mod.load(m.kernel("scale"), m)
    rw = TRANSFORMS[transform].apply(text, Context("scale"))
    if transform == "vectorize32" and dtype == "float":
        assert rw is None  # one float per 4 bytes: nothing to gain
        return
    assert rw is not None
    ev = local_evaluator(str(path), "scale", sp, cpu, text, quick=True)
    e = ev(rw.text)
    assert e.passed, e.check.feedback


GRID_STRIDE = """#include <cuda_fp16.h>
/* @astra
grid = ["3"]
block = ["64"]
[sizes]
n = [1, 7, 100, 1001, 5000]
[args]
o = { type = "half", shape = ["n"], output = true }
x = { type = "half", shape = ["n"] }
n = "n"
*/
__global__ void twice(__half* __restrict__ o, const __half* __restrict__ x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    o[i] = __float2half(2.0f * __half2float(x[i]) - 1.0f);
  }
}
"""


def test_vectorized_grid_stride_loop_passes_the_gate(cpu, tmp_path):
    from astra_cuda.agents.offline import TRANSFORMS, Context
    path = tmp_path / "twice.cu"
    path.write_text(GRID_STRIDE)
    m = source.parse(GRID_STRIDE)
    sp = spec_mod.load(m.kernel("twice"), m)
    ev = local_evaluator(str(path), "twice", sp, cpu, GRID_STRIDE, quick=True)
    for t in ("vectorize", "vectorize64"):
        e = ev(TRANSFORMS[t].apply(GRID_STRIDE, Context("twice")).text)
        assert e.passed, e.check.feedback


def test_cancel_during_baseline(cpu):
    import threading
    text, path, kernel, sp, ev = setup("silu_and_mul", cpu, quick=True)
    cancel = threading.Event()

    def cancelled_eval(t):
        cancel.set()
        raise RuntimeError("worker cancelled")

    r = optimize(text, path, kernel, cancelled_eval, rounds=2, spec=sp, cancel=cancel)
    assert r.cancelled and r.error == "cancelled before the original was measured" and r.rounds == []
