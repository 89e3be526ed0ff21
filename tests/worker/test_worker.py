"""Isolation: hangs are killed, crashes survived, cancellation, threads."""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
import types

import numpy as np
import pytest

from astra_cuda.execution import worker
from astra_cuda.backends.base import CompileError
from astra_cuda.errors import AstraError

import jobs
from jobs import Call


@pytest.fixture
def pool():
    p = worker.Pool(1, name="test")
    yield p
    p.close()


def test_job_result_and_warm_reuse(pool):
    a = pool.run(Call(jobs.echo, {"x": 1}), timeout=30)
    b = pool.run(Call(jobs.echo, [1, 2]), timeout=30)
    assert a["payload"] == {"x": 1} and b["payload"] == [1, 2]
    assert a["pid"] == b["pid"]  # the same warm worker
    assert pool.run(Call(jobs.count), timeout=30) == 1
    assert pool.run(Call(jobs.count), timeout=30) == 2  # per-process state survives between jobs


def test_hang_killed_and_next_job_works(pool):
    before = pool.run(Call(jobs.echo), timeout=30)["pid"]
    t0 = time.monotonic()
    with pytest.raises(worker.WorkerTimeout, match="timed out after 1 s"):
        pool.run(Call(jobs.spin), timeout=1.0)
    assert time.monotonic() - t0 < 30  # a hang guard only: the error above names the 1 s limit
    after = pool.run(Call(jobs.echo), timeout=30)["pid"]
    assert after != before and pool.replaced == 1


@pytest.mark.parametrize("job, reason", [(jobs.segfault, "SIGSEGV"), (jobs.abort, "SIGABRT"),
                                         (jobs.hard_exit, "status 7")])
def test_crash_survived(pool, job, reason):
    with pytest.raises(worker.WorkerCrashed, match=reason) as info:
        pool.run(Call(job), timeout=30)
    if job == jobs.abort:
        assert "simulated CUDA context poisoned" in str(info.value)
    assert pool.run(Call(jobs.echo, 5), timeout=30)["payload"] == 5


def _job_of_a_module_only_here(monkeypatch) -> worker.Job[None]:
    module = types.ModuleType("no_such_module")

    @dataclasses.dataclass(frozen=True)
    class Lost(worker.Job[None]):
        def run(self) -> None:
            return None

    Lost.__module__, Lost.__qualname__ = module.__name__, "Lost"
    module.Lost = Lost
    monkeypatch.setitem(sys.modules, module.__name__, module)   # pickled here; the worker has no such module
    return Lost()


def test_errors_come_back_as_themselves(pool, monkeypatch):
    with pytest.raises(AstraError, match="no harness spec") as info:
        pool.run(Call(jobs.bad_input), timeout=30)
    assert info.value.line == 3 and info.value.exit_code == 2
    with pytest.raises(CompileError) as info:
        pool.run(Call(jobs.compile_error), timeout=30)
    assert "identifier" in info.value.log
    with pytest.raises(ValueError, match="plain bug") as info:
        pool.run(Call(jobs.value_error), timeout=30)
    assert "value_error" in info.value.remote_traceback
    with pytest.raises(worker.RemoteError, match="cannot be sent back"):
        pool.run(Call(jobs.unpicklable), timeout=30)
    with pytest.raises(ModuleNotFoundError):   # a job whose module the worker cannot import
        pool.run(_job_of_a_module_only_here(monkeypatch), timeout=30)
    with pytest.raises(TypeError, match="not str"):
        pool.run("jobs:echo", timeout=30)   # a job is a value, not a name
    # None of these killed the worker.
    assert pool.replaced == 0


def test_stdout_noise_does_not_break_protocol(pool):
    assert pool.run(Call(jobs.noisy), timeout=30) == "still fine"
    arr = pool.run(Call(jobs.big, 3_000_000), timeout=60)
    assert arr.shape == (3_000_000,) and arr[-1] == 2_999_999 and arr.dtype == np.float32


def test_cancellation_kills_the_running_job(pool):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(worker.WorkerCancelled):
        pool.run(Call(jobs.hang), timeout=60, cancel=cancel)
    assert time.monotonic() - t0 < 30  # well before the job's own 60 s limit: the cancel stopped it
    assert pool.run(Call(jobs.echo, 1), timeout=30)["payload"] == 1


def _warm_two(p):
    """Start both workers first, so timings below measure jobs, not interpreter start-up."""
    ts = [threading.Thread(target=p.run, args=(Call(jobs.sleep, 0.5),), kwargs={"timeout": 60}) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_concurrency_from_threads():
    p = worker.Pool(2, name="threads")
    try:
        _warm_two(p)
        results, errors = [], []

        def call(i):
            try:
                results.append(p.run(Call(jobs.span, 0.3), timeout=30))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(results) == 6
        assert len({pid for pid, _, _ in results}) == 2  # never more than `size` workers
        # They really ran side by side: some job of one worker overlaps a job of the other.
        assert any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in results for b in results)
    finally:
        p.close()


def test_a_hang_in_one_thread_does_not_block_others():
    p = worker.Pool(2, name="mixed")
    try:
        _warm_two(p)
        out, stop = {}, threading.Event()
        t = threading.Thread(target=lambda: out.setdefault("hang", pytest.raises(
            worker.WorkerCancelled, p.run, Call(jobs.hang), timeout=120, cancel=stop)))
        t.start()
        time.sleep(0.2)
        assert p.run(Call(jobs.echo, "ok"), timeout=30)["payload"] == "ok"
        assert t.is_alive()  # answered while the hung job still holds the other worker
        stop.set()
        t.join()
    finally:
        p.close()


def test_parent_never_imports_cupy(pool):
    import sys
    pool.run(Call(jobs.echo), timeout=30)
    assert "cupy" not in sys.modules


def test_retire_after_reply_gives_a_fresh_worker(pool):
    pid = pool.run(Call(jobs.poisoned), timeout=30)
    assert pool.run(Call(jobs.echo), timeout=30)["pid"] != pid
    assert pool.replaced == 0


def test_prefix_wraps_the_worker_command():
    # How the GPU backend runs workers under compute-sanitizer; `env` stands in for it here.
    p = worker.Pool(1, name="prefixed", prefix=("env", "ASTRA_WRAPPED=yes"))
    try:
        assert p.run(Call(jobs.getenv, "ASTRA_WRAPPED"), timeout=30) == "yes"
    finally:
        p.close()


def test_run_alone_ends_its_worker_normally_and_waits_for_the_tool(tmp_path):
    """A tool that reports at its target's exit (Nsight Compute) sees the worker exit normally —
    its exit hooks run — and is waited for before `run_alone` returns."""
    left, status = tmp_path / "left", tmp_path / "status"
    tool = ("sh", "-c", f'"$@"; echo $? > {status}', "sh")
    pid = worker.run_alone(Call(jobs.exit_leaves, str(left)), prefix=tool, timeout=60)
    assert pid > 0 and left.read_text() == "exited normally" and status.read_text().strip() == "0"
    with pytest.raises(AstraError, match="has no harness spec"):
        worker.run_alone(Call(jobs.bad_input), prefix=("env",), timeout=60)
    with pytest.raises(worker.WorkerTimeout, match="timed out after 1 s"):
        worker.run_alone(Call(jobs.spin), prefix=("env",), timeout=1.0)
