"""The run log: `<workspace>/.astra/runs/<id>/`, written as the run goes, so a run can be
inspected, reported or resumed.

    run.json             what was asked (kernel, file, mode, model, limits) and the final state
    original.cu          the file as it was
    baseline.json        the original's evaluation
    round-01/plan.md     the plan;  candidate.cu, evaluation.json, round.json (outcome, usage)
    best.cu              the best verified file so far
    measured/<hash>.json every evaluation as soon as it is made (by source hash): a round cut
                         short (a lost cluster node) loses nothing when it is resumed
    tuning.json          the tuning stage's parameter points (after the rounds)

A resumed run reuses its log's evaluations (they are not gated again), and `.astra/` is a folder
a cloned repository may have committed: a run log made elsewhere would make verdicts of its own
(a candidate no gate ever saw, "passed" and adopted, then `--write`). So every run's `run.json`
carries a mark, an HMAC of its id and its original under a key of this user's, kept outside every
project (`run_key`), and only a run with its mark is resumed.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import redact
from ..evaluation import Evaluation
from ..storage import NoSpace, writing
from .records import Round


def new_run_id(kernel: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{kernel.split('::')[-1]}-{uuid.uuid4().hex[:6]}"


def _write(path: Path, text: str) -> None:
    """Every run-log file goes through here: secrets are masked on the way to disk, except in
    the kernel sources (.cu), which must stay byte for byte what was run (resume compares them)."""
    tmp = path.with_name(path.name + ".tmp")
    with writing("the run log", path.parent):
        try:
            tmp.write_text(text if path.suffix == ".cu" else redact.text(text), encoding="utf-8")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def run_key() -> bytes:
    """This user's key for run marks: `$XDG_STATE_HOME/astra/run-key` (~/.local/state/astra),
    made once (0600); never inside a project."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = Path(state) / "astra" / "run-key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return path.read_bytes()  # another process made it meanwhile
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    return path.read_bytes()


def mark(run_id: str, original: str) -> str:
    """The mark of the run `run_id` started from `original`, as this user's Astra writes it."""
    data = f"{run_id}\0{hashlib.sha256(original.encode('utf-8')).hexdigest()}".encode()
    return hmac.new(run_key(), data, hashlib.sha256).hexdigest()


