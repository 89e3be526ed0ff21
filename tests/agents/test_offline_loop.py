"""The offline team end to end on the CPU backend (correctness only: speed is not measured):
each example gets its best transformations through the full gate; resume, report, limits."""
import json

import pytest

from astra import source, spec as spec_mod
from astra.agents import Limits, optimize, report
from astra.agents.evaluators import local_evaluator

from agent_helpers import example

EXPECTED = {  # the transformations each example must get through the gate
    "silu_and_mul": {"vectorize", "fast_math"},
    "fused_add_rmsnorm": {"vectorize", "warp_reduce", "fast_math"},
    "merge_attn_states": {"hoist", "vectorize64", "fast_math"},
}


@pytest.fixture(scope="module")
def cpu():
    try:
        from astra.backends.cpu import CpuBackend
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
    assert r.improved and not r.measured and "not measured" in r.speed_note
    # the best candidate passes the full gate again, freshly (new random inputs)
    assert full(r.best).passed
    assert r.best_kernel_source in r.best and r.diff.startswith("--- a/")
    assert steps[0]["step"] == "baseline" and steps[-1]["step"] == "done"
    assert {"round", "step", "best_speedup", "message"} <= set(steps[-1])
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
    from astra.agents import Evaluation
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
