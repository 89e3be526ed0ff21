"""Resuming and listing logged runs from the command line (`astra optimize --resume / --list-runs`).

The CLI runs in this process with the worker replaced by a counting evaluator, so the tests can
prove what was (not) evaluated again; the error cases also run through the real entry point."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_cuda import cli
from astra_cuda.execution.jobs import BackendsJob, BackendStatus, EvaluateJob
from astra_cuda.agents import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.agents.runlog import RunLog

from agent_helpers import ROOT, example

KERNEL = "silu_and_mul"


class FakeWorker:
    """Stands in for `astra_cuda.execution.worker.run`: the CPU backend is 'available' and every candidate passes;
    where `measured`, each line a rewrite adds makes it 10% faster (deterministic, from the text)."""

    def __init__(self, original: str):
        self.original = original
        self.evaluated: list[str] = []
        self.with_original: list[str] = []   # evaluated with the original in the same gate (EvaluateJob.with_original)
        self.measured = True
        self.interrupt_after: int | None = None   # raise KeyboardInterrupt (Ctrl-C) after this many

    def __call__(self, job, **_):
        if isinstance(job, BackendsJob):
            return {"cpu": BackendStatus(True), "gpu": BackendStatus(False, "no GPU in tests")}
        assert isinstance(job, EvaluateJob), job
        if self.interrupt_after is not None and len(self.evaluated) >= self.interrupt_after:
            raise KeyboardInterrupt
        text = job.text
        self.evaluated.append(text)
        if job.with_original:
            self.with_original.append(text)
        check = Check(True, "passed 12 cases on cpu", "", 12, "passed")
        if not self.measured:
            return Evaluation(check, speed_note="speed not measured on the CPU backend")
        new_lines = len(set(text.splitlines()) - set(self.original.splitlines()))
        us = 100.0 / (1.0 + 0.1 * new_lines)
        sizes = {"num_tokens": 64, "d": 4096}
        return Evaluation(check, ProfileSummary((SizeTiming(sizes, 100.0, us),)),
                          reference=ProfileSummary((SizeTiming(sizes, 100.0, 100.0),)))


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A workspace (it has .git) holding the silu_and_mul example, and the fake worker."""
    (tmp_path / ".git").mkdir()
    text, _, _ = example("silu_and_mul")
    f = tmp_path / "silu.cu"
    f.write_text(text)
    fake = FakeWorker(text)
    import astra_cuda.execution.worker
    monkeypatch.setattr(astra_cuda.execution.worker, "run", fake)
    monkeypatch.delenv("ASTRA_MODEL", raising=False)
    monkeypatch.delenv("ASTRA_BASE_URL", raising=False)
    return f, fake


