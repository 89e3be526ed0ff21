"""What each bench size of a proposed spec moves (issue 25: "every inferred bench size of a
memory-bound kernel moves >=64 MiB, or the program's own size"). Read from the spec alone — no
compile, no run: the bytes are the profiler's own floor (`profiler.model.floor_bytes`, the bytes
its copy-ceiling floor is computed from), and a size is the program's own when inference says so
in its notes (`size `n`: the program itself uses …`).

    python benchmarks/realworld/traffic.py RESULTS.json [--cache DIR]   # recompute for a results file's specs
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIN_BYTES = 64 << 20   # issue 25's line: below it a memory-bound launch is mostly launch latency and L2

_OWN = re.compile(r"^size `(\w+)`: the program itself uses ([\d, ]+)$")


def program_sizes(notes: list[str]) -> dict[str, set[int]]:
    """The sizes the program itself uses, as inference's notes say."""
    out: dict[str, set[int]] = {}
    for n in notes:
        m = _OWN.match(n.strip())
        if m:
            out[m.group(1)] = {int(v) for v in m.group(2).replace(" ", "").split(",") if v}
    return out


def of_spec(spec, notes: list[str]) -> dict:
    """Per bench case: its sizes, the bytes the profiler's floor counts, whether every size is one
    the program itself uses; `meets`: every case moves MIN_BYTES or is the program's own."""
    from astra_cuda.profiler.model import floor_bytes
    own = program_sizes(notes)
    cases = []
    for c in spec.bench_cases():
        cases.append({"sizes": c, "bytes": floor_bytes(spec, c),
                      "own": bool(c) and all(v in own.get(n, ()) for n, v in c.items())})
    return {"cases": cases, "meets": bool(cases) and all(x["bytes"] >= MIN_BYTES or x["own"] for x in cases)}


def of_text(text: str, path: str, kernel: str, notes: list[str]) -> dict:
    """The same for a file whose text carries the spec above `kernel` (qualified name)."""
    from astra_cuda import api
    try:
        info = api.snapshot(text, path).kernel(kernel)
        if info.spec is None:
            return {"error": "no spec read"}
        return of_spec(info.spec, notes)
    except Exception as e:   # a spec the validator accepted but the byte model cannot size: recorded, not fatal
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def summary(records: list[dict]) -> dict:
    """Of the memory-bound kernels whose spec was proposed and valid: how many meet the line, and
    the others (id, the smallest bench case's MiB)."""
    mb = [r for r in records if r.get("memory_bound") and r.get("bench_traffic")]
    short = []
    for r in mb:
        t = r["bench_traffic"]
        if not t.get("meets"):
            least = min((x["bytes"] for x in t.get("cases", [])), default=None)
            short.append({"id": r["id"], "least_mib": None if least is None else round(least / 2**20, 2),
                          "error": t.get("error", "")})
    return {"measured": len(mb), "meets": len(mb) - len(short), "short": short}


def markdown(s: dict) -> list[str]:
    if not s["measured"]:
        return []
    lines = [f"Bench traffic (issue 25): {s['meets']}/{s['measured']} memory-bound kernels with a valid spec move "
             f"≥{MIN_BYTES >> 20} MiB at every bench size (or use the program's own sizes)."]
    if s["short"]:
        lines.append("Short: " + ", ".join(f"{x['id'].rsplit(':', 1)[-1]} ({x['least_mib']} MiB)" if x["least_mib"]
                                           is not None else f"{x['id'].rsplit(':', 1)[-1]} ({x['error'] or 'no case'})"
                                           for x in s["short"]) + ".")
    return lines


def main(argv=None) -> int:
    from realworld.manifest import load
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--cache", default=str(Path(__file__).resolve().parent / ".cache"))
    ap.add_argument("--write", action="store_true", help="write bench_traffic back into the results file")
    a = ap.parse_args(argv)
    from realworld.run import paste
    results = json.loads(Path(a.results).read_text())
    kernels = {k.id: k for k in load().kernels}
    from astra_cuda import api
    for r in results.get("kernels", []):
        k = kernels.get(r["id"])
        if not (r.get("spec_valid") and r.get("spec") and k is not None):
            continue
        f = Path(a.cache) / k.repo.cache_name / k.path
        if not f.is_file():
            continue
        text = f.read_text(errors="surrogateescape")
        info = next((i for i in api.snapshot(text, str(f)).kernels if i.kernel.qualified_name == k.kernel), None)
        if info is None:
            continue
        (line, col) = info.kernel.span.to_json()["start"]
        r["bench_traffic"] = of_text(paste(text, line, col, r["spec"]), str(f), k.kernel, r.get("spec_notes") or [])
    s = summary(results.get("kernels", []))
    print("\n".join(markdown(s)))
    if a.write:
        results.setdefault("summary", {})["bench_traffic"] = s
        Path(a.results).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
