#!/usr/bin/env python3
"""Candidates evaluated per minute: this machine's worker pool vs the Ray executor (a Ray runtime
started here with N GPUs), on the same candidates, with the same verdicts.

    python benchmarks/cluster_bench.py [--backend gpu|cpu|auto] [--gpus 1,2,4] [--repeat 1]
                                       [--per-kernel 5] [--kernels silu_and_mul,...]
                                       [--optimize --candidates K] [--out FILE]

The candidates are the original and the offline team's rewrites of each example kernel, each
evaluated as the optimize loop does it (`astra_cuda.execution.jobs.EvaluateJob`: the quick gate, then timing
against the original at every bench size). Each executor is warmed first (its workers started,
one evaluation per kernel, not counted), then evaluates every candidate `--repeat` times with as
many in flight as it has slots (the local pool: one; Ray: one per GPU, never two on one GPU).

Reported per executor: candidates per minute, wall time, and each evaluation's verdict, speedup,
node and GPU; then the Ray overhead on one GPU (target ≤10%), the scaling over GPUs, and whether
the verdicts equal the local pool's. `--optimize` also times `astra optimize` over examples/ with
K candidates per round on each GPU count and checks the adopted rewrites are the same.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from astra_cuda import api  # noqa: E402
from astra_cuda.execution import executors, jobs  # noqa: E402
from astra_cuda.model import source, spec as spec_mod  # noqa: E402
from astra_cuda.agents.offline import TRANSFORMS, context_from_spec  # noqa: E402

EXAMPLES = [("silu_and_mul", "silu_and_mul"), ("fused_add_rmsnorm", "fused_add_rmsnorm_kernel"),
            ("merge_attn_states", "merge_attn_states")]
TIMEOUT = api.CHECK_TIMEOUT + api.PROFILE_TIMEOUT


def workload(backend: str, kernels: list[str], per_kernel: int) -> list[tuple[str, jobs.EvaluateJob]]:
    """(label, job) for the original and the rewrites of each kernel, in a fixed order."""
    out = []
    for file, kernel in EXAMPLES:
        if kernel not in kernels:
            continue
        path = str(ROOT / "examples" / f"{file}.cu")
        text = Path(path).read_text()
        m = source.parse(text)
        sp = spec_mod.load(m.kernel(kernel), m)
        job = jobs.EvaluateJob(backend, path, kernel, sp, text, kernel, quick=True,
                               context=api.project_context(path))
        texts = [("original", text)]
        ctx = context_from_spec(kernel, sp)
        for name, t in TRANSFORMS.items():
            rw = t.apply(text, ctx)
            if rw is not None and rw.text not in (x for _, x in texts):
                texts.append((name, rw.text))
        out += [(f"{kernel}:{name}", dataclasses.replace(job, text=t)) for name, t in texts[:per_kernel]]
    return out


def evaluate_all(ex, backend: str, work: list, repeat: int) -> dict:
    slots = ex.capacity(backend)
    gpu_model = None

    def one(item):
        label, job = item
        t0 = time.perf_counter()
        ran = ex.run(job, backend=backend, timeout=TIMEOUT, gpu_model=gpu_model)
        e = ran.value
        return {"candidate": label, "passed": e.passed, "cases": e.check.cases, "summary": e.check.summary,
                "speedup": e.speedup, "seconds": round(time.perf_counter() - t0, 3),
                "node": ran.where.node, "gpu": ran.where.gpu, "gpu_index": ran.where.gpu_index}
    # warm: start the workers and compile each kernel's reference once, not counted
    seen = set()
    warm = [w for w in work if not (w[1].kernel in seen or seen.add(w[1].kernel))]
    with ThreadPoolExecutor(slots) as pool:
        list(pool.map(one, warm))
    items = work * repeat
    t0 = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        evals = list(pool.map(one, items))
    wall = time.perf_counter() - t0
    return {"executor": ex.describe(), "slots": slots, "evaluations": len(evals), "wall_s": round(wall, 2),
            "per_minute": round(60.0 * len(evals) / wall, 2), "evals": evals}


def optimize_examples(backend: str, candidates: int, kernels: list[str], ex: executors.Executor) -> dict:
    from astra_cuda.cli import batch
    from astra_cuda.session import Session
    paths = [str(ROOT / "examples" / f"{f}.cu") for f, k in EXAMPLES if k in kernels]
    t0 = time.perf_counter()
    res = batch.run(paths, options={"rounds": 5, "backend": backend, "candidates": candidates, "quick": True,
                                      "session": Session(ex)})
    return {"wall_s": round(time.perf_counter() - t0, 1),
            "kernels": {r.target.kernel: {"speedup": r.speedup, "state": r.state, "gpu": r.gpu,
                                          "adopted": [x.plan.idea for x in r.result.rounds if x.adopted]
                                          if r.result else None} for r in res.rows}}


def verdicts(run: dict) -> list[tuple]:
    return [(e["candidate"], e["passed"], e["cases"]) for e in run["evals"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto", choices=["auto", "gpu", "cpu"])
    ap.add_argument("--gpus", default="1", help="GPU counts for the Ray runtime, e.g. 1,2,4 (default 1)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--per-kernel", type=int, default=5, help="candidates per kernel (original first)")
    ap.add_argument("--kernels", default="silu_and_mul,fused_add_rmsnorm_kernel")
    ap.add_argument("--optimize", action="store_true", help="also time astra optimize over the examples")
    ap.add_argument("--candidates", type=int, default=2, help="with --optimize: candidates per round")
    ap.add_argument("--cpus", type=int, default=0, help="CPUs of the Ray runtime (default: this machine's)")
    ap.add_argument("--cpu-slots", type=int, default=1,
                    help="CPU backend: Ray slots (default 1, the local pool's size: overhead, not scaling)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cluster.json"))
    a = ap.parse_args()
    kernels = a.kernels.split(",")
    os.environ["ASTRA_RAY_CPU_SLOTS"] = str(a.cpu_slots)
    from astra_cuda.session import Session
    backend = Session().resolve_backend(a.backend)
    if backend == "static":
        sys.exit("no backend runs kernels here")
    work = workload(backend, kernels, a.per_kernel)
    print(f"{len(work)} candidates x {a.repeat} on the {backend} backend", file=sys.stderr)
    out: dict = {"backend": backend, "candidates": [w[0] for w in work], "repeat": a.repeat, "runs": {}}

    local_ex = executors.LocalExecutor()
    local = evaluate_all(local_ex, backend, work, a.repeat)
    out["runs"]["local"] = local
    out["device"] = next((e["gpu"] for e in local["evals"] if e["gpu"]), "") or f"CPU ({os.cpu_count()} cores)"
    if a.optimize:
        out["optimize_local"] = optimize_examples(backend, a.candidates, kernels, local_ex)
    print(f"local pool: {local['per_minute']} candidates/min", file=sys.stderr)

    from astra_cuda.execution.executors.ray_cluster import RayExecutor
    counts = [int(x) for x in a.gpus.split(",")] if backend == "gpu" else [0]
    for n in counts:
        ex = RayExecutor(None, num_cpus=a.cpus or None, num_gpus=n)
        try:
            key = f"ray-{n}gpu" if backend == "gpu" else "ray"
            run = evaluate_all(ex, backend, work, a.repeat)
            out["runs"][key] = run
            if a.optimize:
                out[f"optimize_{key}"] = optimize_examples(backend, a.candidates, kernels, ex)
            print(f"{key}: {run['per_minute']} candidates/min on {run['slots']} slot(s)", file=sys.stderr)
        finally:
            ex.close()

    base = out["runs"]["local"]
    one = out["runs"].get("ray-1gpu") or out["runs"].get("ray")
    out["ray_overhead_1gpu"] = round(1.0 - one["per_minute"] / base["per_minute"], 4) if one else None
    out["scaling"] = {k: round(r["per_minute"] / one["per_minute"], 3) for k, r in out["runs"].items()
                      if k.startswith("ray") and one}
    out["verdicts_equal"] = all(verdicts(r) == verdicts(base) for r in out["runs"].values())
    out["every_timing_has_gpu"] = backend != "gpu" or all(e["gpu"] for r in out["runs"].values() for e in r["evals"])
    out["one_gpu_model"] = len({e["gpu"] for r in out["runs"].values() for e in r["evals"]}) <= 1
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))

    print(f"Candidates evaluated per minute on {out['device']} ({backend} backend, {len(work)} candidates "
          f"x {a.repeat})\n\n| executor | slots | evaluations | wall s | per minute | vs 1 slot |\n|---|---:|---:|---:|---:|---:|")
    for k, r in out["runs"].items():
        print(f"| {k} | {r['slots']} | {r['evaluations']} | {r['wall_s']} | {r['per_minute']} | "
              f"{out['scaling'].get(k, 1.0) if k != 'local' else '–'} |")
    over = out["ray_overhead_1gpu"]
    print(f"\nray overhead on one slot {100 * over:.1f}% (target <=10%); verdicts equal: {out['verdicts_equal']}; "
          f"every timing names its GPU: {out['every_timing_has_gpu']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
