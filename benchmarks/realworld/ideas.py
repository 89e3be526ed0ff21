"""Which of the offline team's ideas recognise their pattern in each suite kernel (issue 29).

    python benchmarks/realworld/ideas.py [--results benchmarks/results/realworld-H200.json] [--only PAT]
                                         [--out benchmarks/results/realworld-ideas.json]

For every kernel that passed as inferred in a results file, the cached public file with the spec
that run inferred pasted above the kernel (as the runner does), and each transformation's `apply`
on it: no compile, no run, a few seconds in all. It separates "the planner never sees the pattern"
from "a rewrite is proposed" (whether the proposal then passes the gate is the optimize stage's
question: `run.py --backend cpu --stage optimize`, and on a GPU whether it is faster).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(HERE.parent))

from realworld.manifest import load  # noqa: E402
from realworld.run import paste  # noqa: E402


def ideas_for(text: str, kernel: str) -> dict[str, str]:
    """idea -> 'applies' or why it does not (its pattern is absent, or it raised)."""
    from astra_cuda.agents.offline import TRANSFORMS, context_from_text
    out = {}
    ctx = context_from_text(kernel, text)
    for name, t in TRANSFORMS.items():
        try:
            out[name] = "applies" if t.apply(text, ctx) is not None else "pattern absent"
        except Exception as e:  # noqa: BLE001 - a transformation that raises is a finding, not the end
            out[name] = f"raised {e.__class__.__name__}: {str(e)[:120]}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "benchmarks/results/realworld-H200.json"))
    ap.add_argument("--only", help="kernels whose id contains this (comma-separated alternatives)")
    ap.add_argument("--cache", default=str(HERE / ".cache"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/realworld-ideas.json"))
    a = ap.parse_args()
    from astra_cuda.model import source
    results = json.loads(Path(a.results).read_text())
    wanted = [w for w in (a.only or "").split(",") if w]
    by_id = {k.id: k for k in load().select(None)}
    rows = []
    for r in results["kernels"]:
        if r.get("failure_class") != "passed" or not r.get("spec") or (wanted and not any(w in r["id"] for w in wanted)):
            continue
        k = by_id.get(r["id"])
        f = Path(a.cache) / k.repo.cache_name / k.path if k is not None else None
        if f is None or not f.is_file():
            rows.append({"id": r["id"], "error": "not in the cache (benchmarks/realworld/fetch.py --only ...)"})
            continue
        text = f.read_text(errors="surrogateescape")
        kern = source.parse(text).kernel(r["kernel"])
        if kern is None:
            rows.append({"id": r["id"], "error": "kernel not found in the cached file"})
            continue
        pasted = paste(text, kern.span.start_line + 1, kern.span.start_col + 1, r["spec"])
        found = ideas_for(pasted, r["kernel"])
        opt = (r.get("gpu") or {}).get("optimize") or {}
        rows.append({"id": r["id"], "category": r.get("category"), "applies": [i for i, v in found.items() if v == "applies"],
                     "raised": {i: v for i, v in found.items() if v.startswith("raised")},
                     "share_before": opt.get("share_before"), "speedup_then": opt.get("speedup")})
    Path(a.out).write_text(json.dumps({"results": Path(a.results).name, "kernels": rows}, indent=1) + "\n")
    for row in rows:
        share = row.get("share_before")
        print(f"{row['id'][:88]:88s} {'' if share is None else f'{share:5.0%}'}  "
              f"{', '.join(row.get('applies') or []) or row.get('error') or '-'}"
              + (f"  RAISED {row['raised']}" if row.get("raised") else ""))
    some = sum(bool(r.get("applies")) for r in rows)
    print(f"{some}/{len(rows)} kernels: at least one idea applies; written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
