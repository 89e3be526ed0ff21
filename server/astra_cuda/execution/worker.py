"""Isolation: every compile and run of kernel code happens in a child process.

A kernel that hangs, faults (an illegal address poisons the whole CUDA context), calls
`__trap()`, or a CPU-backend build that segfaults takes down only its worker, which is
replaced; the CLI or language-server process never imports CuPy or holds a CUDA context.

    verdict = worker.run(jobs.CheckJob(...), timeout=60)    # a Verdict

A job is a `Job[T]`: a picklable value (a frozen dataclass; pickle names its class, so the
worker imports it — no job is named by a string) whose `run()` the worker calls, returning a
picklable `T`. Its exceptions come back re-raised in the parent
(AstraError, CompileError, LaunchError... with their messages and attributes); a hang becomes
WorkerTimeout, a dead worker WorkerCrashed, a cancelled job WorkerCancelled.

Workers are long-lived (`python -m astra_cuda.execution.worker`, the parent's interpreter), so per-process
caches (compiled modules, a CUDA context) stay warm between jobs — of one document: a job that runs a
document's kernel code in the worker's own process (`Job.owner`, the GPU backend's launches) gets a
worker that never ran another document's (`Pool._take`). A pool is thread-safe and
starts at most `size` workers; the language server calls it from several threads.

Protocol: length-prefixed pickles over the child's stdin and a private duplicate of its
stdout; the child's fd 1 is pointed at stderr so stray prints from user code cannot corrupt it.
"""
from __future__ import annotations

import atexit
import io
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

_HEADER = struct.Struct("<Q")

T = TypeVar("T", covariant=True)


class Job(Generic[T]):
    """Work for a worker process. A subclass is a frozen dataclass of what the work needs (picklable)
    and `run` does it inside the worker; `T` is what `Pool.run` and every executor return for it."""

    def run(self) -> T:
        raise NotImplementedError

    @property
    def name(self) -> str:
        """For messages: the job's class ('CheckJob')."""
        return type(self).__name__

    @property
    def owner(self) -> str | None:
        """The document whose kernel code this job runs inside the worker's own process (the GPU
        backend launches in the worker's CUDA context), or None: it runs no user code there (a
        probe; the CPU backend, whose launches each run in a fresh process of their own). A pool
        never gives a worker that ran one document's code a job of another document's."""
        return None


class WorkerError(Exception):
    """Base of the isolation errors; the message is fit to show a user."""


class WorkerTimeout(WorkerError):
    pass


class WorkerCrashed(WorkerError):
    pass


class WorkerCancelled(WorkerError):
    pass


class RemoteError(WorkerError):
    """A job raised an exception that could not travel back as itself."""


# ---- the parent side ---------------------------------------------------------------------

# What a worker may inherit: it compiles and runs kernels, never talks to an LLM, so it gets
# no keys — only these names (and prefixes), and never one that looks like a secret.
_ENV_NAMES = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
              "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
              "PYTHONHASHSEED", "SYSTEMROOT", "NUMBA_CACHE_DIR"}
_ENV_PREFIXES = ("LC_", "ASTRA_", "CUDA_", "CUPY_", "NVIDIA_", "NVRTC_", "OMP_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION",
                 "URL")  # a base URL may carry user:password@


def _inherited(name: str) -> bool:
    if any(w in name.upper() for w in _SECRET_WORDS):
        return False
    return name in _ENV_NAMES or name.startswith(_ENV_PREFIXES)


