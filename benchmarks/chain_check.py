#!/usr/bin/env python3
"""A quick GPU check of the offline team's transformations (minutes instead of a full benchmark):
for each kernel, the chain of transformations the team adopts where every candidate passes (what
it does on the CPU, where speed is not measured) is replayed, and the original and the chain's
result are gated (quick gate) and timed side by side on the backend; optionally a few of the first
step's tuning neighbours, and the full gate on the result.

    python benchmarks/chain_check.py gpu FILE:KERNEL:NEIGHBOURS:FULL ...   (or @TARGETS_FILE)

NEIGHBOURS: how many tuning points of the first step to time; FULL: 'f' for the full gate.
Prints one line per kernel and writes $OUT/chains.json (default: the current directory).
The real loop (profile-driven planning, adoption only when faster, tuning) is corpus_bench.py.
"""
from __future__ import annotations

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "server"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from astra_cuda.model import source, spec as spec_mod  # noqa: E402
from astra_cuda.agents import Limits, optimize  # noqa: E402
from astra_cuda.agents.tuning import _neighbours, replay  # noqa: E402
from astra_cuda.evaluation import Check, Evaluation  # noqa: E402

import corpus_bench  # noqa: E402


def timings(e: Evaluation):
    return [(t.candidate_us, t.copy_share, t.baseline_us) for t in e.profile.sizes] if e.measured else None


def check(backend: str, path: str, kernel: str, neighbours: int, full: bool) -> dict:
    t0 = time.time()
    text = open(path).read()
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    passing = Evaluation(Check(True, "verified", "", 1, "passed"))
    r = optimize(text, path, kernel, lambda t: passing, rounds=10, spec=sp, limits=Limits(tune_points=0))
    chain = [(x.plan.idea, x.plan.params) for x in r.rounds if x.adopted]
    cand = replay(text, kernel, chain, sp) if chain else None
    ev = corpus_bench.evaluator(path, kernel, sp, backend, text, True)
    row = {"kernel": kernel, "file": path, "chain": [c[0] for c in chain]}
    e0 = ev(text)
    row.update(original=timings(e0), original_pass=e0.passed, original_summary=e0.check.summary[:300])
    if cand:
        e1 = ev(cand)
        row.update(best=timings(e1), best_pass=e1.passed, best_summary=e1.check.summary[:300])
        if not e1.passed:
            row["feedback"] = e1.check.feedback[:1500]
        alts = []
        for alt in _neighbours(text, kernel, chain, 0, sp)[:neighbours]:
            t = replay(text, kernel, [(chain[0][0], alt)] + chain[1:], sp)
            if t is not None:
                ea = ev(t)
                alts.append({"params": alt, "pass": ea.passed, "us": timings(ea), "summary": ea.check.summary[:200]})
        row["alternatives"] = alts
        if full:
            tf = time.time()
            ef = corpus_bench.evaluator(path, kernel, sp, backend, text, False)(cand, final=True)
            row.update(full_gate=ef.passed, full_summary=ef.check.summary[:300], full_s=round(time.time() - tf, 1))
        row["best_text"] = source.parse(cand).kernel(kernel).text
    row["seconds"] = round(time.time() - t0, 1)
    return row


def line(row: dict) -> str:
    o, b = row.get("original"), row.get("best")
    out = f"{row['kernel']:32s} {'+'.join(row['chain']) or '-':45s}"
    if o and b:
        out += (f" {o[0][0]:9.1f} -> {b[0][0]:9.1f} us  {o[0][0] / b[0][0]:5.2f}x  share {o[0][1] or 0:4.0%} -> "
                f"{b[0][1] or 0:4.0%}")
    out += f"  gate {row.get('best_pass')}/{row.get('full_gate')}  {row['seconds']}s"
    for a in row.get("alternatives", []):
        out += f"\n    alt {a['params']}: " + (f"{a['us'][0][0]:.1f} us {a['us'][0][1] or 0:.0%}" if a["us"]
                                                else f"{a['pass']} {a['summary'][:80]}")
    if row.get("best_pass") is False:
        out += "\n    FAIL: " + row["best_summary"]
    return out


def main(argv: list[str]) -> int:
    backend, args = argv[0], argv[1:]
    if args and args[0].startswith("@"):
        args = [ln.strip() for ln in open(args[0][1:]) if ln.strip() and not ln.startswith("#")]
    rows = []
    for a in args:
        path, kernel, neighbours, full = a.split(":")
        rows.append(check(backend, path, kernel, int(neighbours), full == "f"))
        print(line(rows[-1]), flush=True)
        with open(os.path.join(os.environ.get("OUT", "."), "chains.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
