"""What the CPU backend's sandbox costs: the executor's start-up (its build is cached; the
zygote's limits and user namespace, the first launch process sandboxed), a launch end to end
(every launch has a fresh process of its own, sandboxed before it is asked for: wall time, and the
CPU time of the parent and of the executor's processes per launch), the compiler wrapper, and the
gate's check of an example (~100 launches).

    .venv/bin/python benchmarks/sandbox_overhead.py [--repeat 20] [--json out.json]

Medians (ms) of `--repeat` runs (launches: 5x as many) on this machine; printed as Markdown.
Run the same script of an earlier version beside it for a before/after comparison.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from astra_cuda.backends.base import Launch
from astra_cuda.backends.cpu import CpuBackend, toolchain
from astra_cuda.compile import sandbox

ROOT = Path(__file__).resolve().parents[1]

def _cpu_s(pid: int) -> float:
    """CPU time of a process and its reaped children (the zygote's: its launch processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def launches(n: int) -> dict[str, float]:
    be = CpuBackend()
    mod = be.compile("__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }", ["k"], filename="k.cu")
    buf = be.upload(np.zeros(32, np.int32))
    launch = Launch((1, 1, 1), (32, 1, 1), 0)
    t1 = time.perf_counter()
    be.launch(mod, "k", launch, [buf])  # starts the executor
    first = (time.perf_counter() - t1) * 1000
    ex = be._executors[""]
    zygote = ex.proc.pid if ex.proc is not None else 0
    c0, p0 = _cpu_s(zygote), time.process_time()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        be.launch(mod, "k", launch, [buf])
        times.append((time.perf_counter() - t) * 1000)
        time.sleep(0.002)  # the gate compares outputs between launches
    out = {"first launch (starts the executor)": first, "launch, 32 threads (wall, median)": statistics.median(times),
           "  parent CPU per launch": (time.process_time() - p0) * 1000 / n,
           "  executor CPU per launch (its processes)": (_cpu_s(zygote) - c0) * 1000 / n}
    be.close()
    return out


def check_s(repeat: int) -> float:
    """gate.check of examples/silu_and_mul.cu against itself on the CPU backend (~100 launches)."""
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.model import source
    from astra_cuda.model import spec as spec_mod
    path = ROOT / "examples" / "silu_and_mul.cu"
    text = path.read_text()
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    unit = extract.unit(text, str(path), "silu_and_mul")
    be = CpuBackend()
    gate.check(unit, unit, spec, be)  # builds, the executor started
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        gate.check(unit, unit, spec, be)
        times.append(time.perf_counter() - t)
    be.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--checks", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    n = args.repeat
    rows: dict[str, float] = {}
    rows.update(launches(n * 5))

    true = ["/bin/true"]
    d = toolchain.build_dir()
    conf = toolchain.confinement(d.name, [])
    bare, wrapped = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(true, check=True)
        bare.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        toolchain.run_compiler(true, conf)
        wrapped.append((time.perf_counter() - t0) * 1000)
    d.cleanup()
    rows["a program run plainly"] = statistics.median(bare)
    rows["the same through the compiler wrapper (Landlock, process group, exec)"] = statistics.median(wrapped)
    rows["gate.check of silu_and_mul on the CPU (s, not ms)"] = check_s(args.checks)

    print(f"Landlock ABI {sandbox.landlock_abi()}; medians of {n} runs (launches: {5 * n}), ms; "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| step | ms |\n|---|---:|")
    for name, v in rows.items():
        print(f"| {name} | {v:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
