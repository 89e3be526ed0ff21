#!/usr/bin/env python3
"""The offline team (no LLM) on the real-code corpus (benchmarks/corpus/): per kernel the original
and best µs, their shares of the copy ceiling and the adopted steps; geomean over the corpus'
naive kernels -> benchmarks/results/corpus_bench.json, and a markdown table on stdout (its last
line is the one-line summary).

    python benchmarks/corpus_bench.py [--backend auto|gpu|cpu] [--rounds 8] [--tune 4]
                                      [--seconds 90] [--budget S] [--kernels a,b] [--out FILE]
                                      [--corpus DIR]

The specs are the ones inference proposes for the files as they are (the corpus' own runner
pastes them into a copy), with two changes a user would make to benchmark them, both written into
the results: timed sizes of a realistic workload (BENCH below: the sizes the files' own main()
uses, or LLM shapes; inference proposes small ones), and for float reductions the tolerance the
corpus gives versions of a reduction, loosened to what its own improved version needs
(REDUCTION_TOL: a sum over thousands of floats reassociated across threads differs from the
sequential one by more than fp32's default).

On the GPU every candidate is judged by the quick gate and timed side by side with the original
(each evaluation in a worker process, as `astra optimize` does), and the final best passes the
full gate again. On the CPU only correctness is reported. "Original µs" is the kernel's own time
as it is in the file; a kernel whose spec names an earlier version as its reference is still
verified against that version.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from astra_cuda.model import source, spec as spec_mod  # noqa: E402
from astra_cuda.agents import Limits, optimize  # noqa: E402

# Timed sizes per kernel (names that the inferred spec does not use are left alone).
BENCH = {
    "gelu_forward_kernel1": {"N": [67108864]}, "gelu_forward_kernel2": {"N": [67108864]},
    "residual_forward_kernel1": {"N": [67108864]}, "residual_forward_kernel2": {"N": [67108864]},
    "layernorm_forward_kernel1": {"N": [32768], "C": [768]}, "layernorm_forward_kernel2": {"N": [32768], "C": [768]},
    "softmax_forward_kernel1": {"N": [32768], "C": [1024]}, "softmax_forward_kernel2": {"N": [32768], "C": [1024]},
    "adamw_kernel1": {"num_parameters": [16777216]}, "adamw_kernel2": {"num_parameters": [16777216]},
    # B = 128 (GPT-2 small, batch 128): ~200 MB moved like the rest; at B = 32 (53 MB) a copy of
    # the same bytes reaches only 80% of the copy ceiling (H100), so no kernel could show 85% there
    "encoder_forward_kernel1": {"B": [128], "T": [1024], "C": [768], "V": [1024]},
    "encoder_forward_kernel2": {"B": [128], "T": [1024], "C": [768], "V": [1024]},
    "act_and_mul_kernel": {"num_tokens": [4096], "d": [11008]},
    "rms_norm_kernel": {"num_tokens": [4096], "hidden_size": [8192]},
    "fused_add_rms_norm_kernel": {"num_tokens": [4096], "hidden_size": [8192]},
    "scale_rows_vec_kernel": {"num_rows": [4096], "hidden_size": [8192]},
    "vectorAdd": {"numElements": [33554432]}, "saxpy": {"n": [33554432]},
    "row_scale": {"rows": [8192], "cols": [4096]}, "relu_half": {"n": [67108864]},
}
# Measured on an H100: on the gate's "large inputs" the corpus' own improved layernorm (kernel2)
# differs from the naive kernel1 by 2.4e-4 (absolute) on outputs near zero: the sequential float
# sums of the reference lose that much themselves.
REDUCTION_TOL = {"atol": 1e-3, "rtol": 1e-3}
COPY_TARGET, START_BELOW = 0.85, 0.70
NAIVE = ("the corpus' naive kernels: the first version of each kernel-development file and the plain samples "
         "(the extension-style kernels are production code, their improved versions later ones)")   # issue 11: kernels starting below 70% of the ceiling end at >= 85%


@dataclass(frozen=True)
class Entry:
    file: str
    kernel: str
    style: str = ""
    category: str = ""
    dtype: str = ""
    naive: str | None = None
    improved: str | None = None
    memory_bound: bool = True
    note: str = ""


def manifest(corpus_dir: Path) -> list[Entry]:
    """The corpus' kernels (its corpus.toml)."""
    data = tomllib.loads((corpus_dir / "corpus.toml").read_text())
    return [Entry(**{k: v for k, v in e.items() if k in Entry.__dataclass_fields__}) for e in data["kernel"]]


