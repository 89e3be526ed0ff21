"""Tuning remembered per kernel content, sizes and GPU model (`.astra/tuning/`): a rerun on the
same model replays it, re-verifies and re-times it and stops there; another model never uses it
silently; a stale or hostile file costs one evaluation, never a wrong result. The loop runs on a
made-up GPU (timings from the candidate's launch); the batch through the CLI with the counting
fake worker of test_resume standing in for a GPU."""
import json
import pathlib
import shutil
from dataclasses import replace

import pytest

from astra_cuda.model import launch_change, source, spec as spec_mod
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming, optimize
from astra_cuda.evaluation import OnCandidates
from astra_cuda.agents.memory import Memory
from astra_cuda.execution.jobs import BackendsJob, BackendStatus, DeviceJob, GpuFactsJob

from agent_helpers import ROOT
from test_resume import FakeWorker, astra

KERNELS = pathlib.Path(__file__).parent / "kernels"
GELU = "gelu_forward_kernel1"
N = 1 << 24


def gelu():
    path = KERNELS / "gelu_bf16.cu"
    text = path.read_text()
    m = source.parse(text)
    return text, str(path), spec_mod.load(m.kernel(GELU), m)


def made_up_gpu(model: str, fail_block: int | None = None):
    """Evaluations as a GPU `model` would give them: fastest at 16 elements per thread and
    512 threads; a candidate launched with `fail_block` threads fails the gate."""
    calls: list[str] = []

    def evaluate(text):
        calls.append(text)
        sp = launch_change.spec_in(source.parse(text), GELU)
        grid, block, _ = sp.launch_dims({"N": N})
        ept = round(N / (grid[0] * block[0]))
        if block[0] == fail_block:
            return Evaluation(Check(False, "FAILED compare", "out[3]: 1.5 vs 2.0", 0, "check"), gpu=model)
        us = 100.0 if "astra" not in text else 40.0 + 5 * abs(ept - 16) / 8 + abs(block[0] - 512) / 64
        return Evaluation(Check(True, "passed", "", 10, "passed"),
                          ProfileSummary((SizeTiming({"N": N}, 100.0, us, 100.0 / us * 0.4),), "memory"), gpu=model)
    return evaluate, calls


def memory(folder, model, text, **kw):
    """As `api.optimize` makes it (the folder is `.astra/tuning/`, which `ensure_astra_dir` creates)."""
    folder.mkdir(exist_ok=True)
    k = source.parse(text).kernel(GELU)
    return Memory(folder, GELU, k.spec.text + "\n" + k.text, [{"N": N}], model, **kw)


def run(text, path, sp, evaluate, mem, tmp_path):
    return optimize(text, path, GELU, evaluate, rounds=10, spec=sp, memory=mem, runs_dir=tmp_path / "runs")


def test_a_rerun_on_the_same_gpu_starts_from_the_remembered_tuning(tmp_path):
    text, path, sp = gelu()
    evaluate, calls = made_up_gpu("Fake GPU A")
    mem = memory(tmp_path / "tuning", "Fake GPU A", text)
    first = run(text, path, sp, evaluate, mem, tmp_path)
    assert first.improved and first.tuning and first.memory_note == ""
    first_calls = len(calls)
    stored = json.loads(mem.file.read_text())
    assert list(stored["gpus"]) == ["Fake GPU A"] and stored["sizes"] == [{"N": N}]
    assert stored["gpus"]["Fake GPU A"]["run_id"] == first.run_id

    calls.clear()
    second = run(text, path, sp, evaluate, mem, tmp_path)
    assert len(calls) == 2 < first_calls     # the original and the remembered best in its readable form, once (issue 29)
    assert calls[0] == text and calls[1] == second.best   # a plain evaluate: the original alone first
    assert second.best == first.best and second.speedup == pytest.approx(first.speedup)
    assert [r.plan.source for r in second.rounds] == ["memory"] and second.rounds[0].adopted
    assert "started from the tuning remembered for" in second.memory_note
    assert "Fake GPU A" in second.summary_markdown() and "nothing searched again" in second.stopped
    assert second.to_json()["memory_note"] == second.memory_note

    calls.clear()                                           # --fresh: searches, and remembers again
    fresh = run(text, path, sp, evaluate, memory(tmp_path / "tuning", "Fake GPU A", text, fresh=True), tmp_path)
    assert len(calls) == first_calls and fresh.best == first.best and "--fresh" in fresh.memory_note


def on_candidates(evaluate):
    """`evaluate` as `api.optimize` offers it: each candidate against the original, timed beside it
    (the reference's times with the candidate's), alone or with the original gated in the same gate."""
    alone, together = [], []

    def timed(c):
        e = evaluate(c.text)
        return replace(e, reference=ProfileSummary((SizeTiming({"N": N}, 100.0, 100.0, 0.4),), "memory")) \
            if e.measured else e

    def full(c):
        alone.append(c.text)
        return timed(c)

    def with_original(c):
        together.append(c.text)
        return timed(c)
    return OnCandidates(full, with_original), alone, together


