"""The Ray executor on a real local Ray runtime (one per module, 2 CPUs) with the CPU backend:
a single run, a batch over examples/, a Ray worker killed mid-run (once: retried elsewhere;
twice: an infrastructure error, resumable, nothing measured lost), and results equal to the
local executor's. Runs use the quick gate and one round to stay fast."""
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from astra_cuda import api  # noqa: E402
from astra_cuda.cli import batch  # noqa: E402
from astra_cuda.execution.executors.ray_cluster import RayExecutor  # noqa: E402
from astra_cuda.session import Session  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "silu_and_mul"
OPTIONS = dict(rounds=1, backend="cpu", quick=True)


@pytest.fixture(scope="module")
def ray_ex():
    ex = RayExecutor(None, num_cpus=2, num_gpus=0)
    yield ex
    ex.close()


@pytest.fixture
def ws(tmp_path):
    """A workspace (it has .git) with a copy of the examples."""
    (tmp_path / ".git").mkdir()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """silu_and_mul optimized by the local executor (the reference every Ray run must equal)."""
    root = tmp_path_factory.mktemp("local")
    (root / ".git").mkdir()
    shutil.copytree(ROOT / "examples", root / "examples")
    return optimize(root / "examples" / "silu_and_mul.cu")


@pytest.fixture
def on(ray_ex):
    """The options of a run in a session on a given executor."""
    def use(ex):
        return {**OPTIONS, "session": Session(ex)}
    return use


def outcome(res) -> dict:
    """What must not depend on where a run was evaluated."""
    return {"improved": res.improved, "best": res.best, "cases": res.best_eval.check.cases,
            "baseline": (res.baseline.check.passed, res.baseline.check.cases),
            "rounds": [(r.batch, r.plan.idea if r.plan else None, r.outcome, r.evaluation.check.passed
                        if r.evaluation else None, r.evaluation.check.cases if r.evaluation else None)
                       for r in res.rounds]}


def count_jobs(ex) -> list[str]:
    """Record the jobs `ex` runs from now on (`del ex.run` restores it)."""
    calls, real = [], ex.run

    def counting(job, **kw):
        calls.append(job.name)
        return real(job, **kw)
    ex.run = counting
    return calls


def optimize(path: Path, **kw):
    return api.optimize(api.open_file(str(path)), KERNEL, **{**OPTIONS, **kw})


def test_describe_and_probe(ray_ex):
    d = ray_ex.describe()
    assert d["kind"] == "ray" and d["address"] == "local" and d["nodes"] == 1 and d["gpus"] == 0 and d["cpus"] == 2
    st = ray_ex.statuses()
    assert st["cpu"].available and not st["gpu"].available and "no GPU" in st["gpu"].reason
    assert ray_ex.capacity("cpu") == 2


def test_single_run_equals_local_executor(ws, on, ray_ex, local):
    f = ws / "examples" / "silu_and_mul.cu"
    remote = optimize(f, **on(ray_ex))
    assert outcome(remote) == outcome(local)
    assert local.baseline.passed and local.rounds
    host = ray_ex.slots("cpu")[0]["host"]
    assert remote.baseline.node.startswith(host) and all(
        r.evaluation.node.startswith(host) for r in remote.rounds if r.evaluation)
    assert remote.baseline.gpu == ""  # the CPU backend: no GPU to record


def test_batch_over_examples_equals_one_by_one(ws, on, ray_ex, local, monkeypatch):
    monkeypatch.chdir(ws)
    opts = on(ray_ex)
    rows = []
    res = batch.run(["examples"], options=opts, on_row=lambda r: rows.append(r.state), report=str(ws / "rep"))
    got = {r.target.kernel: r for r in res.rows}
    assert set(got) == {"silu_and_mul", "fused_add_rmsnorm_kernel", "merge_attn_states"}
    assert all(r.state == "done" for r in res.rows), [(r.target.kernel, r.message) for r in res.rows]
    assert "running" in rows and res.executor["kind"] == "ray"
    # identical to running it by itself (here, on the local executor)
    assert outcome(got["silu_and_mul"].result) == outcome(local)
    page = Path(res.report_path).read_text()
    assert all(k in page for k in got) and "Ray (local" in page
    manifest = json.loads(Path(res.manifest).read_text())
    assert [t["state"] for t in manifest["targets"]] == ["done"] * 3
    # resuming a finished batch reports it without evaluating anything again
    calls = count_jobs(ray_ex)
    try:
        again = batch.run(["examples"], resume="last", options=opts)
    finally:
        del ray_ex.run
    assert [outcome(r.result) for r in again.rows] == [outcome(r.result) for r in res.rows]
    assert calls.count("EvaluateJob") == 0


def _kill_busy_slot(ex: RayExecutor, spared: set[int], stop: threading.Event, killed: list[int], times: int):
    """Kill the actor process of a busy slot (not one killed before), `times` times."""
    while not stop.is_set() and len(killed) < times:
        for s in ex.slots("cpu"):
            if s["busy"] and s["pid"] not in spared and s["pid"] not in killed:
                time.sleep(0.3)  # mid-evaluation
                os.kill(s["pid"], signal.SIGKILL)
                killed.append(s["pid"])
                break
        time.sleep(0.02)


def test_killed_ray_worker_is_retried_elsewhere(ws, on, ray_ex, local):
    f = ws / "examples" / "silu_and_mul.cu"
    opts = on(ray_ex)
    ray_ex.capacity("cpu")
    stop, killed = threading.Event(), []
    t = threading.Thread(target=_kill_busy_slot, args=(ray_ex, set(), stop, killed, 1), daemon=True)
    t.start()
    res = optimize(f, **opts)
    stop.set()
    t.join()
    assert len(killed) == 1
    assert res.error is None and not res.interrupted
    assert outcome(res) == outcome(local)   # the lost evaluation was made again, elsewhere
    deadline = time.monotonic() + 120
    while len(ray_ex.slots("cpu")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = {s["pid"] for s in ray_ex.slots("cpu")}
    assert killed[0] not in pids and len(pids) == 2   # replaced


def test_lost_twice_is_an_infrastructure_error_and_resumes(ws, on, ray_ex, local):
    f = ws / "examples" / "silu_and_mul.cu"
    opts = on(ray_ex)
    ray_ex.capacity("cpu")
    # the baseline is measured, then both tries of the round's candidate are lost
    stop, killed = threading.Event(), []
    seen = []

    def progress(ev):
        seen.append(ev.step)
        if ev.step == "code" and not killed:
            threading.Thread(target=_kill_busy_slot, args=(ray_ex, set(), stop, killed, 2), daemon=True).start()
    res = api.optimize(api.open_file(str(f)), KERNEL, progress=progress, **opts)
    stop.set()
    assert len(killed) == 2
    assert res.interrupted and "infrastructure error" in res.error and "not a verdict" in res.error
    assert res.rounds == [] and res.baseline.passed          # never a candidate failure
    run_dir = Path(res.run_dir)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert not list(run_dir.glob("round-*"))
    assert len(list((run_dir / "measured").glob("*.json"))) == 1   # the baseline, kept
    # resumed: the baseline is not measured again, the round is made, the result is the local one's
    calls = count_jobs(ray_ex)
    try:
        again = api.optimize(api.open_file(str(f)), KERNEL, resume=res.run_id, **{**opts, "rounds": None})
    finally:
        del ray_ex.run
    # the round's candidate and the readable form of the best (offline/style.py), never the baseline again
    assert calls.count("EvaluateJob") == 2
    assert outcome(again) == outcome(local)
