"""Run the cheat catalogue through the gate on a backend and report (for the GPU run whose
output is committed):

    python -m tests.gate.run_catalogue --backend gpu --json gpu-out/gate-catalogue.json [--only NAME...]

Every entry runs in a worker process (`astra_cuda.execution.jobs.CheckJob`), so a kernel that faults and loses
its CUDA context costs only that worker. On a backend that times kernels, every entry the gate
passes is then profiled on the bench sizes (`astra_cuda.execution.jobs.ProfileJob`): a cheat of the timing loop
is refused there (`timed_outputs`, `timed_plausibility`), and a correct variant needs a valid
profile too. Exit status 1 when any cheat gets through or any correct variant is rejected.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from astra_cuda.compile import extract
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod

from . import catalogue

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def profile_verdict(backend: str, ref, cand, spec, timeout: float) -> tuple[str, str | None, str, dict]:
    """(status, check, summary, numbers) of the entry's profile: 'failed' with `timed_outputs` or
    `timed_plausibility` when the profile is not valid."""
    p = worker.run(jobs.ProfileJob(backend, ref, cand, spec), timeout=timeout)
    numbers = {"speedup": p.speedup, "seconds": [s.seconds for s in p.sizes]}
    wrong = [m for s in p.sizes for m in s.output_failures]
    odd = [m for s in p.sizes for m in s.implausible]
    if wrong:
        return "failed", "timed_outputs", wrong[0], numbers
    if odd:
        return "failed", "timed_plausibility", odd[0], numbers
    if p.errors or not p.measured:
        return "error", "profile", (p.errors or [p.note])[0], numbers
    return "passed", None, p.summary_line(), numbers


def run(backend: str, only: list[str], sanitizer: bool | None, timeout: float, profile: bool = False) -> list[dict]:
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
            v = worker.run(jobs.CheckJob(backend, ref, cand, spec, sanitizer=sanitizer),
                           timeout=timeout)
            status, first, summary = v.status, (v.failures[0].check if v.failures else None), v.summary
            warnings, numbers = v.warnings, {}
            if profile and v.passed:
                status, first, summary, numbers = profile_verdict(backend, ref, cand, spec, timeout)
        except Exception as ex:  # noqa: BLE001 - a crashed or hung worker is a result to report
            status, first, summary, warnings, numbers = "crashed", "worker", f"{type(ex).__name__}: {ex}", [], {}
        if e.cheat and e.timed and not profile and status == "passed":
            ok = None  # a cheat of the timing loop, passed by the gate where nothing is timed: not judged here
        elif e.cheat:
            ok = status in ("failed", "crashed") and (first in e.caught_by or status == "crashed")
        else:
            ok = status == "passed"
        rows.append({"name": e.name, "example": e.example, "cheat": e.cheat, "expected": list(e.caught_by),
                     "status": status, "caught_by": first, "ok": ok, "seconds": round(time.perf_counter() - t0, 2),
                     "summary": summary, "warnings": warnings, "timed": e.timed, "profile": numbers})
        print(f"{'n/a' if ok is None else 'ok ' if ok else 'BAD'} {e.name:30s} {status:10s} {first or '-':18s} "
              f"{rows[-1]['seconds']:6.1f}s", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--no-sanitizer", action="store_true", help="skip compute-sanitizer on the GPU")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--no-profile", action="store_true", help="gate only (no profile of the entries it passes)")
    a = ap.parse_args(argv)
    rows = run(a.backend, a.only, False if a.no_sanitizer else None, a.timeout,
               profile=a.backend == "gpu" and not a.no_profile)
    cheats = [r for r in rows if r["cheat"] and r["ok"] is not None]
    good = [r for r in rows if not r["cheat"]]
    untimed = [r["name"] for r in rows if r["ok"] is None]
    line = (f"gate catalogue on {a.backend}: {sum(r['ok'] for r in cheats)}/{len(cheats)} cheats rejected, "
            f"{sum(r['ok'] for r in good)}/{len(good)} correct variants passed" +
            (f"; {len(untimed)} cheat(s) of the timing loop passed by the gate here, refused only where kernels are "
             f"timed: {', '.join(untimed)}" if untimed else ""))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"backend": a.backend, "summary": line, "results": rows}, f, indent=1)
    print(line)
    worker.shutdown()
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
