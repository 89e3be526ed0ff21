"""The Ray executor: evaluations on a Ray cluster (or a Ray runtime started here).

Each evaluation slot is a Ray actor (`Slot`) holding its own `astra_cuda.execution.worker` pool of one worker:
the actor receives a job and runs it in that worker process exactly as the local pool would, so
the sandbox, the timeouts and "a faulting kernel kills only its own process" are the same code.
A crash of the kernel's process is the candidate's failure (the actor survives and says so); the
loss of the actor or its node is not: the job is retried once on another slot, then reported as
`InfrastructureError`.

Honest timing: a GPU slot asks Ray for `num_gpus=1` and runs one job at a time, so no two jobs
share a GPU; a job's gate and its side-by-side timing of reference and candidate happen in one
process on that GPU. A run pins its evaluations to one GPU model (`gpu_model`), so speedups are
never compared across models. Every result comes back with its `Placement` (node, GPU).

Nothing secret reaches Ray: a runtime started here is started without the environment's
secret-looking variables, and payloads carry kernel sources and specs only. The driver (the CLI
or the language server) writes every log; slots only return results.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Iterator, TypeVar

from ...evaluation import InfrastructureError
from ..jobs import BackendsJob, BackendStatus, DeviceJob
from ..worker import Job
from .base import Placement, Ran

T = TypeVar("T")

# Names that look like secrets never reach a Ray runtime started here (the worker pool inside
# each slot adds its own allow-list on top).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
GRACE_S = 120.0          # beyond a job's own timeout before the driver gives up on its slot
START_TIMEOUT_S = 180.0  # for the slots of a group to start (a worker process each)
OBJECT_STORE_BYTES = 256 << 20


def _secret(name: str) -> bool:
    return any(w in name.upper() for w in _SECRET_WORDS)


@contextlib.contextmanager
def _without_secrets() -> Iterator[None]:
    """os.environ without secret-looking names while Ray starts its processes (they copy it)."""
    hidden = {k: os.environ.pop(k) for k in [k for k in os.environ if _secret(k)]}
    try:
        yield
    finally:
        os.environ.update(hidden)


# ---- the slot: runs inside a Ray worker process ----------------------------------------------

class Slot:
    """One evaluation place: an `astra_cuda.execution.worker` pool of one worker (on the GPU Ray assigned it)."""

    def __init__(self, backend: str):
        import socket

        import ray

        from .. import worker
        self.backend = backend
        env = {}
        gpu_index = ""
        if backend == "gpu":
            gpu_index = ",".join(str(i) for i in ray.get_gpu_ids())
            env["CUDA_VISIBLE_DEVICES"] = gpu_index
        self.pool = worker.Pool(1, env=env, name=f"ray-{backend}")
        self.cancelled = threading.Event()
        self.node = ray.util.get_node_ip_address()
        self.host = socket.gethostname()
        self.gpu_index = gpu_index
        self.gpu = ""

    def info(self) -> dict[str, Any]:
        """Start the worker and probe this slot's backend (a GPU slot also names its GPU)."""
        status = self.pool.run(BackendsJob(), timeout=START_TIMEOUT_S)[self.backend]
        if self.backend == "gpu" and status.available:
            self.gpu = str(self.pool.run(DeviceJob(), timeout=START_TIMEOUT_S).get("name", ""))
        return {"node": self.node, "host": self.host, "gpu": self.gpu, "gpu_index": self.gpu_index,
                "pid": os.getpid(), "worker_pid": self._worker_pid(), "available": status.available,
                "reason": status.reason}

    def _worker_pid(self) -> int | None:
        workers = list(self.pool._idle) + list(self.pool._busy)
        return workers[0].pid if workers else None

    def run(self, job: Job[Any], timeout: float) -> tuple[str, Any, dict[str, str]]:
        self.cancelled.clear()
        where = {"node": f"{self.host} ({self.node})", "gpu": self.gpu, "gpu_index": self.gpu_index}
        try:
            return "ok", self.pool.run(job, timeout=timeout, cancel=self.cancelled), where
        except BaseException as e:  # noqa: BLE001 - the job's error travels back as a value
            return "err", e, where

    def cancel(self) -> None:
        self.cancelled.set()

    def close(self) -> None:
        self.pool.close()