def _child_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if _inherited(k)}
    # Everything importable here is importable there (editable installs, pytest's rootdir...).
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class _Worker:
    def __init__(self, env: dict[str, str] | None, prefix: tuple[str, ...] = ()):
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "astra_cuda.execution.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=_child_env(env), start_new_session=True, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.stderr = cast(io.BufferedReader, self.proc.stderr)   # a pipe with buffering: has read1
        self.jobs = 0
        self.owner: str | None = None   # the document whose code ran here (Job.owner), once one did
        self._stderr_tail = b""
        self._tail_lock = threading.Lock()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _drain_stderr(self) -> None:
        # Keep the end of what the child says on stderr: it explains crashes.
        try:
            for chunk in iter(lambda: self.stderr.read1(4096), b""):
                with self._tail_lock:
                    self._stderr_tail = (self._stderr_tail + chunk)[-4000:]
        except (OSError, ValueError):
            pass

    def stderr_tail(self) -> str:
        with self._tail_lock:
            return self._stderr_tail.decode(errors="replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self.stdin.write(_HEADER.pack(len(data)) + data)
        self.stdin.flush()

    def recv(self, deadline: float, cancel: threading.Event | None) -> Any:
        fd = self.stdout.fileno()
        buf = bytearray()
        need = _HEADER.size
        header_done = False
        while True:
            if cancel is not None and cancel.is_set():
                raise WorkerCancelled("cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout("timed out")
            ready, _, _ = select.select([fd], [], [], min(left, 0.05))
            if not ready:
                continue
            chunk = os.read(fd, max(need - len(buf), 1 << 16) if header_done else need - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
            if not header_done and len(buf) >= _HEADER.size:
                (size,) = _HEADER.unpack(bytes(buf[:_HEADER.size]))
                del buf[:_HEADER.size]
                need, header_done = size, True
            if header_done and len(buf) >= need:
                return pickle.loads(bytes(buf[:need]))

    def kill(self) -> None:
        """SIGKILL the worker and everything it started (its own session)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass

    def death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        time.sleep(0.05)  # let the stderr reader catch the last words
        tail = self.stderr_tail()
        return how + (f": {tail.splitlines()[-1]}" if tail else "")


class Pool:
    """At most `size` worker processes, shared by threads. `env` is added to each child's
    environment (e.g. CUDA_VISIBLE_DEVICES)."""

    def __init__(self, size: int = 1, env: dict[str, str] | None = None, name: str = "default",
                 prefix: tuple[str, ...] = ()):
        self.size = max(1, size)
        self.env = env
        self.prefix = tuple(prefix)  # e.g. ('compute-sanitizer', '--tool', 'memcheck')
        self.name = name
        self._idle: list[_Worker] = []
        self._slots = threading.BoundedSemaphore(self.size)
        self._lock = threading.Lock()
        self._busy: set[_Worker] = set()
        self._closed = False
        self.replaced = 0  # workers killed or lost and replaced (for tests and telemetry)

    def _take(self, owner: str | None) -> _Worker:
        """An idle worker for a job of `owner`: one that ran only that document's code, else one
        that ran no document's (which becomes `owner`'s); a job of no document takes any. Else a
        fresh worker, the least recently used idle one of another document killed first when the
        pool is full: the GPU backend launches in the worker's own CUDA context, so a process that
        ran one document's kernels never runs another's (issue 30: a kernel writing past its
        buffers, or a context it left, would reach the next document's launches)."""
        evicted = None
        with self._lock:
            self._idle = [w for w in self._idle if w.alive()]
            fits = [w for w in self._idle if w.owner == owner and owner is not None] or \
                [w for w in self._idle if w.owner is None] or ([] if owner is not None else self._idle)
            if fits:
                w = fits[-1]   # the most recently used of them
                self._idle.remove(w)
                w.owner = w.owner or owner
                self._busy.add(w)
                return w
            if self._idle and len(self._idle) + len(self._busy) >= self.size:
                evicted = self._idle.pop(0)
        if evicted is not None:
            evicted.kill()
        w = _Worker(self.env, self.prefix)
        w.owner = owner
        with self._lock:
            self._busy.add(w)
        return w

    def _give(self, w: _Worker, outcome: str) -> None:
        """outcome: 'healthy' (reuse), 'retired' (the job asked for a fresh process next time)
        or 'failed' (killed or lost: counted in `replaced`)."""
        with self._lock:
            self._busy.discard(w)
            if outcome == "healthy" and w.alive() and not self._closed:
                self._idle.append(w)
                return
            if outcome == "failed":
                self.replaced += 1
        w.kill()

    def run(self, job: Job[T], *, timeout: float = 60.0, cancel: threading.Event | None = None) -> T:
        if not isinstance(job, Job):
            raise TypeError(f"a worker runs a Job, not {type(job).__name__}")
        func = job.name
        if self._closed:
            raise WorkerError("the worker pool is closed")
        deadline = time.monotonic() + timeout
        # Waiting for a free worker counts against the timeout too, but never cancels silently.
        while not self._slots.acquire(timeout=0.05):
            if cancel is not None and cancel.is_set():
                raise WorkerCancelled(f"{func}: cancelled before it started")
            if time.monotonic() > deadline:
                raise WorkerTimeout(f"{func}: no worker became free within {timeout:g} s")
        try:
            w = self._take(job.owner)
            outcome = "failed"
            try:
                w.send(job)
                status, value, retire = w.recv(deadline, cancel)
                outcome = "retired" if retire else "healthy"
            except WorkerTimeout:
                raise WorkerTimeout(f"{func}: timed out after {timeout:g} s (the worker was killed; "
                                    f"a kernel that never finishes?)") from None
            except WorkerCancelled:
                raise WorkerCancelled(f"{func}: cancelled (the worker was killed)") from None
            except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
                raise WorkerCrashed(f"{func}: the worker process died ({w.death_reason()}); "
                                    f"it has been replaced") from None
            finally:
                self._give(w, outcome)
        finally:
            self._slots.release()
        if status == "ok":
            result: T = value
            return result
        raise _rebuild(value)

    def warm(self) -> None:
        """Start a worker now (so the first job does not pay the start-up)."""
        self.run(Ping(), timeout=60)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = self._idle + list(self._busy)
            self._idle = []
        for w in workers:
            w.kill()


def _rebuild(err: dict[str, Any]) -> BaseException:
    exc = None
    if err.get("pickled") is not None:
        try:
            exc = pickle.loads(err["pickled"])
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = RemoteError(f"{err['type']}: {err['message']}")
    try:
        exc.remote_traceback = err.get("traceback", "")  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return exc


_pools: dict[str, Pool] = {}
_pools_lock = threading.Lock()


def pool(name: str = "default", size: int | None = None, env: dict[str, str] | None = None,
         prefix: tuple[str, ...] = ()) -> Pool:
    """The named process-wide pool (created on first use; `size` defaults to
    $ASTRA_WORKERS or 1; `prefix` wraps the worker command, e.g. in compute-sanitizer)."""
    with _pools_lock:
        p = _pools.get(name)
        if p is None or p._closed:
            n = size if size is not None else int(os.environ.get("ASTRA_WORKERS", "1") or 1)
            p = _pools[name] = Pool(n, env=env, name=name, prefix=prefix)
        return p


def run(job: Job[T], *, timeout: float = 60.0, cancel: threading.Event | None = None,
        pool_name: str = "default") -> T:
    """Run `job` in a worker of the named pool. See the module docstring."""
    return pool(pool_name).run(job, timeout=timeout, cancel=cancel)


def run_alone(job: Job[T], *, prefix: tuple[str, ...], timeout: float = 60.0) -> T:
    """Run `job` in a worker of its own started under `prefix` (a tool that reports once its target
    has exited, as Nsight Compute writes its report), which then ends as a worker does when its
    parent is done with it — its input closed, so it returns and exits normally — and is waited
    for, within `timeout` in all; killed (with everything it started) beyond, or when anything
    fails."""
    func = job.name
    deadline = time.monotonic() + timeout
    w = _Worker(None, prefix)
    try:
        try:
            w.send(job)
            status, value, _ = w.recv(deadline, None)
            w.stdin.close()
            w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except (WorkerTimeout, subprocess.TimeoutExpired):
            raise WorkerTimeout(f"{func}: timed out after {timeout:g} s (the worker was killed)") from None
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            raise WorkerCrashed(f"{func}: the worker process died ({w.death_reason()})") from None
    finally:
        w.kill()
    if status == "ok":
        result: T = value
        return result
    raise _rebuild(value)


def shutdown() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for p in pools:
        p.close()


atexit.register(shutdown)


# ---- the child side ----------------------------------------------------------------------

_retire = False


def retire_after_reply() -> None:
    """Called by a job (in the worker) whose process state is no longer trustworthy, e.g. a
    CUDA context lost to an illegal address: the worker exits after sending this job's reply,
    and the pool starts a fresh one for the next job."""
    global _retire
    _retire = True


@dataclass(frozen=True)
class Ping(Job[dict[str, Any]]):
    """Starts a worker (`Pool.warm`): its pid and Python version."""

    def run(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "python": sys.version.split()[0]}


def _error_reply(exc: BaseException) -> dict[str, Any]:
    try:
        pickled = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        pickled = None
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc),
            "traceback": traceback.format_exc(), "pickled": pickled}


def _watch_parent(parent: int) -> None:
    # If the parent dies while a job runs (a hang), do not linger as an orphan.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _main() -> None:
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # user code printing to stdout lands in stderr, not in the protocol
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    def read_exact(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = proto_in.read(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return bytes(out)

    while True:
        try:
            (size,) = _HEADER.unpack(read_exact(_HEADER.size))
            data = read_exact(size)
        except EOFError:
            return
        func = "the job"
        try:
            job = pickle.loads(data)   # imports the job's module: a failure is the job's error
            func = job.name
            reply = ("ok", job.run(), False)
        except (Exception, SystemExit) as exc:  # everything goes back to the parent
            reply = ("err", _error_reply(exc), False)
        reply = reply[:2] + (_retire,)
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an unpicklable result
            data = pickle.dumps(("err", {"type": "TypeError", "message": f"{func} returned something that "
                                         f"cannot be sent back: {exc}", "traceback": "", "pickled": None},
                                 _retire))
        proto_out.write(_HEADER.pack(len(data)) + data)
        if _retire:
            proto_out.flush()
            os._exit(0)


if __name__ == "__main__":
    # Run as the module `astra_cuda.execution.worker` (not `__main__`), so jobs that import it share its state.
    from astra_cuda.execution import worker as _worker_module
    _worker_module._main()