class RunLog:
    """Its first writes (`start`) fail as NoSpace on a full disk, before the run has done
    anything; a write later in the run that fails for lack of room is noted in `unsaved` and
    the run goes on (its result is in memory and shown), so a disk filling up mid-run loses
    nothing the user did not already have."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.unsaved: str | None = None   # the first write refused after the start
        with writing("the run log", directory):
            self.dir.mkdir(parents=True, exist_ok=True)

    def _later(self, write, *args) -> None:
        try:
            write(*args)
        except NoSpace as e:
            self.unsaved = self.unsaved or e.message

    def start(self, meta: dict, original: str) -> None:
        _write(self.dir / "run.json", json.dumps({**meta, "mark": mark(self.dir.name, original)}, indent=2))
        _write(self.dir / "original.cu", original)

    def update_meta(self, **kv) -> None:
        meta = self.meta()
        meta.update(kv)
        self._later(_write, self.dir / "run.json", json.dumps(meta, indent=2, default=str))

    def meta(self) -> dict:
        p = self.dir / "run.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def baseline(self, ev: Evaluation) -> None:
        self._later(_write, self.dir / "baseline.json", json.dumps(ev.to_json(), indent=2))

    def round(self, r: Round) -> None:
        self._later(self._round, r)

    def _round(self, r: Round) -> None:
        d = self.dir / f"round-{r.index:02d}"
        with writing("the run log", d):
            d.mkdir(exist_ok=True)
        if r.plan is not None:
            _write(d / "plan.md", f"# {r.plan.title}\n\nsource: {r.plan.source}\n\n{r.plan.details}\n\n"
                                  f"Expected effect: {r.plan.expected}\n"
                                  + (f"\nWhy now: {r.plan.why}\n" if r.plan.why else "")
                                  + "".join(f"- passed over {x}\n" for x in r.plan.skipped))
        if r.candidate is not None:
            _write(d / "candidate.cu", r.candidate)
        if r.evaluation is not None:
            _write(d / "evaluation.json", json.dumps(r.evaluation.to_json(), indent=2))
        _write(d / "round.json", json.dumps(r.to_json(), indent=2))
        if r.transcript:
            _write(d / "llm.json", json.dumps(r.transcript, indent=2))

    def best(self, text: str) -> None:
        self._later(_write, self.dir / "best.cu", text)

    def measured(self, key: str, ev: Evaluation) -> None:
        self._later(self._measured, key, ev)

    def _measured(self, key: str, ev: Evaluation) -> None:
        """Called from several threads (candidates evaluated at once): a temporary file each."""
        d = self.dir / "measured"
        tmp = d / f".{key}.{uuid.uuid4().hex[:8]}.tmp"
        with writing("the run log", d):
            try:
                d.mkdir(exist_ok=True)
                tmp.write_text(json.dumps(ev.to_json(), indent=2), encoding="utf-8")
                os.replace(tmp, d / f"{key}.json")
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def tuning(self, points: list) -> None:
        self._later(_write, self.dir / "tuning.json", json.dumps([p.to_json() for p in points], indent=2))

    # ---- reading back (resume / inspect) ----------------------------------------------------
    def rounds(self) -> list[Round]:
        out = []
        for d in sorted(self.dir.glob("round-*")):
            p = d / "round.json"
            if not p.exists():
                continue
            data = json.loads(p.read_text())
            cand = d / "candidate.cu"
            data["candidate"] = cand.read_text(encoding="utf-8") if cand.exists() else None
            out.append(Round.from_json(data))
        return out

    def read_baseline(self) -> Evaluation | None:
        p = self.dir / "baseline.json"
        return Evaluation.from_json(json.loads(p.read_text())) if p.exists() else None

    def read_measured(self) -> dict[str, Evaluation]:
        out = {}
        for p in sorted((self.dir / "measured").glob("*.json")):
            try:
                out[p.stem] = Evaluation.from_json(json.loads(p.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged entry is evaluated again
        return out

    def read_original(self) -> str | None:
        p = self.dir / "original.cu"
        return p.read_text(encoding="utf-8") if p.exists() else None


# ---- inspecting the runs of a workspace (`astra optimize --list-runs`, `--resume`) ----------

@dataclass(frozen=True)
class RunInfo:
    """One logged run, as a listing shows it."""

    id: str
    dir: Path
    kernel: str
    path: str                  # the file as the run was given it (maybe relative to that cwd)
    mode: str
    started: float | None
    status: str                # 'done', 'interrupted' (the cluster was lost), or 'running' (also a run cut short)
    stopped: str
    rounds_done: int
    rounds_asked: int | None
    speedup: float | None      # the best verified candidate's geomean speedup, where measured
    note: str                  # otherwise why there is none
    model: str | None = None   # the LLM's model name (None: the offline team)

    def to_json(self) -> dict:
        return {"id": self.id, "dir": str(self.dir), "kernel": self.kernel, "path": self.path, "mode": self.mode,
                "started": self.started, "status": self.status, "stopped": self.stopped,
                "rounds_done": self.rounds_done, "rounds_asked": self.rounds_asked, "speedup": self.speedup,
                "note": self.note, "model": self.model}


def read_run(directory: Path) -> RunInfo | None:
    """The run logged in `directory`, or None when it holds no readable run."""
    try:
        meta = json.loads((directory / "run.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    log = RunLog(directory)
    try:
        rounds, base = log.rounds(), log.read_baseline()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    best = base
    for r in rounds:
        if r.adopted and r.evaluation is not None:
            best = r.evaluation
    speedup, note = None, ""
    if base is None:
        note = "the original was not evaluated"
    elif not base.passed:
        note = "the original failed the gate"
    elif best is not None and best.measured:
        # a finished run's own figure: its best as offered (the readable form, timed again)
        final = meta.get("speedup") if meta.get("status") == "done" else None
        speedup = final if isinstance(final, float) else best.speedup
    else:
        note = "not measured"
    asked = meta.get("rounds")
    llm = meta.get("llm")
    return RunInfo(directory.name, directory, str(meta.get("kernel", "")), str(meta.get("path", "")),
                   str(meta.get("mode", "")), meta.get("started"), str(meta.get("status", "")),
                   str(meta.get("stopped", "")), len({r.batch for r in rounds}), asked if isinstance(asked, int) else None,
                   speedup, note, llm.get("model") if isinstance(llm, dict) else None)


def list_runs(runs_dir: Path) -> list[RunInfo]:
    """Every readable run under `runs_dir`, oldest first."""
    if not runs_dir.is_dir():
        return []
    found = (read_run(d) for d in runs_dir.iterdir() if d.is_dir())
    return sorted((r for r in found if r is not None), key=lambda r: (r.started or 0.0, r.id))


def names_file(run: RunInfo, path: str | os.PathLike, root: Path) -> bool:
    """Whether the run was of the file `path`. The log keeps the path as it was typed, so a
    relative one is tried against the current folder and the workspace root."""
    logged = Path(run.path)
    tries = [logged] if logged.is_absolute() else [Path.cwd() / logged, root / logged]
    target = Path(path).resolve()
    return any(t.resolve() == target for t in tries)


def runs_of(text: str, path: str | os.PathLike, runs_dir: Path, root: Path,
            kernel: str | None = None) -> list[RunInfo]:
    """The runs of one file (and kernel), oldest first. A run whose logged path names another
    place still counts when it has the same file name and started from exactly this text (the
    file was moved, or the run was started from another folder)."""
    return [r for r in list_runs(runs_dir) if (kernel is None or r.kernel == kernel) and _of_file(r, text, path, root)]


def _of_file(run: RunInfo, text: str, path: str | os.PathLike, root: Path) -> bool:
    if names_file(run, path, root):
        return True
    return Path(run.path).name == Path(path).name and RunLog(run.dir).read_original() == text


def resolve_resume(text: str, path: str | os.PathLike, kernel: str, run_id: str, runs_dir: Path,
                   root: Path) -> RunInfo:
    """The run `--resume RUN_ID` names (`last`: the newest run of this kernel on this file), after
    checking it can be continued from the file as it is now. Raises AstraError saying why not."""
    from ..errors import AstraError
    if run_id == "last":
        mine = runs_of(text, path, runs_dir, root, kernel)
        if not mine:
            raise AstraError(f"no logged run of {kernel} on {path} to resume (looked in {runs_dir})")
        run = mine[-1]
    else:
        # Only a plain folder name under runs_dir: an id is never a path.
        run = read_run(runs_dir / run_id) if run_id and Path(run_id).name == run_id and \
            run_id not in (".", "..") else None
        if run is None:
            known = runs_of(text, path, runs_dir, root)
            listing = "; ".join(f"{r.id} ({r.kernel}, {r.status})" for r in known[-10:])
            raise AstraError(f"no run {run_id!r} in {runs_dir}; "
                             + (f"runs of {path}: {listing}" if known else f"there are no logged runs of {path}"))
        if run.kernel != kernel:
            raise AstraError(f"run {run.id} optimized kernel {run.kernel!r}, not {kernel!r}")
        if not _of_file(run, text, path, root):
            raise AstraError(f"run {run.id} optimized {run.path}, not {path}")
    original = RunLog(run.dir).read_original()
    if original is None:
        raise AstraError(f"run {run.id} has no original.cu in its log; it cannot be resumed")
    said = RunLog(run.dir).meta().get("mark")
    if not (isinstance(said, str) and hmac.compare_digest(said, mark(run.dir.name, original))):
        raise AstraError(f"run {run.id} was not started by Astra as this user (its log carries no mark of yours: a "
                         f"run log can come with a repository, and a resumed run trusts its verdicts); it is not "
                         f"resumed — start a new run (without --resume)")
    if original != text:
        best = run.dir / "best.cu"
        if best.exists() and best.read_text(encoding="utf-8") == text:
            raise AstraError(f"{path} now holds run {run.id}'s best version (written with --write), not the "
                             f"text the run started from; start a new run (without --resume) to go on from it")
        raise AstraError(f"{path} changed since run {run.id} started; resuming it would optimize a stale text. "
                         f"Start a new run (without --resume)")
    return run


def resume_rounds(run: RunInfo, rounds: int | None, mode: str) -> int:
    """The total rounds a resumed run goes on to, checking the request fits the run: `rounds` is
    the total (None: an interrupted run's own total, or the rounds a finished run did: it is
    then only reported); `mode` ('offline' | 'llm') must be the team that made it. Raises
    AstraError saying why not."""
    from ..errors import AstraError
    if rounds is None:  # an interrupted run goes on to its total; a finished one is reported
        rounds = run.rounds_done if run.status == "done" else max(run.rounds_done, run.rounds_asked or 0)
    elif rounds < run.rounds_done:
        raise AstraError(f"run {run.id} has done {run.rounds_done} rounds already and --rounds is the "
                         f"total: give {run.rounds_done} (to report it) or more (to continue)")
    if run.mode and run.mode != mode:
        raise AstraError(f"run {run.id} was made by the " + (
            f"LLM team (model {run.model}): resume it with --llm openai --model {run.model}"
            if run.mode == "llm" else "offline team: resume it with --llm offline"))
    return rounds
