"""The CPU backend: runs CUDA C++ kernels on the CPU with exact block and warp semantics, for
correctness (never for speed).

The unit is compiled as host C++ over a shim (runtime/astra_cuda_shim.h); each block's threads
are fibers switching only at barriers and warp collectives (runtime/astra_runtime.cpp). Every
launch runs in a fresh sandboxed process of its own (runtime/astra_executor.cpp, isolation.py), gone before its
outputs are read; buffers live in shared memory.
"""
from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from astra_cuda.backends.base import (Backend, BackendUnavailable, Buffer, Capabilities, CompileError, Launch,
                                 LaunchError, Module, Packed, ResourceUsage, Scalar, Schedule)

from . import device_state, toolchain, unit_build
from .. import guard
from ...compile import sandbox
from .isolation import Executor
from .screen import fast_math_swaps

__all__ = ["CpuBackend", "CpuBuffer", "CpuModule", "fast_math_swaps", "run_schedules"]

ORDERS = {"forward": 0, "reverse": 1, "random": 2}
ROUNDINGS = {"nearest": 0, "upward": 1, "downward": 2, "towardzero": 3}
ATOMIC_LEDGER = {"value": 0, "magnitude": 1, "count": 2}   # the rounding word's second byte (the runtime's)


class _DeviceAddresses:
    """Where each buffer is mapped in every launch process: one address for the buffer's whole
    life, as a GPU's device pointer (each launch runs in a fresh process; a kernel may key state
    on a pointer, which the gate's statefulness check looks for). First fit in a range far below
    where Linux places mappings and inside every sanitizer's application memory; a launch process
    that finds the place taken maps the buffer elsewhere."""

    BASE, SPAN, ALIGN = 0x7E80_0000_0000, 1 << 38, 1 << 21

    def __init__(self) -> None:
        self.live: dict[int, int] = {}  # start -> bytes
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> int:
        """An address for `nbytes`, or 0 (anywhere) when the range is full."""
        size = -(-max(nbytes, 1) // self.ALIGN) * self.ALIGN
        with self.lock:
            at = self.BASE
            for start in sorted(self.live):
                if start - at >= size:
                    break
                at = max(at, start + self.live[start])
            if at + size > self.BASE + self.SPAN:
                return 0
            self.live[at] = size
            return at

    def give_back(self, start: int) -> None:
        with self.lock:
            self.live.pop(start, None)


_ADDRESSES = _DeviceAddresses()


class CpuBuffer(Buffer):
    """Host memory shared with the executor child (a memfd mapped in both processes), at the same
    address in every launch (`device_address`)."""

    _next_id = 1

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.id = CpuBuffer._next_id
        CpuBuffer._next_id += 1
        self.fd = os.memfd_create(f"astra-buf-{self.id}")
        # the buffer's bytes and the guard after them (backends/guard.py), one mapping
        os.ftruncate(self.fd, self.nbytes + guard.GUARD_BYTES)
        self._map = mmap.mmap(self.fd, self.nbytes + guard.GUARD_BYTES)
        self.array = np.ndarray(self.shape, self.dtype, buffer=self._map) if self.nbytes else \
            np.zeros(self.shape, self.dtype)
        self.raw = np.ndarray((self.nbytes + guard.GUARD_BYTES,), np.uint8, buffer=self._map)
        # one pattern for every buffer here: the CPU's sanitizer build names a read past the end
        # itself, with its line, where keyed guards (the GPU's) would first show two runs that disagree
        self.pattern = guard.PATTERN
        guard.fill(np, self.raw, self.nbytes, self.pattern)
        self.device_address = _ADDRESSES.take(self.nbytes + guard.GUARD_BYTES)
        weakref.finalize(self, _release, self.fd, self.device_address)


def _release(fd: int, device_address: int) -> None:
    _ADDRESSES.give_back(device_address)
    try:
        os.close(fd)  # the mapping itself goes with the last numpy view of it
    except OSError:
        pass


@dataclass
class CpuModule(Module):
    path: Path
    names: list[str]
    filename: str
    sanitize: str  # '', 'address' or 'thread'
    entry_index: dict[str, int] = field(default_factory=dict)
    # The module's __device__ variables between its launches (each runs in a fresh process; a GPU
    # keeps them for the module's life): where they are in the module (read from its sections),
    # the buffer that holds them (where the module was loaded, then each range's bytes), and
    # `state_kept` once a launch has left them there. Never shared between modules.
    layout: device_state.StateLayout = field(default_factory=lambda: device_state.StateLayout((), 0))
    state: CpuBuffer | None = None
    state_kept: bool = False

    def kernel(self, expr: str) -> str:
        return expr


def _scalar_bytes(s: Scalar) -> bytes:
    if s.dtype == "bfloat16":
        import ml_dtypes

        return np.array(s.value, dtype=ml_dtypes.bfloat16).tobytes()
    try:
        dt = np.dtype(s.dtype)
    except TypeError:
        raise LaunchError(f"unknown scalar type {s.dtype!r} for a {s.ctype} argument")
    return np.array(s.value, dtype=dt).tobytes()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class CpuBackend(Backend):
    name = "cpu"
    # Correctness only, never speed; builds are g++ subprocesses, so they can overlap.
    caps = Capabilities(thread_schedules=True, address_sanitizer=True, race_checker=True, build_prefetch=True,
                        host_code=True, rounding_modes=True, atomic_ledger=True)

    def __init__(self, workers: int | None = None, landlock_abi: int | None = None):
        """`landlock_abi`: use at most this Landlock ABI, as an older kernel would (tests)."""
        toolchain.compiler()
        toolchain.cuda_include_dirs()
        why = sandbox.unavailable_reason()
        if why:
            raise BackendUnavailable(why)
        self.workers = workers or _cores()
        self.landlock_abi = landlock_abi
        self._executors: dict[str, Executor] = {}
        self.last_output = ""  # what the last launch printed (kernel printf), for debugging
        self._lock = threading.Lock()  # one launch at a time

    # -- compile ---------------------------------------------------------------------------
    def compile(self, source: str, name_expressions: Sequence[str], *, filename: str = "kernel.cu",
                options: Sequence[str] = (), sanitize: bool = False, races: bool = False) -> CpuModule:
        """`sanitize`: AddressSanitizer build (out-of-bounds accesses). `races` (CPU only):
        ThreadSanitizer build that reports data races between CUDA threads, e.g. on shared
        memory without a barrier between a write and a read, even when the values happen to
        agree across schedules."""
        names = list(name_expressions)
        if not names:
            raise CompileError("no kernel to compile (empty name_expressions)")
        if sanitize and races:
            raise CompileError("sanitize (out-of-bounds) and races are separate builds: ask for one")
        mode = "thread" if races else "address" if sanitize else ""
        path = unit_build.compile_module(source, names, filename, options, mode)
        layout = device_state.layout(path)
        return CpuModule(path, names, filename, mode, {n: i for i, n in enumerate(names)}, layout,
                         CpuBuffer((layout.buffer_bytes,), np.uint8) if layout.ranges else None)

    def resources(self, module: Module, name_expression: str) -> ResourceUsage:
        return ResourceUsage()  # static data (registers, spills) come from NVRTC, not from here

    def numerics_warnings(self, reference_source: str, candidate_source: str) -> list[str]:
        return fast_math_swaps(reference_source, candidate_source)

    # -- buffers ---------------------------------------------------------------------------
    def alloc(self, shape: tuple[int, ...], dtype) -> CpuBuffer:
        return CpuBuffer(shape, dtype)

    def upload(self, host: np.ndarray) -> CpuBuffer:
        host = np.asarray(host)
        buf = self.alloc(host.shape, host.dtype)
        if buf.nbytes:
            buf.array[...] = host
        return buf

    def download(self, buf: Buffer) -> np.ndarray:
        return np.array(self._own(buf).array, copy=True)

    def fill_bytes(self, buf: Buffer, byte: int) -> None:
        b = self._own(buf)
        if b.nbytes:
            b.array.reshape(-1).view(np.uint8)[:] = byte & 0xFF

    def overrun(self, buf: Buffer) -> tuple[int, int] | None:
        b = self._own(buf)
        return guard.first_changed(np, b.raw, b.nbytes, b.pattern)

    @staticmethod
    def _own(buf: Buffer) -> CpuBuffer:
        if not isinstance(buf, CpuBuffer):
            raise LaunchError("buffer does not belong to the CPU backend")
        return buf

    # -- launch ----------------------------------------------------------------------------
    def _executor(self, sanitize: str) -> Executor:
        ex = self._executors.get(sanitize)
        if ex is None:
            ex = self._executors[sanitize] = Executor(sanitize, self.workers, self.landlock_abi)
        return ex

    def launch(self, module: Module, name_expression: str, launch: Launch,
               args: Sequence[Buffer | Scalar | Packed], *, schedule: Schedule | None = None,
               timeout_s: float = 30.0) -> None:
        if not isinstance(module, CpuModule):
            raise LaunchError("module was not compiled by the CPU backend")
        if name_expression not in module.entry_index:
            raise LaunchError(f"kernel {name_expression!r} was not compiled in this module "
                              f"(compiled: {', '.join(module.names)})")
        schedule = schedule or Schedule()
        if schedule.order not in ORDERS:
            raise LaunchError(f"unknown schedule order {schedule.order!r} (forward, reverse, random)")
        if schedule.rounding not in ROUNDINGS:
            raise LaunchError(f"unknown rounding direction {schedule.rounding!r} ({', '.join(ROUNDINGS)})")
        if schedule.atomics not in ATOMIC_LEDGER:
            raise LaunchError(f"unknown atomic ledger {schedule.atomics!r} ({', '.join(ATOMIC_LEDGER)})")
        with self._lock:
            reply = self._send_launch(module, name_expression, launch, args, schedule, timeout_s)
        if not reply.get("ok"):
            raise LaunchError(f"{name_expression}: {reply.get('error', 'launch failed')}")
        module.state_kept = module.state is not None

    def _send_launch(self, module, name_expression, launch, args, schedule, timeout_s) -> dict:
        wire_args, index, fds, nbytes, addresses = [], {}, [], [], []  # index: a buffer's place among the launch's
        relocs: list[list[int]] = []     # [argument, offset in it, argument pointed at, offset in that]
        hidden: list[CpuBuffer] = []     # buffers reached only through a packed argument

        def fd_of(b: CpuBuffer) -> int:
            if b.id not in index:
                index[b.id] = len(fds)
                fds.append(b.fd)
                # mapped with its guard, so a write past the end lands there; the AddressSanitizer
                # build copies exactly the buffer's bytes into a heap block and reports the access
                nbytes.append(b.nbytes if module.sanitize == "address" else b.nbytes + guard.GUARD_BYTES)
                addresses.append(b.device_address)
            return index[b.id]

        packed: list[tuple[int, Packed]] = []
        for a in args:
            if isinstance(a, Scalar):
                wire_args.append(["val", _scalar_bytes(a).hex()])
            elif isinstance(a, Packed):
                packed.append((len(wire_args), a))
                if a.in_memory:   # a table of pointers: its bytes in a buffer of their own
                    table = self.upload(np.frombuffer(a.data, dtype=np.uint8))
                    hidden.append(table)   # kept alive until the launch is done
                    wire_args.append(["buf", fd_of(table)])
                else:
                    wire_args.append(["val", a.data.hex()])
            else:
                wire_args.append(["buf", fd_of(self._own(a))])
        # Addresses exist only in the process that runs the launch: the executor writes them.
        # A buffer that is no argument of the kernel travels as a hidden argument after them.
        place = {index[self._own(a).id]: i for i, a in enumerate(args) if isinstance(a, CpuBuffer)}
        for at, a in packed:
            for offset, buf, within in a.pointers:
                if isinstance(buf, Packed):   # records a field points to: their bytes in a buffer of their own
                    if not buf.in_memory or buf.pointers:
                        raise LaunchError("a packed argument may point only at bytes of its own (records)")
                    buf = self.upload(np.frombuffer(buf.data, dtype=np.uint8))
                    hidden.append(buf)
                b = self._own(buf)
                if not 0 <= within <= b.nbytes:   # the executor's bound would let it reach the guard
                    raise LaunchError("a packed argument points past its buffer's end: a malformed request")
                k = fd_of(b)
                if k not in place:
                    place[k] = len(wire_args)
                    wire_args.append(["hidden", k])
                relocs.append([at, int(offset), place[k], int(within)])
        state = -1
        if module.state is not None:  # the module's __device__ variables, after the arguments' buffers
            state = len(fds)
            fds.append(module.state.fd)
            nbytes.append(module.state.nbytes)
            addresses.append(module.state.device_address)
        msg = {
            "entry": module.entry_index[name_expression], "args": wire_args, "relocs": relocs,
            "grid": [int(x) for x in launch.grid], "block": [int(x) for x in launch.block],
            "shmem": int(launch.shared_mem), "order": ORDERS[schedule.order],
            "rounding": ROUNDINGS[schedule.rounding] | ATOMIC_LEDGER[schedule.atomics] << 8,
            "seed": int(schedule.seed) & (2**64 - 1),
            # race checking runs the blocks one after another on the calling thread: races are
            # then looked for within blocks, deterministically. So do the atomic ledger's runs:
            # they are compared element by element (atomic_bound.measure), and blocks on several
            # threads would let a plain store land after a different number of adds in each
            "workers": 1 if module.sanitize == "thread" or schedule.atomics != "value" else self.workers,
            "stack_kib": 0,  # fixed at build time: 64 KiB, 256 KiB with a sanitizer
            "handlers": 0 if module.sanitize else 1,
            "copy_buffers": 1 if module.sanitize == "address" else 0,
            "cpu_s": float(timeout_s * self.workers + 5),
            # the buffer of the module's __device__ variables (-1: none), whether a launch left them
            # there, and where they are in the module
            "state": state, "load_state": int(module.state_kept), "addresses": addresses,
            "state_ranges": [list(r) for r in module.layout.ranges], "image_bytes": module.layout.image_bytes,
        }
        reply, self.last_output = self._executor(module.sanitize).launch(msg, module.path, fds, nbytes, timeout_s,
                                                                         module.filename)
        return reply

    def build_host(self, module: Module, main: str) -> Path:
        """g++ as for the module, the same shim and flags (`unit_build.build_host`)."""
        u = module.unit
        if u is None:
            raise LaunchError("the module was not compiled from a unit: no host program can be built of it")
        return unit_build.build_host(u.source + u.appendix, main, u.path, u.options())

    def read_global(self, module: Module, symbol: str, nbytes: int) -> bytes:
        """Read from the built library's file (ELF, pyelftools): nothing of it runs here."""
        if not isinstance(module, CpuModule):
            raise LaunchError("module was not compiled by the CPU backend")
        from elftools.elf.elffile import ELFFile
        from elftools.elf.sections import SymbolTableSection
        with open(module.path, "rb") as f:
            elf = ELFFile(f)
            for table in elf.iter_sections():
                if not isinstance(table, SymbolTableSection):
                    continue
                for sym in table.iter_symbols():
                    if sym.name != symbol or sym["st_shndx"] in ("SHN_UNDEF", "SHN_ABS", "SHN_COMMON"):
                        continue
                    sec = elf.get_section(sym["st_shndx"])
                    start = sym["st_value"] - sec["sh_addr"]
                    if sec["sh_type"] == "SHT_NOBITS" or start < 0 or start + nbytes > sec["sh_size"] \
                            or nbytes > sym["st_size"]:
                        break
                    f.seek(sec["sh_offset"] + start)
                    return f.read(nbytes)
        raise LaunchError(f"{symbol} is not in the compiled module")

    def close(self) -> None:
        for ex in self._executors.values():
            ex.close()
        self._executors.clear()


def run_schedules(backend: CpuBackend, module: Module, name_expression: str, launch: Launch,
                  inputs: Sequence[np.ndarray | Scalar], outputs: Sequence[int],
                  schedules: Sequence[Schedule] = (Schedule("forward"), Schedule("reverse")),
                  poison: int = 0xFF, timeout_s: float = 30.0) -> list[list[np.ndarray]]:
    """Run one launch under several thread schedules from the same inputs (arrays are uploaded
    fresh each time; `outputs` are the argument positions to download). A result that differs
    between schedules means a race."""
    results = []
    for sched in schedules:
        args: list[Buffer | Scalar] = []
        for i, a in enumerate(inputs):
            if isinstance(a, Scalar):
                args.append(a)
            else:
                b = backend.upload(np.asarray(a))
                if i in outputs and poison is not None:
                    backend.fill_bytes(b, poison)
                args.append(b)
        backend.launch(module, name_expression, launch, args, schedule=sched, timeout_s=timeout_s)
        results.append([backend.download(args[i]) for i in outputs])
    return results
