"""The offline team on the kernel families of issue 29 item 3, on a GPU: each kernel through
`astra optimize --llm offline` as a user runs it (a whole CLI process), recording which ideas
were adopted and which were not (with the reason), the speedup and the share of the copy ceiling
before and after at every size of the ladder.

    python benchmarks/family_bench.py [--backend gpu] [--rounds 6] [--tune 3] [--only silu_strided] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "agents" / "kernels"
# (file, kernel, family): the whole-array sum with one atomic per element; a byte histogram
# with one global atomic per element; int8 dequantize with a scale per group; a naive transpose; the Astra paper's
# silu baseline (grid-stride rows, runtime strides) whose unit-stride path should be vectorized; a
# tiled transpose whose unpadded tile is read down its columns (bank conflicts); a row norm over a
# grid-stride row loop in a device function launched with a capped grid (apex's norms' shape)
FAMILIES = [("sum_atomic.cu", "squared_norm_kernel", "whole-array reduction"),
            ("histogram_atomic.cu", "histogram256_kernel", "histogram"),
            ("quant_int8.cu", "dequant_int8_kernel", "dequantize with group scales"),
            ("transpose_naive.cu", "transpose_naive_kernel", "transpose"),
            ("silu_strided.cu", "silu_and_mul_kernel", "vectorize after unit stride"),
            ("transpose_tile_unpadded.cu", "transpose_tile_kernel", "transpose tile padding"),
            ("rownorm_capped_grid.cu", "rownorm_kernel", "row grid lift")]


def share(ev: dict | None, role: str = "bench") -> float | None:
    sizes = [t for t in (((ev or {}).get("profile") or {}).get("sizes") or []) if t.get("role", "bench") in ("", role)]
    return sizes[-1].get("copy_share") if sizes else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tune", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=50, help="per kernel: no round or tuning point starts after it")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="", help="only the kernels whose file or kernel name contains this")
    a = ap.parse_args(argv)
    rows = []
    for file, kernel, family in FAMILIES:
        if a.only and a.only not in file and a.only not in kernel:
            continue
        with tempfile.TemporaryDirectory(prefix="astra-family-") as d:
            ws = Path(d)
            (ws / ".git").mkdir()
            f = ws / file
            shutil.copy(KERNELS / file, f)
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "astra_cuda", "optimize", str(f), "--kernel", kernel,
                                "--backend", a.backend, "--llm", "offline", "--rounds", str(a.rounds), "--tune",
                                str(a.tune), "--time-budget", str(a.seconds), "--fresh", "--json"], capture_output=True, text=True, timeout=600)
            seconds = time.monotonic() - t0
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = {"error": f"exit {p.returncode}: {p.stderr[-1500:]}"}
        rounds = [{"idea": (r.get("plan") or {}).get("idea"), "params": (r.get("plan") or {}).get("params"),
                   "outcome": r.get("outcome"), "reason": r.get("reason"),
                   # which timed-output comparison or plausibility rule refused it, in the gate's words
                   "detail": (((r.get("evaluation") or {}).get("check") or {}).get("feedback") or "")[:1500]}
                  for r in out.get("rounds") or []]
        row = {"file": file, "kernel": kernel, "family": family, "seconds": round(seconds, 1),
               "speedup": out.get("speedup"), "improved": out.get("improved"), "error": out.get("error"),
               "share_before": share(out.get("baseline")), "share_after": share(out.get("best")),
               "per_size": out.get("per_size"), "rounds": rounds, "tuning": out.get("tuning"),
               "device": ((out.get("best") or {}).get("profile") or {}).get("device"),
               "best_kernel": out.get("best_kernel_source")}
        rows.append(row)
        adopted = [r["idea"] for r in rounds if r["outcome"] == "adopted"]
        sb, sa = row["share_before"], row["share_after"]
        print(f"{kernel} ({family}): {row['speedup'] or 0:.2f}x, copy ceiling "
              f"{100 * (sb or 0):.0f}% -> {100 * (sa or 0):.0f}%, adopted {'+'.join(adopted) or 'nothing'}"
              f"{'; error: ' + str(row['error'])[:200] if row['error'] else ''}", flush=True)
        for r in rounds:
            if r["outcome"] != "adopted":
                print(f"  not kept: {r['idea']} {r['params']}: {r['outcome']}: {str(r['reason'])[:160]}", flush=True)
                if r["outcome"] == "failed" and r["detail"]:
                    print(f"    {r['detail'][:600]}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"backend": a.backend, "rounds": a.rounds, "tune": a.tune, "seconds": a.seconds,
                                           "kernels": rows}, indent=1) + "\n")
    print("; ".join(f"{r['kernel']} {r['speedup'] or 0:.2f}x {100 * (r['share_after'] or 0):.0f}%" for r in rows))
    return 0 if all(r["speedup"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
