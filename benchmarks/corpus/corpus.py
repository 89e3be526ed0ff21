"""The real-code corpus: load the manifest, write a copy of the corpus with each kernel's
inferred spec (unedited) pasted above it, and check every kernel on a backend.

    python benchmarks/corpus/corpus.py [--backend cpu|gpu] [--quick] [--json OUT] [--kernel NAME]

`make test` runs the CPU part (tests/realcode/test_corpus.py); the GPU part runs on the device
(`scripts/gpu-check corpus`). Results name the backend (and the device, on a GPU).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    file: str
    kernel: str
    style: str
    category: str
    dtype: str
    naive: str | None = None
    improved: str | None = None
    memory_bound: bool = True
    note: str = ""


@dataclass
class Outcome:
    kernel: str
    file: str
    status: str                 # passed | failed | error | unsupported | spec-error
    compared_with: str = ""     # the reference kernel, when one was compared
    summary: str = ""
    notes: list[str] = field(default_factory=list)   # what inference says to check or fill in
    seconds: float = 0.0


def manifest(root: Path = HERE) -> list[Entry]:
    data = tomllib.loads((root / "corpus.toml").read_text())
    return [Entry(**k) for k in data["kernel"]]


def with_inferred_specs(root: Path, dest: Path, entries: list[Entry], run: bool = True) -> dict[tuple[str, str], list[str]]:
    """Copy the corpus to `dest` (a git root of its own, so pins stay there) and paste each
    kernel's proposed spec above it (`run`: each draft run before it is proposed, as `astra spec`
    does). Returns (file, kernel) -> inference notes."""
    from astra_cuda import api
    from astra_cuda.model import source
    shutil.copytree(root, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".astra"))
    (dest / ".git").mkdir(exist_ok=True)
    notes: dict[tuple[str, str], list[str]] = {}
    by_file: dict[str, list[Entry]] = {}
    for e in entries:
        by_file.setdefault(e.file, []).append(e)
    for rel, es in by_file.items():
        path = dest / rel
        text = path.read_text()
        proposals = {}
        for e in es:
            p = api.infer_spec(api.snapshot(text, str(path)), e.kernel, run=run)
            proposals[e.kernel] = p.comment
            notes[(rel, e.kernel)] = p.notes
        # paste from the bottom up, so earlier offsets stay valid
        model = source.parse(text)
        for k in sorted((model.kernel(n) for n in proposals), key=lambda k: -k.span.start_byte):
            text = text[:k.span.start_byte] + proposals[k.name] + text[k.span.start_byte:]
        path.write_text(text)
    return notes


def check_all(entries: list[Entry], backend: str = "cpu", quick: bool = True, root: Path = HERE,
              progress=None) -> list[Outcome]:
    from astra_cuda import api
    from astra_cuda.errors import AstraError
    out = []
    with tempfile.TemporaryDirectory(prefix="astra-corpus-") as tmp:
        dest = Path(tmp) / "corpus"
        notes = with_inferred_specs(root, dest, entries)
        for e in entries:
            path = dest / e.file
            t0 = time.perf_counter()
            try:
                (v,) = api.check(api.snapshot(path.read_text(), str(path)), e.kernel, backend=backend,
                                 quick=quick, pin_first=False)
                o = Outcome(e.kernel, e.file, v.status, v.reference if v.compared else "", v.summary)
            except AstraError as err:
                o = Outcome(e.kernel, e.file, "spec-error", "", err.message)
            o.notes = notes[(e.file, e.kernel)]
            o.seconds = round(time.perf_counter() - t0, 2)
            out.append(o)
            if progress:
                progress(o)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--quick", action="store_true", help="the gate's quick mode (no sanitizer builds)")
    ap.add_argument("--kernel", action="append", help="only these kernels")
    ap.add_argument("--json", help="write the outcomes here")
    a = ap.parse_args(argv)
    entries = [e for e in manifest() if not a.kernel or e.kernel in a.kernel]
    t0 = time.perf_counter()
    outcomes = check_all(entries, a.backend, a.quick,
                         progress=lambda o: print(f"{o.status:>11}  {o.file}:{o.kernel}  ({o.seconds} s)  "
                                                  f"{'' if o.status == 'passed' else o.summary}", flush=True))
    passed = sum(o.status == "passed" for o in outcomes)
    print(f"{passed} of {len(outcomes)} kernels pass their inferred spec unedited on the {a.backend} backend "
          f"({time.perf_counter() - t0:.0f} s)")
    if a.json:
        device = ""
        if a.backend == "gpu":
            from astra_cuda.execution import jobs, worker
            device = worker.run(jobs.GpuFactsJob(), timeout=60.0)
        Path(a.json).write_text(json.dumps({"backend": a.backend, "device": device, "quick": a.quick,
                                            "passed": passed, "total": len(outcomes),
                                            "kernels": [asdict(o) for o in outcomes]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