def set_bench(comment: str, sizes: dict[str, list[int]], known: set[str]) -> str:
    """The spec comment with its [bench] table replaced by `sizes` (names the spec knows only)."""
    lines = comment.split("\n")
    out, skipping, placed = [], False, False
    rows = [f"{k} = {json.dumps(v)}" for k, v in sizes.items() if k in known]
    for ln in lines:
        head = ln.strip()
        if head.startswith("[") and not head.startswith("[["):
            skipping = head == "[bench]"
            if head == "[bench]":
                out += [ln] + rows
                placed = True
                continue
            if head == "[args]" and not placed:
                out += ["[bench]"] + rows + [""]
                placed = True
        if not skipping:
            out.append(ln)
    return "\n".join(out)


def relax_float_outputs(comment: str, spec) -> tuple[str, list[str]]:
    """REDUCTION_TOL on float outputs that give no tolerance of their own."""
    changed = []
    lines = comment.split("\n")
    for i, ln in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z_]\w*)(\s*=\s*\{)(.*)\}\s*$", ln)
        if not m or m.group(2) not in spec.args:
            continue
        a = spec.args[m.group(2)]
        if a.pointer and (a.output or a.inout) and a.dtype.name in ("float", "double") and "atol" not in ln:
            lines[i] = (f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(4).rstrip()}, "
                        f"atol = {REDUCTION_TOL['atol']}, rtol = {REDUCTION_TOL['rtol']} }}")
            changed.append(a.name)
    return "\n".join(lines), changed


def prepared(path: Path, kernel: str, category: str) -> tuple[str, list[str]]:
    """The file text with the kernel's spec adjusted for the benchmark, and what was adjusted."""
    text = path.read_text()
    k = source.parse(text).kernel(kernel)
    if k is None or k.spec is None:
        raise ValueError(f"{kernel}: no spec was inferred")
    spec = spec_mod.load(k, source.parse(text))
    start, end = k.spec.span.start_byte, k.spec.span.end_byte
    comment = text.encode()[start:end].decode()
    notes = []
    sizes = BENCH.get(kernel, {})
    if sizes:
        comment = set_bench(comment, sizes, set(spec.sizes))
        notes.append("bench " + ", ".join(f"{n}={v[0]}" for n, v in sizes.items() if n in spec.sizes))
    if category == "reduction":
        comment, relaxed = relax_float_outputs(comment, spec)
        if relaxed:
            notes.append(f"reduction tolerance on {', '.join(relaxed)}")
    data = text.encode()
    new = (data[:start] + comment.encode() + data[end:]).decode()
    spec_mod.load(source.parse(new).kernel(kernel), source.parse(new))   # still a valid spec
    return new, notes


def evaluator(path: str, kernel: str, spec, backend: str, text: str, quick: bool):
    """evaluate(file_text, final=False) in a worker process, as `astra optimize` judges candidates
    (final: the whole file compiled by nvcc, never the search's fast path: `agents.final_gate`)."""
    import dataclasses
    from astra_cuda import api
    from astra_cuda.execution import jobs, worker
    from astra_cuda.evaluation import Check, Evaluation
    job = jobs.EvaluateJob(backend, path, kernel, spec, text, spec.reference or kernel, arch="sm_90", quick=quick)

    def evaluate(candidate: str, final: bool = False):
        try:
            return worker.run(dataclasses.replace(job, text=candidate, final=final),
                              timeout=api.CHECK_TIMEOUT + api.PROFILE_TIMEOUT)
        except worker.WorkerError as e:
            msg = f"the candidate could not be evaluated: {e}"
            return Evaluation(Check(False, msg, msg, 0, backend))
    return evaluate


def on_candidates(evaluate):
    """What `agents.optimize` is given, as `api.optimize` gives it: the search's evaluate and the
    final verdict on the whole file, without which nothing the GPU's fast path judged is adopted."""
    from astra_cuda.evaluation import OnCandidates
    return OnCandidates(lambda c: evaluate(c.text), final=lambda c: evaluate(c.text, final=True))


