#!/usr/bin/env python3
"""The offline team with an inferred spec against the same team with a hand-written one (issue 25:
"the speedup with inferred specs is within 10% of the speedup with hand-written specs").

    python benchmarks/inferred_vs_hand.py [--backend auto|gpu|cpu] [--rounds 4] [--tune 2]
                                          [--seconds 60] [--kernels silu_and_mul,...] [--out FILE]

For each kernel of examples/ (their specs are written by hand): the file as it is, and the same
file with its spec removed and replaced by what `astra spec` proposes for it (run first, as a
user gets it). Each is optimized by the offline team exactly as `benchmarks/corpus_bench.py` does
(quick gate per candidate, timed beside the original, the final best through the full gate), and
the table gives both speedups (at the spec's bench sizes, as `astra optimize` reports them; each
ladder size is in the JSON's `per_size`), their ratio and each spec's timed sizes. On the CPU only
correctness is reported (no speedup). Results -> benchmarks/results/inferred_vs_hand.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_bench  # noqa: E402
from astra_cuda import api  # noqa: E402
from astra_cuda.model import source, spec as spec_mod  # noqa: E402

EXAMPLES = [("silu_and_mul.cu", "silu_and_mul"), ("fused_add_rmsnorm.cu", "fused_add_rmsnorm_kernel"),
            ("merge_attn_states.cu", "merge_attn_states")]
WITHIN = 0.10   # the target: the inferred spec's speedup within 10% of the hand-written one's


def inferred_text(path: Path, kernel: str, backend: str) -> tuple[str, list[str]]:
    """The file with its hand-written spec replaced by the proposal for the spec-less file."""
    text = path.read_text()
    k = source.parse(text).kernel(kernel)
    assert k is not None and k.spec is not None, f"{kernel}: no hand-written spec in {path.name}"
    data = text.encode()
    bare = (data[:k.spec.span.start_byte] + data[k.spec.span.end_byte:].lstrip(b"\n")).decode()
    p = api.infer_spec(api.snapshot(bare, str(path)), kernel, backend=backend)
    if not p.valid:
        raise ValueError(f"{kernel}: no spec proposed ({'; '.join(p.problems)[:200]})")
    kb = source.parse(bare).kernel(kernel)
    assert kb is not None
    raw = bare.encode()
    return (raw[:kb.span.start_byte] + p.comment.encode() + raw[kb.span.start_byte:]).decode(), p.notes


def bench_of(text: str, kernel: str) -> dict[str, list[int]]:
    m = source.parse(text)
    s = spec_mod.load(m.kernel(kernel), m)
    return s.bench_cases()[0] if s.bench_cases() else {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "gpu", "cpu"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tune", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0, help="time limit per kernel and spec")
    ap.add_argument("--kernels", default="", help="comma-separated subset (kernel names)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "inferred_vs_hand.json"))
    args = ap.parse_args(argv)
    backend = api.resolve_backend(args.backend)
    if backend == "static":
        sys.exit("no backend can run kernels here")
    wanted = [k for k in args.kernels.split(",") if k]
    todo = [(f, k) for f, k in EXAMPLES if not wanted or k in wanted]
    rows, t0 = [], time.time()

    def save(rows: list, complete: bool) -> str:
        device = "cpu (correctness only)" if backend == "cpu" else "gpu"
        out = {"backend": backend, "device": device, "rounds": args.rounds, "tune": args.tune, "seconds": args.seconds,
               "within": WITHIN, "kernels": rows, "complete": complete, "wall_s": round(time.time() - t0, 1)}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
        return device
    work = Path(tempfile.mkdtemp(prefix="astra-inferred-vs-hand-"))
    try:
        for file, kernel in todo:
            src = ROOT / "examples" / file
            row: dict = {"kernel": kernel, "file": f"examples/{file}"}
            try:
                texts = {"hand": src.read_text()}
                texts["inferred"], row["inferred_notes"] = inferred_text(src, kernel, backend)
            except Exception as e:  # noqa: BLE001 - reported per kernel
                rows.append({**row, "error": str(e)[:300]})
                continue
            for which, text in texts.items():
                (work / which).mkdir(exist_ok=True)
                (work / which / file).write_text(text)
                entry = corpus_bench.Entry(file=file, kernel=kernel, category="example")
                r = corpus_bench.run_one(entry, work / which, backend, args.rounds, args.tune, args.seconds)
                row[which] = {"bench": bench_of(text, kernel), "speedup": r.get("speedup"),
                              "original_share": r.get("original_share"), "best_share": r.get("best_share"),
                              "adopted": r.get("adopted"), "error": r.get("error"),
                              # each timed size with its role: whether the bench size is launch-bound shows here
                              "per_size": [{k: x.get(k) for k in ("sizes", "role", "original_us", "best_us", "speedup",
                                                                   "original_share", "best_share")}
                                           for x in r.get("per_size") or []],
                              "full_gate": r.get("final_full_gate", {}).get("passed")}
                if which == "inferred":
                    row["inferred_spec"] = text.split("/* @astra", 1)[1].split("*/", 1)[0]
            h, i = row["hand"].get("speedup"), row["inferred"].get("speedup")
            row["ratio"] = i / h if h and i else None
            row["within"] = row["ratio"] is not None and abs(row["ratio"] - 1) <= WITHIN
            rows.append(row)
            print(f"{kernel}: hand {h or '–'}  inferred {i or '–'}  ratio {row['ratio'] or '–'}", file=sys.stderr)
            save(rows, False)   # each kernel's row as soon as it is measured: a step cut short keeps them
    finally:
        shutil.rmtree(work, ignore_errors=True)
    device = save(rows, True)
    print("| kernel | hand speedup | inferred speedup | ratio | hand bench | inferred bench |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['kernel']} | – | – | – | {r['error'][:80]} | |")
            continue
        f = lambda x: f"{x:.2f}×" if x else "–"  # noqa: E731
        print(f"| {r['kernel']} | {f(r['hand']['speedup'])} | {f(r['inferred']['speedup'])} | "
              f"{r['ratio']:.2f} | {r['hand']['bench']} | {r['inferred']['bench']} |" if r["ratio"] else
              f"| {r['kernel']} | {f(r['hand']['speedup'])} | {f(r['inferred']['speedup'])} | – | "
              f"{r['hand']['bench']} | {r['inferred']['bench']} |")
    ok = sum(1 for r in rows if r.get("within"))
    print(f"inferred within {WITHIN:.0%} of hand-written: {ok} of {len(rows)} kernels ({device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
