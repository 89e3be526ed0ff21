"""The run log: `<workspace>/.astra/runs/<id>/`, written as the run goes, so a run can be
inspected, reported or resumed.

    run.json             what was asked (kernel, file, mode, model, limits) and the final state
    original.cu          the file as it was
    baseline.json        the original's evaluation
    round-01/plan.md     the plan;  candidate.cu, evaluation.json, round.json (outcome, usage)
    best.cu              the best verified file so far
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from .evaluation import Evaluation
from .records import Round


def new_run_id(kernel: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{kernel.split('::')[-1]}-{uuid.uuid4().hex[:6]}"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class RunLog:
    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def start(self, meta: dict, original: str) -> None:
        _write(self.dir / "run.json", json.dumps(meta, indent=2))
        _write(self.dir / "original.cu", original)

    def update_meta(self, **kv) -> None:
        meta = self.meta()
        meta.update(kv)
        _write(self.dir / "run.json", json.dumps(meta, indent=2, default=str))

    def meta(self) -> dict:
        p = self.dir / "run.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def baseline(self, ev: Evaluation) -> None:
        _write(self.dir / "baseline.json", json.dumps(ev.to_json(), indent=2))

    def round(self, r: Round) -> None:
        d = self.dir / f"round-{r.index:02d}"
        d.mkdir(exist_ok=True)
        if r.plan is not None:
            _write(d / "plan.md", f"# {r.plan.title}\n\nsource: {r.plan.source}\n\n{r.plan.details}\n\n"
                                  f"Expected effect: {r.plan.expected}\n")
        if r.candidate is not None:
            _write(d / "candidate.cu", r.candidate)
        if r.evaluation is not None:
            _write(d / "evaluation.json", json.dumps(r.evaluation.to_json(), indent=2))
        _write(d / "round.json", json.dumps(r.to_json(), indent=2))
        if r.transcript:
            _write(d / "llm.json", json.dumps(r.transcript, indent=2))

    def best(self, text: str) -> None:
        _write(self.dir / "best.cu", text)

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

    def read_original(self) -> str | None:
        p = self.dir / "original.cu"
        return p.read_text(encoding="utf-8") if p.exists() else None