def run_one(entry, root: Path, backend: str, rounds: int, tune: int, seconds: float) -> dict:
    path = root / entry.file
    t0 = time.time()
    base = {"kernel": entry.kernel, "file": entry.file, "category": entry.category, "style": entry.style,
            "naive": entry.naive is None and entry.style != "ext", "memory_bound": entry.memory_bound}
    try:
        text, notes = prepared(path, entry.kernel, entry.category)
    except Exception as e:  # noqa: BLE001 - a spec inference could not produce: reported, not benchmarked
        return {**base, "error": f"not benchmarked: {e}"}
    path.write_text(text)
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(entry.kernel), m)
    say = lambda p: print(f"  [{entry.kernel}] {p.message}", file=sys.stderr)  # noqa: E731
    r = optimize(text, str(path), entry.kernel, on_candidates(evaluator(str(path), entry.kernel, sp, backend, text, True)),
                 rounds=rounds, spec=sp, progress=say, limits=Limits(max_seconds=seconds, tune_points=tune))
    # The final best passes the full gate again, on its whole file; where it does not (the quick
    # gate ran fewer cases), the best earlier version that does is the result, and the table says so.
    full_gate = evaluator(str(path), entry.kernel, sp, backend, text, False)
    full = lambda cand: full_gate(cand, final=True)  # noqa: E731
    best, best_eval, fell_back, kept = r.best, r.best_eval, "", len(r.rounds)
    final = full(best) if r.improved else r.baseline
    if r.improved and not final.passed:
        earlier = [(x.index, x.candidate, x.evaluation) for x in reversed(r.rounds) if x.adopted and
                   x.candidate not in (None, r.best)]
        fell_back = f"the final best failed the full gate ({final.check.summary[:200]})"
        for idx, cand, ev in earlier + [(0, text, r.baseline)]:
            final = full(cand) if idx else r.baseline
            if final.passed:
                best, best_eval, kept = cand, ev, idx
                fell_back += f"; kept round {idx}'s version" if idx else "; kept the original"
                break
    r.best, r.best_eval = best, best_eval
    out = {**base, "spec_changes": notes, "measured": r.measured, "error": r.error, "fell_back": fell_back,
           "adopted": [x.plan.idea for x in r.rounds if x.adopted and x.index <= kept],
           "tried": [{"round": x.index, "idea": x.plan.idea if x.plan else None, "outcome": x.outcome,
                      "reason": x.reason[:300], "why": x.plan.why if x.plan else "",
                      # a refusal's evidence (which check, which numbers), not only its summary
                      **({"feedback": x.evaluation.check.feedback[:800]} if x.outcome == "failed" and
                         x.evaluation is not None else {})} for x in r.rounds],
           "tuning": [p.to_json() for p in r.tuning], "stopped": r.stopped,
           "final_full_gate": {"passed": final.passed, "summary": final.check.summary},
           "wall_s": round(time.time() - t0, 1), "best_kernel_source": r.best_kernel_source}
    if r.measured and r.baseline.measured:
        sizes = []
        for b, c in zip(r.baseline.profile.sizes, r.best_eval.profile.sizes):
            sizes.append({"sizes": b.sizes, "role": b.role, "bytes": sp.bytes_moved(b.sizes),
                          "original_us": b.candidate_us, "best_us": c.candidate_us,
                          "speedup": b.candidate_us / c.candidate_us,
                          "original_share": b.copy_share, "best_share": c.copy_share})
        out["per_size"] = sizes
        # the headline numbers come from the spec's bench sizes, as `astra optimize` reports them: the
        # ladder's decode and prefill points are judged one by one (per_size), never averaged in (a
        # spec with one bench size and two launch-bound decode points read as ~1x: silu's inferred spec)
        bench = [s for s in sizes if s["role"] in ("", "bench")] or sizes
        out["speedup"] = _geomean([s["speedup"] for s in bench])
        out["original_share"] = min((s["original_share"] for s in bench if s["original_share"] is not None),
                                    default=None)
        out["best_share"] = min((s["best_share"] for s in bench if s["best_share"] is not None), default=None)
        out["slowest_size"] = min(sizes, key=lambda s: s["speedup"])
        out["meets_target"] = (out["original_share"] or 0) >= START_BELOW or (out["best_share"] or 0) >= COPY_TARGET
    return out