def astra(capsys, *args):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def optimize_json(capsys, f, *args):
    code, out, err = astra(capsys, "optimize", f, "--kernel", KERNEL, "--backend", "cpu", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_resume_continues_where_it_stopped(ws, capsys):
    f, fake = ws
    first = optimize_json(capsys, f, "--rounds", "1")
    assert len(first["rounds"]) == 1 and len(fake.evaluated) == 3          # the original + 1 candidate + its readable form
    assert first["stopped"] == "all 1 rounds done"
    before = list(fake.evaluated)
    fake.evaluated.clear()

    again = optimize_json(capsys, f, "--rounds", "3", "--resume", first["run_id"])
    assert again["run_id"] == first["run_id"]
    assert [r["index"] for r in again["rounds"]] == [1, 2, 3]
    assert again["rounds"][:1] == first["rounds"]                             # replayed as logged
    assert again["baseline"] == first["baseline"]
    assert not set(fake.evaluated) & set(before)                             # nothing evaluated twice
    assert len(fake.evaluated) == 3                                          # the new rounds' candidates + the readable form
    assert again["rounds"][1]["plan"]["idea"] != first["rounds"][0]["plan"]["idea"]
    assert again["speedup"] > first["speedup"] > 1.0                         # planned from the kept best
    assert again["rounds"][1]["base_hash"] == first["rounds"][0]["candidate_hash"]
    meta = json.loads((Path(again["run_dir"]) / "run.json").read_text())
    assert meta["status"] == "done" and meta["rounds"] == 3
    assert len(list(Path(again["run_dir"]).glob("round-*"))) == 3


def test_resume_last_of_an_interrupted_run(ws, capsys):
    f, fake = ws
    fake.interrupt_after = 2                  # Ctrl-C while round 2's candidate is being evaluated
    code, _, err = astra(capsys, "optimize", f, "--kernel", KERNEL, "--backend", "cpu", "--rounds", "3")
    assert code == 130 and "interrupted" in err
    (run_dir,) = (f.parent / ".astra" / "runs").iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    logged = fake.evaluated[:]
    fake.interrupt_after, fake.evaluated = None, []

    code, out, _ = astra(capsys, "optimize", f, "--kernel", KERNEL, "--list-runs")
    assert code == 0 and run_dir.name in out and "unfinished" in out and "1/3" in out

    r = optimize_json(capsys, f, "--resume", "last")              # no --rounds: the run's own total
    assert r["run_id"] == run_dir.name and [x["index"] for x in r["rounds"]] == [1, 2, 3]
    assert not set(fake.evaluated) & set(logged) and len(fake.evaluated) == 3   # 2 candidates + the readable form


def test_report_of_a_finished_run_evaluates_nothing(ws, capsys, tmp_path):
    f, fake = ws
    first = optimize_json(capsys, f, "--rounds", "2")
    fake.evaluated.clear()
    report_dir = tmp_path / "report"
    code, out, err = astra(capsys, "optimize", f, "--kernel", KERNEL, "--backend", "cpu",
                           "--resume", "last", "--rounds", "2", "--report", report_dir)
    assert code == 0, err
    assert fake.evaluated == []                                     # the cache was seeded from the log
    html = (report_dir / f"astra-{KERNEL}.html").read_text()
    for r in first["rounds"]:
        assert r["plan"]["title"] in html
    assert f"{first['speedup']:.3f}× geomean" in html and f"{first['speedup']:.3f}× geomean" in out
    assert "all 2 rounds done" in out and first["run_id"] in out

    again = optimize_json(capsys, f, "--resume", first["run_id"])   # same, without --rounds
    assert fake.evaluated == [] and again["rounds"] == first["rounds"] and again["best"] == first["best"]


def test_a_run_that_stopped_early_is_reported_not_continued(ws, capsys):
    f, fake = ws
    first = optimize_json(capsys, f, "--rounds", "8")                 # the offline ideas run out first
    assert first["stopped"].startswith("nothing left to try") and len(first["rounds"]) < 8
    # why no idea was left, each idea with its reason (the suite's report reads it)
    reasons = first["passed_over"]
    assert any(w.startswith("vectorize: ") for w in reasons) and all(": " in w for w in reasons)
    done = len(first["rounds"])
    fake.evaluated.clear()
    again = optimize_json(capsys, f, "--resume", "last")
    assert fake.evaluated == [] and again["rounds"] == first["rounds"]
    code, out, _ = astra(capsys, "optimize", f, "--list-runs")
    assert f"{done}/8" in out                                          # what was asked is kept


def test_resume_and_write(ws, capsys):
    f, fake = ws
    text = f.read_text()
    first = optimize_json(capsys, f, "--rounds", "1")
    r = optimize_json(capsys, f, "--rounds", "2", "--resume", "last", "--write")
    assert r["improved"] and f.read_text() != text
    assert f.read_text() == (Path(r["run_dir"]) / "best.cu").read_text()
    assert first["run_id"] == r["run_id"]
    # The file now holds the run's best: resuming again would start from a text no longer there.
    code, _, err = astra(capsys, "optimize", f, "--kernel", KERNEL, "--backend", "cpu", "--resume", "last")
    assert code == 2 and "best version (written with --write)" in err


def _other_kernel_run(f: Path) -> str:
    """A logged run of another kernel of the same file (as a second `optimize -k other` leaves)."""
    log = RunLog(f.parent / ".astra" / "runs" / "20260101-000000-other-abcdef")
    log.start({"kernel": "other", "path": str(f), "mode": "offline", "rounds": 1, "started": time.time(),
               "status": "done"}, f.read_text())
    return log.dir.name


@pytest.mark.parametrize("case", ["unknown", "other_kernel", "other_file", "changed", "too_few_rounds",
                                  "other_team", "last_without_runs"])
def test_resume_errors_exit_2_and_write_nothing(ws, capsys, case):
    f, fake = ws
    run_id = optimize_json(capsys, f, "--rounds", "2")["run_id"] if case != "last_without_runs" else None
    args = ["--resume", run_id]
    if case == "unknown":
        args, needle = ["--resume", "20990101-nope"], "no run '20990101-nope'"
    elif case == "other_kernel":
        args, needle = ["--resume", _other_kernel_run(f)], "optimized kernel 'other', not 'silu_and_mul'"
    elif case == "other_file":
        g = f.parent / "other.cu"
        g.write_text(f.read_text().replace("silu", "silu ") + "\n// another file\n")
        run = f.parent / ".astra" / "runs" / run_id
        meta = json.loads((run / "run.json").read_text())
        meta["path"] = str(g)
        (run / "run.json").write_text(json.dumps(meta))
        needle = f"run {run_id} optimized {g}, not {f}"
    elif case == "changed":
        f.write_text(f.read_text().replace("silu", "silu_", 1))
        needle = "changed since run"
    elif case == "too_few_rounds":
        args += ["--rounds", "1"]
        needle = "has done 2 rounds already"
    elif case == "other_team":
        args += ["--llm", "openai", "--model", "some-model"]
        needle = "made by the offline team: resume it with --llm offline"
    else:
        args, needle = ["--resume", "last"], "no logged run of silu_and_mul"
    fake.evaluated.clear()
    before = snapshot(f.parent)
    code, out, err = astra(capsys, "optimize", f, "--kernel", KERNEL, "--backend", "cpu", *args)
    assert code == 2 and needle in err, err
    assert fake.evaluated == [] and snapshot(f.parent) == before
    if case == "unknown":
        assert f"runs of {f}: {run_id} (silu_and_mul, done)" in err


def test_unknown_run_through_the_real_entry_point(tmp_path):
    (tmp_path / ".git").mkdir()
    f = tmp_path / "silu.cu"
    f.write_text(example("silu_and_mul")[0])
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    r = subprocess.run([sys.executable, "-m", "astra_cuda", "optimize", str(f), "--kernel", KERNEL,
                        "--resume", "../../etc"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "no run '../../etc'" in r.stderr and "no logged runs of" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / ".astra").exists()


def test_list_runs_text_and_json(ws, capsys, monkeypatch):
    f, fake = ws
    code, out, _ = astra(capsys, "optimize", f, "--kernel", KERNEL, "--list-runs")
    assert code == 0 and "no logged optimize runs" in out
    code, out, _ = astra(capsys, "optimize", f, "--list-runs", "--json")
    assert code == 0 and json.loads(out) == []

    measured = optimize_json(capsys, f, "--rounds", "2")
    fake.measured = False
    monkeypatch.chdir(f.parent)                  # a run started with a relative path is found too
    unmeasured = optimize_json(capsys, Path("silu.cu"), "--rounds", "1")
    other = _other_kernel_run(f)

    code, out, _ = astra(capsys, "optimize", f, "--kernel", KERNEL, "--list-runs")
    assert code == 0 and measured["run_id"] in out and unmeasured["run_id"] in out and other not in out
    assert f"{measured['speedup']:.3f}×" in out and "not measured" in out and "2/2" in out and "1/1" in out
    monkeypatch.chdir(ROOT)
    code, out, _ = astra(capsys, "optimize", f, "--list-runs", "--json")   # all kernels, from elsewhere
    runs = json.loads(out)
    assert code == 0 and {r["id"] for r in runs} == {measured["run_id"], unmeasured["run_id"], other}
    by_id = {r["id"]: r for r in runs}
    m = by_id[measured["run_id"]]
    assert m["kernel"] == KERNEL and m["status"] == "done" and m["rounds_done"] == 2 and m["rounds_asked"] == 2
    assert abs(m["speedup"] - measured["speedup"]) < 1e-9 and m["mode"] == "offline"
    assert by_id[unmeasured["run_id"]]["speedup"] is None and by_id[unmeasured["run_id"]]["note"] == "not measured"
    assert [r["id"] for r in runs][-1] == other      # oldest first... `other` was started last
