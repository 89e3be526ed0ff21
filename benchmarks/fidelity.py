"""CPU-vs-GPU fidelity: run the same kernels on both backends with the same inputs and count
bit-identical output elements and the largest difference in units in the last place (ulp).

Run on a machine with a GPU (scripts/gpu-check does): writes benchmarks/results/fidelity.json
(or --out) and prints a markdown table. Target: >= 99.9% identical and <= 2 ulp for elementwise
and reduction kernels.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from astra import extract, source, spec as spec_mod  # noqa: E402
from astra.backends.base import Schedule  # noqa: E402
from astra.gate import checks, suite  # noqa: E402

FILES = [ROOT / "examples" / "silu_and_mul.cu", ROOT / "examples" / "fused_add_rmsnorm.cu",
         ROOT / "examples" / "merge_attn_states.cu", ROOT / "benchmarks" / "kernels" / "fidelity_kernels.cu"]
POISON = 0xFF


def ordered_int(a: np.ndarray) -> np.ndarray:
    """Map floats to integers whose difference counts ulps (sign-magnitude -> two's complement)."""
    width = a.dtype.itemsize
    ints = a.view({2: np.int16, 4: np.int32, 8: np.int64}[width]).astype(np.int64)
    top = 1 << (8 * width - 1)
    return np.where(ints < 0, -top - ints, ints)


def compare(cpu: np.ndarray, gpu: np.ndarray) -> dict:
    n = cpu.size
    bytes_equal = (cpu.view(np.uint8).reshape(n, -1) == gpu.view(np.uint8).reshape(n, -1)).all(axis=1)
    identical = int(np.count_nonzero(bytes_equal))
    out = {"elements": int(n), "identical": identical, "identical_share": identical / n if n else 1.0}
    if cpu.dtype.kind == "f" or cpu.dtype.name == "bfloat16":
        both_nan = np.isnan(cpu.astype(np.float32)) & np.isnan(gpu.astype(np.float32))
        ulps = np.abs(ordered_int(cpu) - ordered_int(gpu))
        ulps = np.where(both_nan, 0, ulps)
        out["max_ulp"] = int(ulps.max()) if n else 0
        out["within_1ulp_share"] = float(np.count_nonzero(ulps <= 1) / n) if n else 1.0
    else:
        out["max_ulp"] = int(np.abs(cpu.astype(np.int64) - gpu.astype(np.int64)).max()) if n else 0
    return out


def run_backend(backend, unit, spec, sizes, host):
    ctypes_ = checks.scalar_ctypes(spec, {p: t for p, t in _param_types(unit).items()})
    module = backend.compile(unit.source, [unit.name_expression], filename=unit.path)
    kernel = checks.Compiled(module, unit.name_expression, "candidate")
    run = checks.run_case(spec, backend, kernel, sizes, host, ctypes_, POISON, Schedule("forward"))
    return run.after


def _param_types(unit) -> dict[str, str]:
    m = source.parse(unit.source)
    k = m.kernel(unit.kernel)
    return {p.name: p.type for p in k.params}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fidelity.json"))
    args = ap.parse_args()
    from astra.backends.cpu import CpuBackend
    from astra.backends.gpu import GpuBackend
    cpu, gpu = CpuBackend(), GpuBackend()
    rows = []
    for f in FILES:
        text = f.read_text()
        m = source.parse(text)
        for k in m.kernels:
            spec = spec_mod.load(k, m)
            unit = extract.unit(text, str(f), k.name, instantiate=spec.instantiate)
            for sizes in spec.cases()[-2:]:
                host = suite.inputs(spec, sizes, "spec", seed=1234)
                t0 = time.perf_counter()
                got_cpu = run_backend(cpu, unit, spec, sizes, host)
                got_gpu = run_backend(gpu, unit, spec, sizes, host)
                for a in spec.args.values():
                    if not a.written:
                        continue
                    r = compare(got_cpu[a.name], got_gpu[a.name])
                    r.update({"file": f.name, "kernel": k.name, "output": a.name, "dtype": a.dtype.name,
                              "sizes": sizes, "seconds": round(time.perf_counter() - t0, 3)})
                    rows.append(r)
                    print(f"{k.name:28s} {a.name:10s} {str(sizes):40s} identical {r['identical_share']:.5%} "
                          f"max ulp {r['max_ulp']}", flush=True)
    total = sum(r["elements"] for r in rows)
    same = sum(r["identical"] for r in rows)
    summary = {"device": gpu.device_info().get("name", "?"), "elements": total, "identical": same,
               "identical_share": same / total if total else 1.0,
               "max_ulp": max((r["max_ulp"] for r in rows), default=0), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print("\n| kernel | output | sizes | identical | max ulp |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['output']} | {r['sizes']} | {r['identical_share']:.4%} | {r['max_ulp']} |")
    print(f"\nall: {summary['identical_share']:.4%} identical over {total} elements, max {summary['max_ulp']} ulp "
          f"on {summary['device']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