def test_a_rerun_gates_and_times_the_original_only_with_the_remembered_rewrite(tmp_path):
    text, path, sp = gelu()
    evaluate, _ = made_up_gpu("Fake GPU A")
    oc, alone, together = on_candidates(evaluate)
    mem = memory(tmp_path / "tuning", "Fake GPU A", text)
    first = run(text, path, sp, oc, mem, tmp_path)
    assert first.improved and together == [] and alone[0] == text       # a search evaluates the original first
    alone.clear()
    second = run(text, path, sp, oc, mem, tmp_path)
    # one evaluation in all: the rewrite, the original gated with it and timed beside it (issue 29)
    assert alone == [] and together == [second.best]
    assert second.best == first.best and second.speedup == pytest.approx(first.speedup)
    assert second.baseline.passed and second.baseline.profile.sizes[0].baseline_us == 100.0
    assert second.baseline.gpu == "Fake GPU A" and second.rounds[0].adopted

    together.clear()
    block = launch_change.spec_in(source.parse(first.best), GELU).launch_dims({"N": N})[1][0]
    failing, _ = made_up_gpu("Fake GPU A", fail_block=block)
    oc2, alone, together = on_candidates(failing)
    again = run(text, path, sp, oc2, mem, tmp_path)       # the rewrite fails: the original alone, then the search
    assert together[0] == second.best and alone[0] == text and alone.count(text) == 1   # its readable form, then
    assert not set(together) & set(alone)                 # the chain's text: failures judged, not evaluated again
    assert again.rounds[0].outcome == "failed"
    assert again.baseline.measured and again.improved and again.best != first.best


def test_another_gpu_model_never_reuses_it_silently(tmp_path):
    text, path, sp = gelu()
    evaluate_a, _ = made_up_gpu("Fake GPU A")
    run(text, path, sp, evaluate_a, memory(tmp_path / "tuning", "Fake GPU A", text), tmp_path)
    evaluate_b, calls = made_up_gpu("Fake GPU B")
    mem_b = memory(tmp_path / "tuning", "Fake GPU B", text)
    other = run(text, path, sp, evaluate_b, mem_b, tmp_path)
    assert len(calls) > 2 and all(r.plan.source != "memory" for r in other.rounds)
    assert "remembered for Fake GPU A is not reused on Fake GPU B" in other.memory_note
    assert "not reused on Fake GPU B" in other.summary_markdown()
    assert sorted(json.loads(mem_b.file.read_text())["gpus"]) == ["Fake GPU A", "Fake GPU B"]
    # the kernel's content is the key: an edited kernel starts afresh
    edited = text.replace("gelu_forward_kernel1(", "gelu_forward_kernel1 (", 1)
    assert memory(tmp_path / "tuning", "Fake GPU A", edited).recall() == (None, "")


def test_a_remembered_chain_that_no_longer_holds_is_searched_afresh(tmp_path):
    text, path, sp = gelu()
    evaluate, _ = made_up_gpu("Fake GPU A")
    mem = memory(tmp_path / "tuning", "Fake GPU A", text)
    first = run(text, path, sp, evaluate, mem, tmp_path)
    block = launch_change.spec_in(source.parse(first.best), GELU).launch_dims({"N": N})[1][0]
    failing, calls = made_up_gpu("Fake GPU A", fail_block=block)   # the remembered best now fails the gate
    again = run(text, path, sp, failing, mem, tmp_path)
    assert again.rounds[0].plan.source == "memory" and again.rounds[0].outcome == "failed"
    assert "did not hold again (failed): searching afresh" in again.memory_note
    assert len(calls) > 2 and again.best != first.best and again.improved


@pytest.mark.parametrize("content", [b"\x00not json", json.dumps({"format": 1, "gpus": {"Fake GPU A": {
    "chain": [["rm -rf /", {}]], "speedup": 9.0}}}).encode(), b"{" * 300_000])
def test_an_unreadable_or_hostile_file_is_ignored(tmp_path, content):
    text, path, sp = gelu()
    evaluate, calls = made_up_gpu("Fake GPU A")
    mem = memory(tmp_path / "tuning", "Fake GPU A", text)
    mem.file.write_bytes(content)
    r = run(text, path, sp, evaluate, mem, tmp_path)
    assert r.improved and len(calls) > 2 and all(x.plan.source != "memory" for x in r.rounds)
    assert "ignored" in r.memory_note
    assert json.loads(mem.file.read_text())["gpus"]["Fake GPU A"]["run_id"] == r.run_id   # replaced


class GpuWorker(FakeWorker):
    """The counting fake as a GPU of one model."""

    def __call__(self, job, **kw):
        if isinstance(job, BackendsJob):
            return {"cpu": BackendStatus(True), "gpu": BackendStatus(True)}
        if isinstance(job, GpuFactsJob):
            return "name: Fake GPU A"
        if isinstance(job, DeviceJob):
            return {"name": "Fake GPU A"}
        return super().__call__(job, **kw)


def test_a_batch_reuses_the_remembered_tuning(tmp_path, monkeypatch, capsys):
    (tmp_path / ".git").mkdir()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    fake = GpuWorker("")
    import astra_cuda.execution.worker
    monkeypatch.setattr(astra_cuda.execution.worker, "run", fake)
    monkeypatch.chdir(tmp_path)
    args = ("optimize", "examples", "--backend", "gpu", "--rounds", "3", "--tune", "0", "--json")
    code, out, err = astra(capsys, *args)
    assert code == 0, err
    first = json.loads(out)["summary"]
    assert len(list((tmp_path / ".astra" / "tuning").glob("*.json"))) == 0   # 3 rounds: the search did not finish
    code, out, err = astra(capsys, "optimize", "examples", "--backend", "gpu", "--rounds", "20", "--tune", "0",
                           "--json")
    assert code == 0, err
    finished = json.loads(out)["summary"]
    assert len(list((tmp_path / ".astra" / "tuning").glob("*.json"))) == len(finished) == len(first) == 3
    fake.evaluated.clear()
    code, out, err = astra(capsys, "optimize", "examples", "--backend", "gpu", "--rounds", "20", "--json")
    assert code == 0, err
    again = json.loads(out)["summary"]
    # per kernel one evaluation: its remembered best in its readable form, the original gated with it
    assert len(fake.evaluated) == len(fake.with_original) == len(again)
    assert [s["speedup"] for s in again] == pytest.approx([s["speedup"] for s in finished])