def same_size_copies(results: list[dict]) -> None:
    """Adds to each timed size the time of a device-to-device copy moving the same bytes (half
    read, half written) after the same L2 flush as the profiler's timings, and its share of the
    copy ceiling: what moving that many bytes can reach. The ceiling is a 1 GB copy's bandwidth;
    at tens of MB a copy reaches less of it (the start and end of a launch weigh more), so a
    kernel's share is read against this one. Runs after every kernel, in this process: the
    workers have finished timing."""
    import cupy as cp
    import numpy as np
    rt, stream = cp.cuda.runtime, cp.cuda.get_current_stream().ptr
    flush = cp.empty(max(2 * rt.getDeviceProperties(rt.getDevice())["l2CacheSize"], 64 << 20), dtype=cp.uint8)
    for r in results:
        for s in r.get("per_size", []):
            if not s.get("bytes") or not s.get("best_share"):
                continue
            half = s["bytes"] // 2
            src, dst = cp.ones(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8)
            times = []
            for i in range(55):
                rt.memsetAsync(flush.data.ptr, 0, flush.nbytes, stream)
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                rt.memcpyAsync(dst.data.ptr, src.data.ptr, half, rt.memcpyDeviceToDevice, stream)
                end.record()
                end.synchronize()
                if i >= 5:
                    times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
            del src, dst
            copy_us = float(np.median(times))
            ceiling = s["bytes"] / (s["best_us"] * 1e-6) / s["best_share"]   # the bytes/s the shares are of
            s["same_bytes_copy_us"] = copy_us
            s["same_bytes_copy_share"] = 2 * half / (copy_us * 1e-6) / ceiling
        sizes = [s for s in r.get("per_size", []) if s.get("same_bytes_copy_us")]
        if sizes:
            r["same_bytes_copy_share"] = min(s["same_bytes_copy_share"] for s in sizes)
            r["best_vs_same_bytes_copy"] = min(s["same_bytes_copy_us"] / s["best_us"] for s in sizes)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def summary(results: list[dict], device: str, backend: str, args, wall: float) -> dict:
    naive = [r["speedup"] for r in results if r.get("naive") and r.get("speedup")]
    out = {"device": device, "backend": backend, "rounds": args.rounds, "tune_points": args.tune,
           "seconds_per_kernel": args.seconds, "naive_means": NAIVE,
           "geomean_naive": _geomean(naive), "naive_count": len(naive),
           "geomean_all": _geomean([r["speedup"] for r in results if r.get("speedup")]),
           "targets": {"start_below": START_BELOW, "end_at": COPY_TARGET},
           "same_bytes_copy_means": ("a device-to-device copy of the kernel's bytes at its timed size, after the same "
                                     "L2 flush: its share of the (1 GB) copy ceiling is what moving that many bytes "
                                     "reaches"),
           "wall_s": round(wall, 1), "kernels": results,
           "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return out


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "–"


def table(results: list[dict], device: str) -> str:
    lines = [f"Offline team (no LLM) on the real-code corpus, {device}", "",
             "| kernel | naive | original µs | best µs | speedup | copy ceiling (original → best) | "
             "a copy of the same bytes | adopted | full gate |",
             "|---|:-:|---:|---:|---:|---|---:|---|:-:|"]
    for r in results:
        gate = "✓" if r.get("final_full_gate", {}).get("passed") else "✗"
        if r.get("error") and not r.get("measured"):
            lines.append(f"| {r['kernel']} | {'✓' if r['naive'] else ''} | – | – | – | {r['error'][:60]} | | | |")
            continue
        if not r.get("per_size"):
            lines.append(f"| {r['kernel']} | {'✓' if r['naive'] else ''} | – | – | not measured | – | – | "
                         f"{', '.join(r['adopted']) or '–'} | {gate} |")
            continue
        s = next((x for x in r["per_size"] if x.get("role", "") in ("", "bench")), r["per_size"][0])
        lines.append(f"| {r['kernel']} | {'✓' if r['naive'] else ''} | {s['original_us']:.1f} | {s['best_us']:.1f} | "
                     f"{r['speedup']:.2f}× | {_pct(r['original_share'])} → {_pct(r['best_share'])} | "
                     f"{_pct(r.get('same_bytes_copy_share'))} | {', '.join(r['adopted']) or '–'} | {gate} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "gpu", "cpu"])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tune", type=int, default=4, help="tuning points per kernel")
    ap.add_argument("--seconds", type=float, default=90.0, help="time limit per kernel")
    ap.add_argument("--budget", type=float, default=None,
                    help="wall time for the whole run: a kernel starts only while its time limit, twice over "
                         "(the final full gate and slow originals), still fits; the rest is reported as not run")
    ap.add_argument("--kernels", default="", help="comma-separated subset (kernel names), run in this order")
    ap.add_argument("--naive-only", action="store_true", help="only the corpus' naive kernels")
    ap.add_argument("--corpus", default=str(ROOT / "benchmarks" / "corpus"))
    ap.add_argument("--specs-given", action="store_true",
                    help="the corpus' files already carry their specs: no inference")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "corpus_bench.json"))
    args = ap.parse_args(argv)
    corpus_dir = Path(args.corpus).resolve()
    from astra_cuda import api
    backend = api.resolve_backend(args.backend)
    if backend == "static":
        sys.exit("no backend can run kernels here")
    device = "CPU: speed not measured"
    if backend == "gpu":
        from astra_cuda.execution import jobs, worker
        facts = worker.run(jobs.GpuFactsJob(), timeout=60.0) or ""
        device = next((f.split(": ", 1)[1] for f in facts.split(", ") if f.startswith("name: ")), "GPU")
    wanted = args.kernels.split(",") if args.kernels else []
    entries = [e for e in manifest(corpus_dir)
               if (not wanted or e.kernel in wanted) and (not args.naive_only or e.naive is None)]
    entries.sort(key=lambda e: wanted.index(e.kernel) if wanted else 0)   # in the order asked for
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="astra-corpus-") as tmp:
        root = Path(tmp) / "corpus"
        if args.specs_given:
            shutil.copytree(corpus_dir, root, ignore=shutil.ignore_patterns("__pycache__", ".astra"))
            (root / ".git").mkdir(exist_ok=True)
        else:
            sys.path.insert(0, str(corpus_dir))
            import corpus as corpus_mod  # the corpus' own spec inference, as its runner uses it
            corpus_mod.with_inferred_specs(corpus_dir, root, entries)
        results, skipped = [], []
        out = summary(results, device, backend, args, 0.0)
        for e in entries:   # written after every kernel: a run cut short keeps what it measured
            if args.budget is not None and time.time() - t0 + 2 * args.seconds > args.budget:
                skipped.append(e.kernel)
                continue
            results.append(run_one(e, root, backend, args.rounds, args.tune, args.seconds))
            out = summary(results, device, backend, args, time.time() - t0)
            print(table(results[-1:], device).split("\n")[-1], flush=True)
    if backend == "gpu" and results:
        same_size_copies(results)
        out = summary(results, device, backend, args, time.time() - t0)
    if skipped:
        out["not_run"] = {"kernels": skipped, "why": f"the run's budget of {args.budget:g} s"}
        Path(args.out).write_text(json.dumps(out, indent=2))
    print(table(results, device))
    gated = all(r.get("final_full_gate", {}).get("passed") for r in results if not r.get("error"))
    missed = [r["kernel"] for r in results if r.get("meets_target") is False]
    naive = [r["speedup"] for r in results if r.get("naive") and r.get("speedup")]
    line = (f"corpus: {len(results)} kernels, {'all final bests pass the full gate' if gated else 'FULL GATE FAILED'}"
            + (f"; geomean {out['geomean_naive']:.2f}x over {len(naive)} naive kernels" if naive else "")
            + (f"; below {COPY_TARGET:.0%} of the ceiling: {', '.join(missed)}" if missed else "")
            + (f"; not run (budget): {len(skipped)}" if skipped else "")
            + f"; {device}; wrote {os.path.relpath(args.out, ROOT)}")
    print("\n" + line)
    return 0 if gated else 1


if __name__ == "__main__":
    sys.exit(main())
