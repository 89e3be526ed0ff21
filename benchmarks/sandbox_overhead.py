"""What the CPU backend's sandbox costs: executor start-up (limits, Landlock, seccomp), a warm
launch, and the compiler wrapper, each against the same step without it.

    .venv/bin/python benchmarks/sandbox_overhead.py [--repeat 20]

Medians (ms) of `--repeat` runs on this machine; printed as a Markdown table.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from astra_cuda.backends.base import Launch
from astra_cuda.backends.cpu import CpuBackend, executor, sandbox, toolchain
from astra_cuda.backends.cpu.isolation import _pyseccomp_dir

CHILD = """
import sys, time, os, ctypes, resource
sys.path.insert(0, {cpu_dir!r}); sys.path.append({site!r})
t0 = time.perf_counter()
import sandbox, executor
if {sandboxed}:
    executor.restrict(True, True)
print((time.perf_counter() - t0) * 1000)
"""


def child_ms(sandboxed: bool) -> float:
    code = CHILD.format(cpu_dir=str(executor.__file__).rsplit("/", 1)[0], site=_pyseccomp_dir(), sandboxed=sandboxed)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, env={}, check=True)
    total = (time.perf_counter() - t0) * 1000
    return total, float(out.stdout.strip())


def launch_ms(n: int, sandboxed: bool) -> float:
    """Median of warm launches; without the sandbox through a copy of the executor whose
    `restrict` does nothing (for this measurement only)."""
    from astra_cuda.backends.cpu import isolation
    saved = isolation.EXECUTOR
    tmp = tempfile.TemporaryDirectory()
    try:
        if not sandboxed:
            for f in ("executor.py", "sandbox.py"):
                shutil.copy(Path(executor.__file__).with_name(f), Path(tmp.name) / f)
            path = Path(tmp.name) / "executor.py"
            path.write_text(path.read_text().replace("def restrict(address_limit: bool, required: bool) -> list[str]:",
                                                     "def restrict(address_limit: bool, required: bool) -> list[str]:\n"
                                                     "    return []\n\n\ndef _unused(address_limit, required):"))
            isolation.EXECUTOR = path
        be = CpuBackend()
        mod = be.compile("__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }", ["k"], filename="k.cu")
        buf = be.upload(np.zeros(32, np.int32))
        launch = Launch((1, 1, 1), (32, 1, 1), 0)
        be.launch(mod, "k", launch, [buf])
        times = []
        for _ in range(n * 5):
            t0 = time.perf_counter()
            be.launch(mod, "k", launch, [buf])
            times.append((time.perf_counter() - t0) * 1000)
        be.close()
        return statistics.median(times)
    finally:
        isolation.EXECUTOR = saved
        tmp.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    n = ap.parse_args().repeat
    rows = []

    plain = [child_ms(False) for _ in range(n)]
    boxed = [child_ms(True) for _ in range(n)]
    rows.append(("executor start (process to ready)", statistics.median(p[0] for p in plain),
                 statistics.median(b[0] for b in boxed)))
    rows.append(("  of which: sandboxing itself", 0.0, statistics.median(b[1] for b in boxed)))

    true = ["/bin/true"]
    d = toolchain.build_dir()
    conf = toolchain.confinement(d.name, [])
    bare = []
    wrapped = []
    for _ in range(n):
        t0 = time.perf_counter()
        toolchain.run_compiler(true, None)
        bare.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        toolchain.run_compiler(true, conf)
        wrapped.append((time.perf_counter() - t0) * 1000)
    d.cleanup()
    rows.append(("compiler wrapper (Landlock + exec), per compile", statistics.median(bare), statistics.median(wrapped)))

    rows.append(("warm launch, 32 threads", launch_ms(n, sandboxed=False), launch_ms(n, sandboxed=True)))

    print(f"Landlock ABI {sandbox.landlock_abi()}; medians of {n} runs, ms\n")
    print("| step | without sandbox | with sandbox |\n|---|---:|---:|")
    for name, a, b in rows:
        print(f"| {name} | {a:.1f} | {b:.1f} |")


if __name__ == "__main__":
    main()
