"""`astra optimize PATH…`: many kernels in one command, each exactly as `astra optimize FILE
--kernel K` would run it (`api.optimize`, its own run log), with one manifest so the whole batch
can be resumed.

    .astra/batches/<id>.json   the targets (file, kernel), each one's run id and state, the options

Targets are every kernel with a harness spec in the files given and the `.cu`/`.cuh` files under
the folders given (or only kernels named `--kernel`). The kernels of one file run one after the
other, in file order (a `--write` of one is the text the next one starts from, as by hand);
different files run at once, as many as the executor has evaluation slots. The driver writes
every log; results come back in target order.
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import api, workspace
from ..errors import AstraError
from .paths import expand
from ..progress import ProgressEvent

if TYPE_CHECKING:
    from ..agents.result import OptimizeResult



@dataclass(frozen=True)
class Target:
    path: str
    kernel: str


def targets(paths: list[str], kernel: str | None = None) -> list[Target]:
    """The (file, kernel) pairs to optimize, in a stable order. A named file must exist and be
    readable; a file without a kernel with a spec is skipped unless it was named alone."""
    found: list[Target] = []
    seen: set[tuple[str, str]] = set()
    for f, named in expand(paths):
        try:
            infos = api.kernels(api.open_file(f), require_some=False)
        except AstraError:
            if named:
                raise
            continue  # a folder's unreadable file is not a target
        for k in infos:
            if k.spec is None or (kernel and kernel not in (k.name, k.kernel.qualified_name)):
                continue
            key = (os.path.realpath(f), k.name)
            if key not in seen:
                seen.add(key)
                found.append(Target(f, k.name))
    if not found:
        raise AstraError("no kernel with a harness spec" + (f" named {kernel!r}" if kernel else "") + " in "
                         + ", ".join(paths))
    return found


# ---- the manifest -----------------------------------------------------------------------------

def _batches_dir(anchor: str) -> Path:
    """Where the manifests are read from: never through a link (refused, as `ensure_astra_dir` does)."""
    workspace.refuse_links(anchor)
    return workspace.astra_dir(anchor) / "batches"


def _write(path: Path, data: dict) -> None:
    from ..storage import writing
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with writing("the batch's manifest", path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def load(anchor: str, batch_id: str) -> dict:
    """A logged batch ('last': the newest) of the workspace that holds `anchor`."""
    d = _batches_dir(anchor)
    if batch_id == "last":
        logged = sorted(d.glob("*.json")) if d.is_dir() else []
        if not logged:
            raise AstraError(f"no logged batch to resume (looked in {d})")
        path = logged[-1]
    else:
        if Path(batch_id).name != batch_id or batch_id in (".", ".."):
            raise AstraError(f"no batch {batch_id!r} in {d}")
        path = d / f"{batch_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        [Target(t["path"], t["kernel"]) for t in data["targets"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise AstraError(f"no readable batch {batch_id!r} in {d}") from None
    data["id"] = path.stem  # what a manifest says its id is would name where the next one is written
    return data


def outside(targets: list[dict], paths: list[str], anchor: str) -> list[str]:
    """The targets' files of a logged manifest that lie outside both the paths given now and the
    project of `anchor`. A manifest is data in the project's folder, which a cloned repository may
    have committed: one naming `/elsewhere/k.cu` made a resumed batch read, optimize and log (and
    with --write, rewrite) a file of another project."""
    allowed = [Path(p).resolve() for p in paths] + [workspace.root_for(anchor)]
    return [str(t["path"]) for t in targets
            if not any(Path(str(t["path"])).resolve().is_relative_to(a) for a in allowed)]


# ---- running ----------------------------------------------------------------------------------

@dataclass
class Row:
    """One target's outcome, as the summary table shows it."""

    target: Target
    run_id: str = ""
    state: str = "queued"          # queued | running | done | interrupted | error
    message: str = ""
    speedup: float | None = None
    improved: bool = False
    cases: int = 0
    gpu: str = ""
    node: str = ""
    rounds: int = 0
    seconds: float = 0.0
    result: OptimizeResult | None = None   # None on an error

    def to_json(self) -> dict:
        return {"path": self.target.path, "kernel": self.target.kernel, "run_id": self.run_id, "state": self.state,
                "message": self.message, "speedup": self.speedup, "improved": self.improved,
                "verified_cases": self.cases, "gpu": self.gpu, "node": self.node, "rounds": self.rounds,
                "seconds": round(self.seconds, 2)}


@dataclass
class BatchResult:
    id: str
    rows: list[Row]
    executor: dict
    seconds: float = 0.0
    manifest: str = ""
    report_path: str | None = None
    geomeans: dict[str, float] = field(default_factory=dict)   # GPU model -> geomean of the measured rows

    def to_json(self) -> dict:
        return {"batch": self.id, "manifest": self.manifest, "executor": self.executor,
                "seconds": round(self.seconds, 2), "summary": [r.to_json() for r in self.rows],
                "geomean_by_gpu": self.geomeans, "report": self.report_path,
                "runs": [r.result.to_json() if r.result is not None else None for r in self.rows]}