# ---- the driver side -----------------------------------------------------------------------

class _Lost(Exception):
    """The slot (its actor, or its node) is gone."""


class _Member:
    def __init__(self, actor: Any, info: dict[str, Any]):
        self.actor = actor
        self.info = info
        self.busy = False

    @property
    def node(self) -> str:
        return str(self.info.get("node", ""))


class _Group:
    """The slots of one backend: started on first use, one job per slot at a time."""

    def __init__(self, ex: "RayExecutor", backend: str):
        self.ex = ex
        self.backend = backend
        self.members: list[_Member] = []
        self.cond = threading.Condition()
        self.started = False
        self.problem = ""
        self.pending = 0   # replacements being started

    def _new_actor(self) -> Any:
        opts: dict[str, Any] = {"max_concurrency": 2, "max_restarts": 0, "num_cpus": 1}
        if self.backend == "gpu":
            opts["num_gpus"] = 1
        return self.ex._slot_class.options(**opts).remote(self.backend)

    def start(self) -> None:
        with self.cond:
            if self.started:
                return
            n = self.ex.slot_count(self.backend)
            actors = [self._new_actor() for _ in range(n)]
            refs = [a.info.remote() for a in actors]
            ready, _ = self.ex.ray.wait(refs, num_returns=len(refs), timeout=START_TIMEOUT_S) if refs else ([], [])
            problems = []
            for actor, ref in zip(actors, refs):
                info = None
                if ref in ready:
                    try:
                        info = self.ex.ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - a slot that cannot start is left out
                        problems.append(f"{type(e).__name__}: {e}")
                if info is not None and info.get("available"):
                    self.members.append(_Member(actor, info))
                else:
                    if info is not None:
                        problems.append(info.get("reason") or "not available")
                    self.ex.ray.kill(actor, no_restart=True)
            self.problem = problems[0] if problems else ("" if n else f"the Ray cluster has no {self.backend.upper()}s")
            self.started = True

    def acquire(self, gpu_model: str | None, avoid: set[str], deadline: float,
                cancel: threading.Event | None) -> _Member:
        from ..worker import WorkerCancelled
        self.start()
        with self.cond:
            while True:
                fit = [m for m in self.members if not gpu_model or m.info.get("gpu") == gpu_model]
                if not fit and self.pending and time.monotonic() < deadline:
                    self.cond.wait(0.1)  # a replacement is starting
                    continue
                if not fit:
                    have = sorted({m.info.get("gpu", "") for m in self.members} - {""})
                    if gpu_model and have:
                        raise InfrastructureError(f"no {gpu_model} left in the Ray cluster (it has {', '.join(have)}); "
                                                  f"speedups are never compared across GPU models")
                    raise InfrastructureError(f"no {self.backend} slot left in the Ray cluster"
                                              + (f" ({self.problem})" if self.problem else ""))
                idle = sorted((m for m in fit if not m.busy), key=lambda m: m.node in avoid)
                if idle:
                    idle[0].busy = True
                    return idle[0]
                if cancel is not None and cancel.is_set():
                    raise WorkerCancelled("cancelled before it started")
                if time.monotonic() > deadline:
                    raise InfrastructureError("no Ray slot became free in time")
                self.cond.wait(0.1)

    def release(self, m: _Member) -> None:
        with self.cond:
            m.busy = False
            self.cond.notify_all()

    def replace(self, m: _Member) -> None:
        """`m` is lost: drop it and start one in its place (Ray puts it where resources are), in
        the background: the retry takes whichever slot is free first."""
        with self.cond:
            if m in self.members:
                self.members.remove(m)
            self.pending += 1
            self.cond.notify_all()
        try:
            self.ex.ray.kill(m.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        threading.Thread(target=self._start_one, daemon=True, name="astra-ray-replace").start()

    def _start_one(self) -> None:
        info, actor = None, None
        try:
            actor = self._new_actor()
            info = self.ex.ray.get(actor.info.remote(), timeout=START_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no room for a replacement: the group is smaller now
            info = None
        with self.cond:
            self.pending -= 1
            if info is not None and info.get("available"):
                self.members.append(_Member(actor, info))
                actor = None
            self.cond.notify_all()
        if actor is not None:
            try:
                self.ex.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        with self.cond:
            members, self.members = self.members, []
        for m in members:
            try:
                self.ex.ray.kill(m.actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass


class RayExecutor:
    """Evaluations on Ray. `address` None starts a local runtime (`num_cpus` bounded, its own temp
    dir, stopped on close); else 'ray://HOST:PORT' joins a cluster through the Ray Client."""

    kind = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None):
        try:
            import ray
        except ImportError:
            from ...errors import AstraError
            raise AstraError("--cluster needs Ray: install astra-cuda[cluster] (pip install 'ray==2.60.0')") from None
        self.ray = ray
        self.address = address
        self._temp: str | None = None
        self._owner = False
        self._slot_class = ray.remote(Slot)
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._cpu_probe: BackendStatus | None = None
        if ray.is_initialized():
            return  # someone in this process (a test, a notebook) already connected: use that
        common: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False, namespace="astra")
        try:
            if address is None:
                self._temp = tempfile.mkdtemp(prefix="astra-ray-", dir="/tmp")  # short: Ray's socket paths
                cpus = num_cpus or int(os.environ.get("ASTRA_RAY_CPUS", "0") or 0) or min(os.cpu_count() or 1, 16)
                with _without_secrets():
                    ray.init(num_cpus=cpus, num_gpus=num_gpus, _temp_dir=self._temp,
                             object_store_memory=OBJECT_STORE_BYTES, **common)
            else:
                # The cluster runs this very package (the jobs must be the driver's).
                import astra_cuda
                ray.init(address=address, runtime_env={"py_modules": [os.path.dirname(astra_cuda.__file__)]}, **common)
        except Exception as e:  # noqa: BLE001 - Ray says why in many ways; the user gets one message
            self._cleanup_temp()
            from ...errors import AstraError
            where = "start a local Ray runtime" if address is None else f"connect to the Ray cluster at {address}"
            raise AstraError(f"could not {where}: {type(e).__name__}: {e}") from None
        self._owner = True

    # ---- sizing and description ---------------------------------------------------------
    def _resources(self) -> dict[str, float]:
        return dict(self.ray.cluster_resources())

    def slot_count(self, backend: str) -> int:
        res = self._resources()
        if backend == "gpu":
            return int(res.get("GPU", 0))
        cap = int(os.environ.get("ASTRA_RAY_CPU_SLOTS", "0") or 0)
        n = max(1, int(res.get("CPU", 1)))
        return min(n, cap) if cap else n

    def _group(self, backend: str) -> _Group:
        with self._lock:
            g = self._groups.get(backend)
            if g is None:
                g = self._groups[backend] = _Group(self, backend)
            return g

    def capacity(self, backend: str) -> int:
        g = self._group(backend)
        g.start()
        return max(1, len(g.members))

    def describe(self) -> dict[str, Any]:
        res = self._resources()
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        models = sorted({m.info.get("gpu", "") for g in self._groups.values() for m in g.members} - {""})
        return {"kind": "ray", "address": self.address or "local", "nodes": len(nodes),
                "gpus": int(res.get("GPU", 0)), "cpus": int(res.get("CPU", 0)), "gpu_models": models}

    def statuses(self) -> dict[str, BackendStatus]:
        out = {}
        gpu = self._group("gpu")
        gpu.start()
        out["gpu"] = BackendStatus(True, ", ".join(sorted({m.info["reason"] for m in gpu.members}))) if gpu.members \
            else BackendStatus(False, f"no usable GPU in the Ray cluster ({gpu.problem or 'none found'})")
        out["cpu"] = self._probe_cpu()
        return out

    def _probe_cpu(self) -> BackendStatus:
        """The CPU backend's availability, asked of one Ray task (no slot group started for it)."""
        if self._cpu_probe is None:
            g = self._groups.get("cpu")
            if g is not None and g.started:
                self._cpu_probe = BackendStatus(bool(g.members), g.problem)
            else:
                probe = self.ray.remote(num_cpus=1)(_probe_backends)
                try:
                    self._cpu_probe = self.ray.get(probe.remote(), timeout=START_TIMEOUT_S)["cpu"]
                except Exception as e:  # noqa: BLE001
                    self._cpu_probe = BackendStatus(False, f"the Ray cluster could not be probed: {e}")
        return self._cpu_probe

    # ---- running a job ----------------------------------------------------------------------
    def run(self, job: Job[T], *, backend: str, timeout: float,
            cancel: threading.Event | None = None, gpu_model: str | None = None) -> Ran[T]:
        group = self._group(backend)
        deadline = time.monotonic() + timeout + GRACE_S
        lost: list[str] = []
        for _attempt in range(2):  # the first place, then once elsewhere
            member = group.acquire(gpu_model if backend == "gpu" else None, set(lost), deadline, cancel)
            try:
                status, value, where = self._call(member, job, timeout, cancel)
            except _Lost as e:
                lost.append(member.node)
                lost_why = str(e)
                group.replace(member)
                continue
            group.release(member)
            if status == "ok":
                return Ran(value, Placement(where.get("node", ""), where.get("gpu", ""), where.get("gpu_index", "")))
            raise value
        raise InfrastructureError(f"infrastructure error: the Ray worker evaluating this was lost twice "
                                  f"({lost_why}); not a verdict on the kernel")

    def _call(self, m: _Member, job: Job[Any], timeout: float,
              cancel: threading.Event | None) -> tuple[str, Any, dict[str, str]]:
        ray = self.ray
        ref = m.actor.run.remote(job, timeout)
        end = time.monotonic() + timeout + GRACE_S
        cancel_ref = None
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=0.1)
                if ready:
                    result: tuple[str, Any, dict[str, str]] = ray.get(ref)   # Slot.run's reply
                    if cancel_ref is not None:
                        ray.get(cancel_ref, timeout=30)  # the flag must not outlive this job
                    return result
                if cancel is not None and cancel.is_set() and cancel_ref is None:
                    cancel_ref = m.actor.cancel.remote()
                if time.monotonic() > end:
                    raise _Lost(f"no answer within {timeout + GRACE_S:g} s")
        except ray.exceptions.RayError as e:
            raise _Lost(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None

    # ---- for tests and benchmarks -------------------------------------------------------------
    def slots(self, backend: str) -> list[dict[str, Any]]:
        """The started slots of `backend`: their node, GPU, actor pid and worker pid, and busy."""
        g = self._groups.get(backend)
        if g is None:
            return []
        with g.cond:
            return [{**m.info, "busy": m.busy} for m in g.members]

    def close(self) -> None:
        for g in list(self._groups.values()):
            g.close()
        self._groups.clear()
        if self._owner:
            try:
                self.ray.shutdown()
            except Exception:  # noqa: BLE001
                pass
            self._owner = False
        self._cleanup_temp()

    def _cleanup_temp(self) -> None:
        if self._temp:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None


def _probe_backends() -> dict[str, BackendStatus]:
    """A Ray task: which backends a fresh worker on some node offers."""
    from .. import worker
    pool = worker.Pool(1, name="ray-probe")
    try:
        return pool.run(BackendsJob(), timeout=START_TIMEOUT_S)
    finally:
        pool.close()
