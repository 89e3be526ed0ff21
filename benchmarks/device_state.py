"""What carrying a module's __device__ variables from one launch to the next costs on the CPU
backend (each launch runs in a fresh process; the executor copies the unit's writable data in and
out, skipping pages that are zero on both sides): a launch of a kernel that keeps one counter,
and of one beside a large __device__ array it barely touches, with the state carried and — for
comparison, as before it was carried — without it.

    .venv/bin/python benchmarks/device_state.py [--repeat 20] [--mib 128]

Medians (ms) per launch on this machine; printed as Markdown.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from astra_cuda.backends.base import Launch
from astra_cuda.backends.cpu import CpuBackend

KERNEL = r'''
#include <cstdint>
__device__ unsigned short memo[%d];
__global__ void k(int* out) { if (threadIdx.x == 0) { out[0] = memo[blockIdx.x]; memo[blockIdx.x] += 1; } }
'''


def per_launch_ms(cpu: CpuBackend, elements: int, carried: bool, repeat: int) -> float:
    m = cpu.compile(KERNEL % elements, ["k"], filename="state.cu")
    if not carried:
        m.state = None
    out = cpu.upload(np.zeros(1, np.int32))
    cpu.launch(m, "k", Launch((1, 1, 1), (32, 1, 1)), [out])
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        cpu.launch(m, "k", Launch((1, 1, 1), (32, 1, 1)), [out])
        times.append((time.perf_counter() - t) * 1e3)
    if carried:
        assert int(cpu.download(out)[0]) == repeat, "the counter did not count on"
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--mib", type=int, default=128)
    a = ap.parse_args()
    cpu = CpuBackend()
    try:
        print("| __device__ data | carried (ms/launch) | not carried (ms/launch) |\n|---|---|---|")
        for label, elements in (("2 bytes", 1), (f"{a.mib} MiB", a.mib << 19)):
            print(f"| {label} | {per_launch_ms(cpu, elements, True, a.repeat):.1f} | "
                  f"{per_launch_ms(cpu, elements, False, a.repeat):.1f} |")
    finally:
        cpu.close()


if __name__ == "__main__":
    main()