def geomeans(rows: list[Row]) -> dict[str, float]:
    """The geomean speedup per GPU model: speedups are never pooled across models."""
    import math
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.speedup is not None and r.speedup > 0 and r.gpu:
            by.setdefault(r.gpu, []).append(r.speedup)
    return {g: math.exp(sum(map(math.log, v)) / len(v)) for g, v in sorted(by.items())}


def run(paths: list[str], *, kernel: str | None = None, resume: str | None = None,
        on_row: Callable[[Row], None] | None = None, report: str | None = None, write: bool = False,
        options: dict | None = None, context_for: Callable[[str], object] | None = None,
        cancel: threading.Event | None = None) -> BatchResult:
    """Optimize every target. `options` go to `api.optimize` unchanged (rounds, llm, backend, arch,
    candidates..., the `session` kernels run in). `resume`: a batch id (or 'last'): its finished runs are reported, its
    unfinished ones resumed (`rounds` None: to their own totals), its unstarted ones started.
    `on_row` is told of every change."""
    from ..session import Session
    t0 = time.monotonic()
    options = dict(options or {})
    anchor = paths[0] if paths else "."
    if resume:
        data = load(anchor, resume)
        batch_id = data["id"]  # the manifest's own file name (load sets it): never a path
        far = outside(data["targets"], paths, anchor)
        if far:
            raise AstraError(f"batch {batch_id} names files outside {workspace.root_for(anchor)} and the paths given "
                             f"({', '.join(far[:3])}{' …' if len(far) > 3 else ''}): not resumed; name them on the "
                             f"command line to include them")
        rows = [Row(Target(t["path"], t["kernel"]), t.get("run_id", "")) for t in data["targets"]]
    else:
        batch_id = time.strftime("%Y%m%d-%H%M%S") + f"-batch-{uuid.uuid4().hex[:6]}"
        rows = [Row(t) for t in targets(paths, kernel)]
    manifest = workspace.ensure_astra_dir(anchor, "batches") / f"{batch_id}.json"
    lock = threading.Lock()
    cancel = cancel or threading.Event()
    session = options.get("session") or Session()
    options["session"] = session   # one session for every target: its backend probe is asked once
    ex = session.executor
    logged_options = {k: v for k, v in options.items() if k in ("rounds", "backend", "arch", "candidates", "quick")}
    logged_options["mode"] = "llm" if options.get("llm") is not None else "offline"

    def save() -> None:
        with lock:
            data = {"id": batch_id, "started": time.time(), "paths": paths, "options": logged_options,
                    "executor": ex.describe(), "targets": [{"path": r.target.path, "kernel": r.target.kernel,
                                                           "run_id": r.run_id, "state": r.state} for r in rows]}
        _write(manifest, data)

    def tell(row: Row) -> None:
        if on_row is not None:
            try:
                on_row(row)
            except Exception:  # noqa: BLE001 - a broken display never stops the batch
                pass

    for r in rows:
        if not r.run_id:
            r.run_id = _new_run_id(r.target.kernel)
    save()

    def one(row: Row) -> None:
        if cancel.is_set():
            return
        row.state, row.message = "running", "starting"
        tell(row)
        t = row.target
        # A run already logged is resumed (a finished one only reported), as `--resume ID` would.
        started = (workspace.astra_dir(t.path) / "runs" / row.run_id / "run.json").exists()

        def progress(event: ProgressEvent) -> None:
            row.message = event.message or event.step
            if event.best_speedup is not None:
                row.speedup = event.best_speedup
            tell(row)
        t_row = time.monotonic()
        try:
            ctx = context_for(t.path) if context_for is not None else None
            res = api.optimize(api.open_file(t.path, ctx), t.kernel, progress=progress, cancel=cancel, write=write,
                               resume=row.run_id if started else None, run_id=None if started else row.run_id,
                               **options)
        except AstraError as e:
            row.state, row.message = "error", e.message
        else:
            row.result = res
            row.state = "interrupted" if res.interrupted else "done"
            row.message = res.error or res.stopped
            row.improved, row.speedup = res.improved, res.speedup
            row.cases = res.best_eval.check.cases if res.best_eval is not None else 0
            row.gpu = (res.best_eval.gpu or res.baseline.gpu) if res.best_eval is not None else ""
            row.node = (res.best_eval.node or res.baseline.node) if res.best_eval is not None else ""
            row.rounds = len({r.batch for r in res.rounds})
        row.seconds = time.monotonic() - t_row
        save()
        tell(row)

    by_file: dict[str, list[Row]] = {}
    for r in rows:
        by_file.setdefault(os.path.realpath(r.target.path), []).append(r)
    backend = options.get("backend") or "auto"
    width = 1
    try:
        width = max(1, min(len(by_file), ex.capacity(api.resolve_backend(backend, session))))
    except AstraError:
        width = 1  # the first target will say why the backend is not available
    with ThreadPoolExecutor(width, thread_name_prefix="astra-batch") as pool:
        for fut in [pool.submit(lambda rs: [one(r) for r in rs], rs) for rs in by_file.values()]:
            fut.result()
    result = BatchResult(batch_id, rows, ex.describe(), time.monotonic() - t0, str(manifest))
    result.geomeans = geomeans(rows)
    if report:
        from ..agents import report as report_mod
        result.report_path = str(report_mod.write_batch(result, report))
    return result


def _new_run_id(kernel: str) -> str:
    from ..agents.runlog import new_run_id
    return new_run_id(kernel)
