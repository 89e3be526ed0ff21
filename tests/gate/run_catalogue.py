"""Run the cheat catalogue through the gate on a backend and report (for the GPU run whose
output is committed):

    python -m tests.gate.run_catalogue --backend gpu --json gpu-out/gate-catalogue.json

Every entry runs in a worker process (`astra.jobs:check_job`), so a kernel that faults and
loses its CUDA context costs only that worker. Exit status 1 when any cheat passes or any
correct variant is rejected.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from astra import extract, jobs, source, spec as spec_mod, worker

from . import catalogue

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(backend: str, only: list[str], sanitizer: bool | None, timeout: float) -> list[dict]:
    rows = []
    for e in catalogue.ALL:
        if only and e.name not in only:
            continue
        path = os.path.join(ROOT, "examples", f"{e.example}.cu")
        text = open(path).read()
        model = source.parse(text)
        spec = spec_mod.load(model.kernel(e.kernel), model)
        ref = extract.unit(text, path, e.kernel)
        cand = extract.unit(catalogue.candidate_text(e, text), path, e.kernel)
        t0 = time.perf_counter()
        try:
            v = worker.run("astra.jobs:check_job", jobs.CheckJob(backend, ref, cand, spec, sanitizer=sanitizer),
                           timeout=timeout)
            status, first, summary = v.status, (v.failures[0].check if v.failures else None), v.summary
            warnings = v.warnings
        except Exception as ex:  # noqa: BLE001 - a crashed or hung worker is a result to report
            status, first, summary, warnings = "crashed", "worker", f"{type(ex).__name__}: {ex}", []
        if e.cheat:
            ok = status in ("failed", "crashed") and (first in e.caught_by or status == "crashed")
        else:
            ok = status == "passed"
        rows.append({"name": e.name, "example": e.example, "cheat": e.cheat, "expected": list(e.caught_by),
                     "status": status, "caught_by": first, "ok": ok, "seconds": round(time.perf_counter() - t0, 2),
                     "summary": summary, "warnings": warnings})
        print(f"{'ok ' if ok else 'BAD'} {e.name:28s} {status:10s} {first or '-':18s} {rows[-1]['seconds']:6.1f}s",
              flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--no-sanitizer", action="store_true", help="skip compute-sanitizer on the GPU")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args(argv)
    rows = run(a.backend, a.only, False if a.no_sanitizer else None, a.timeout)
    cheats = [r for r in rows if r["cheat"]]
    good = [r for r in rows if not r["cheat"]]
    line = (f"gate catalogue on {a.backend}: {sum(r['ok'] for r in cheats)}/{len(cheats)} cheats rejected, "
            f"{sum(r['ok'] for r in good)}/{len(good)} correct variants passed")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"backend": a.backend, "summary": line, "results": rows}, f, indent=1)
    print(line)
    worker.shutdown()
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
