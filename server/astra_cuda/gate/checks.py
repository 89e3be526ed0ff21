"""Running one kernel on one case through the Backend interface, the way the gate needs it:
fresh uploads of the host inputs, outputs poisoned first, everything downloaded afterwards."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.base import Backend, Buffer, Launch, Module, Scalar, Schedule
from ..spec import Spec
from . import compare

POISONS = (0xFF, 0xA5)  # NaN for every float type; then a plausible small negative number
LAUNCH_TIMEOUT_S = 60.0


@dataclass
class Compiled:
    module: Module
    name: str        # name expression to launch
    role: str        # 'reference' | 'candidate'


@dataclass
class Run:
    """Buffers of one launch's arguments, and what came back."""

    args: list[Buffer | Scalar]
    buffers: dict[str, Buffer]
    after: dict[str, np.ndarray] | None = None  # every pointer argument, downloaded after the launch


def scalar_ctypes(spec: Spec, params: dict[str, str]) -> dict[str, str]:
    """C++ types of the by-value parameters, const removed and template parameters substituted."""
    out = {}
    for a in spec.args.values():
        if a.pointer:
            continue
        t = params.get(a.name) or a.dtype.cpp[0]
        words = [spec.template_args.get(w, w) for w in t.split() if w not in ("const", "volatile")]
        out[a.name] = " ".join(words) or a.dtype.cpp[0]
    return out


def launch_of(spec: Spec, sizes: dict[str, int]) -> Launch:
    grid, block, shared = spec.launch_dims(sizes)
    return Launch(grid, block, shared)


def prepare(spec: Spec, backend: Backend, sizes: dict[str, int], host: dict[str, np.ndarray],
            ctypes: dict[str, str], poison: int) -> Run:
    """Upload the inputs (a fresh copy per call), allocate and poison the outputs."""
    args: list[Buffer | Scalar] = []
    buffers: dict[str, Buffer] = {}
    for a in spec.args.values():
        if a.pointer:
            if a.output:
                buf = backend.upload(np.empty(spec.shape(a.name, sizes), dtype=a.dtype.np))
                backend.fill_bytes(buf, poison)
            else:
                buf = backend.upload(np.ascontiguousarray(host[a.name]))
            buffers[a.name] = buf
            args.append(buf)
        else:
            args.append(Scalar(ctypes[a.name], spec.scalar(a.name, sizes), a.dtype.np.name))
    return Run(args, buffers)


def execute(spec: Spec, backend: Backend, kernel: Compiled, sizes: dict[str, int], run: Run,
            schedule: Schedule | None = None, written_only: bool = False) -> Run:
    """Launch and download every pointer argument (only the written ones with `written_only`:
    the reference's inputs need no checking)."""
    backend.launch(kernel.module, kernel.name, launch_of(spec, sizes), run.args, schedule=schedule,
                   timeout_s=LAUNCH_TIMEOUT_S)
    run.after = {name: backend.download(buf) for name, buf in run.buffers.items()
                 if not written_only or spec.args[name].written}
    return run


def run_case(spec: Spec, backend: Backend, kernel: Compiled, sizes: dict[str, int], host: dict[str, np.ndarray],
             ctypes: dict[str, str], poison: int, schedule: Schedule | None = None,
             written_only: bool = False) -> Run:
    return execute(spec, backend, kernel, sizes, prepare(spec, backend, sizes, host, ctypes, poison), schedule,
                   written_only)


def written(spec: Spec) -> list[str]:
    return [a.name for a in spec.args.values() if a.written]


def changed_inputs(spec: Spec, host: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[tuple[str, int, tuple]]:
    """(name, changed elements, first index) for every read-only input that the launch modified."""
    out = []
    for a in spec.args.values():
        if a.pointer and not a.written:
            d = compare.first_difference(host[a.name], after[a.name])
            if d is not None:
                out.append((a.name, d[0], d[1]))
    return out


def fill_host(spec: Spec, sizes: dict[str, int], patterns: dict[str, int]) -> dict[str, np.ndarray]:
    """Host arrays equal to buffers filled byte-wise with `patterns` (for the same-pointer test)."""
    out = {}
    for name, byte in patterns.items():
        a = spec.args[name]
        n = int(np.prod(spec.shape(name, sizes))) * a.dtype.itemsize
        out[name] = np.frombuffer(bytes([byte]) * n, dtype=a.dtype.np).reshape(spec.shape(name, sizes)).copy()
    return out
