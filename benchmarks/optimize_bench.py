#!/usr/bin/env python3
"""The offline agent team (no LLM) on the three examples: per-size and geomean speedups over the
original, share of the copy ceiling, rounds and wall time -> benchmarks/results/optimize.json,
and a markdown table on stdout (its last line is the one-line summary).

    python benchmarks/optimize_bench.py [--backend auto|gpu|cpu] [--rounds 8] [--out FILE]
                                        [--kernels silu_and_mul,...] [--full-gate-in-loop]
                                        [--tune 8] [--seconds S]

On the GPU the profiler times every verified candidate against the original side by side; on the
CPU speed is not measured (the table then says so and only correctness is reported). Every
round runs the quick gate; the final best kernel is checked once more with the full gate.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from astra_cuda.model import source, spec as spec_mod  # noqa: E402
from astra_cuda.agents import Limits, optimize  # noqa: E402
from astra_cuda.execution.evaluator import local_evaluator  # noqa: E402

EXAMPLES = [("silu_and_mul", "silu_and_mul"), ("fused_add_rmsnorm", "fused_add_rmsnorm_kernel"),
            ("merge_attn_states", "merge_attn_states")]
TARGETS = {"silu_and_mul": 1.46, "fused_add_rmsnorm_kernel": 1.25, "merge_attn_states": 1.26}


def make_backend(name: str):
    if name in ("auto", "gpu"):
        try:
            from astra_cuda.backends.gpu import GpuBackend
            ok, why = GpuBackend.probe()
            if ok:
                return GpuBackend()
            if name == "gpu":
                sys.exit(f"no GPU backend: {why}")
        except Exception as e:  # noqa: BLE001 - no CuPy / no driver: fall back to the CPU
            if name == "gpu":
                sys.exit(f"no GPU backend: {e}")
    from astra_cuda.backends.cpu import CpuBackend
    return CpuBackend()


def device_name(backend_name: str) -> str:
    if backend_name == "gpu":
        try:
            import cupy
            return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception:  # noqa: BLE001
            return "GPU"
    return f"CPU ({platform.processor() or platform.machine()}): speed not measured"


class _Named:
    """The backend as the worker processes will make it, known here by name only (no CUDA
    context in this process)."""

    def __init__(self, name: str):
        self.name = name


def run_one(file: str, kernel: str, backend, rounds: int, quick: bool, in_process: bool, tune: int = 8,
            seconds: float | None = None) -> dict:
    """One example through the offline team. By default the way `astra optimize` runs it: every
    candidate is judged in a worker process (a faulting candidate cannot take the GPU context of
    the run down with it); `in_process` judges them here instead."""
    path = str(ROOT / "examples" / f"{file}.cu")
    text = Path(path).read_text()
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    say = lambda p: print(f"  [{kernel}] {p.message}", file=sys.stderr)  # noqa: E731
    t0 = time.time()
    if in_process:
        ev = local_evaluator(path, kernel, sp, backend, text, quick=quick)
        r = optimize(text, path, kernel, ev, rounds=rounds, spec=sp, progress=say,
                     limits=Limits(tune_points=tune, max_seconds=seconds))
        full = local_evaluator(path, kernel, sp, backend, text, quick=False)
    else:
        import dataclasses

        from astra_cuda import api
        from astra_cuda.execution import jobs, worker
        r = api.optimize(api.snapshot(text, path), kernel, rounds=rounds, llm=None, backend=backend.name, progress=say,
                         quick=quick, tune=tune, seconds=seconds)
        job = jobs.EvaluateJob(backend.name, path, kernel, sp, text, kernel, arch="sm_90", quick=False)
        full = lambda t: worker.run(dataclasses.replace(job, text=t, final=True),  # noqa: E731 (the whole file's verdict)
                                    timeout=api.CHECK_TIMEOUT + api.PROFILE_TIMEOUT)
    wall = time.time() - t0
    evals = [x.evaluation for x in r.rounds if x.evaluation is not None and x.evaluation.seconds > 0]
    final = full(r.best) if quick else r.best_eval
    sizes = r.per_size()
    return {
        "kernel": kernel, "file": f"examples/{file}.cu", "measured": r.measured,
        "geomean_speedup": r.speedup, "target": TARGETS.get(kernel),
        "best_copy_share": r.best_eval.profile.best_copy_share if r.measured else None,
        "baseline_copy_share": r.baseline.profile.best_copy_share if r.baseline.measured else None,
        "per_size": sizes, "rounds": len(r.rounds),
        # the size of the ladder where the best version fares worst against the original (issue 29: never
        # below 0.97)
        "slowest_size": min(sizes, key=lambda t: t["speedup"]) if sizes else None,
        "adopted": [x.plan.idea for x in r.rounds if x.adopted],
        "tuning": [p.to_json() for p in r.tuning],
        "tried": [{"round": x.index, "idea": x.plan.idea if x.plan else None, "outcome": x.outcome,
                   "reason": x.reason} for x in r.rounds],
        "final_full_gate": {"passed": final.passed, "summary": final.check.summary,
                            **({} if final.passed else {"feedback": final.check.feedback[:800]})},
        # One candidate's evaluation (quick gate + side-by-side timing), and the gate's share of it.
        "eval_s_median": _median([e.seconds for e in evals]),
        "gate_share_median": _median([e.gate_seconds / e.seconds for e in evals if e.seconds > 0 and e.measured]),
        "wall_s": round(wall, 1), "stopped": r.stopped, "speed_note": r.speed_note,
        "best_kernel_source": r.best_kernel_source,
    }


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    mid = len(xs) // 2
    return round(xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2, 3)


def table(results: list[dict], device: str) -> str:
    lines = [f"Offline team (no LLM) on {device}", "",
             "| kernel | sizes | original µs | best µs | speedup | copy ceiling | target |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for res in results:
        if not res["measured"]:
            lines.append(f"| {res['kernel']} | – | – | – | not measured | – | "
                         f"{res['target']}× |")
            continue
        for s in res["per_size"]:
            share = f"{s['copy_share']:.0%}" if s["copy_share"] is not None else "–"
            size = ", ".join(f"{k}={v}" for k, v in s["sizes"].items()) + (f" ({s['role']})" if s.get("role") else "")
            lines.append(f"| {res['kernel']} | {size} | {s['baseline_us']:.2f} | {s['best_us']:.2f} | "
                         f"{s['speedup']:.3f}× | {share} | |")
        lines.append(f"| **{res['kernel']}** | geomean | | | **{res['geomean_speedup']:.3f}×** | | "
                     f"{res['target']}× |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "gpu", "cpu"])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "optimize.json"))
    ap.add_argument("--kernels", default="", help="comma-separated subset of the example files")
    ap.add_argument("--full-gate-in-loop", action="store_true", help="full gate for every candidate (slower)")
    ap.add_argument("--in-process", action="store_true", help="judge candidates in this process (no workers)")
    ap.add_argument("--tune", type=int, default=8, help="tuning points after the rounds (0: none)")
    ap.add_argument("--seconds", type=float, default=None, help="time limit per example (rounds and tuning)")
    args = ap.parse_args(argv)
    if args.in_process:
        backend = make_backend(args.backend)
    else:
        from astra_cuda import api
        backend = _Named(api.resolve_backend(args.backend))
        if backend.name == "static":
            sys.exit("no backend can run kernels here")
    device = device_name(backend.name)
    chosen = [e for e in EXAMPLES if not args.kernels or e[0] in args.kernels.split(",")]
    t0 = time.time()
    results = [run_one(f, k, backend, args.rounds, not args.full_gate_in_loop, args.in_process, args.tune,
                       args.seconds) for f, k in chosen]
    measured = [r["geomean_speedup"] for r in results if r["measured"] and r["geomean_speedup"]]
    overall = math.exp(sum(map(math.log, measured)) / len(measured)) if measured else None
    out = {"device": device, "backend": backend.name, "rounds": args.rounds, "tune_points": args.tune,
           "seconds_per_kernel": args.seconds, "geomean_speedup": overall,
           "wall_s": round(time.time() - t0, 1), "kernels": results,
           "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(table(results, device))
    ok = all(r["final_full_gate"]["passed"] for r in results)
    per = ", ".join(f"{r['kernel']} {r['geomean_speedup']:.2f}x (slowest size {r['slowest_size']['speedup']:.2f}x)"
                    if r["measured"] and r.get("slowest_size") else
                    f"{r['kernel']} {r['geomean_speedup']:.2f}x" if r["measured"] else
                    f"{r['kernel']} verified ({len(r['adopted'])} transforms)" for r in results)
    print(f"\noptimize: {'all verified' if ok else 'FULL GATE FAILED'}; {per}"
          + (f"; geomean {overall:.2f}x" if overall else "") + f"; wrote {os.path.relpath(args.out, ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
