"""The one interface every execution backend implements (GPU via CuPy, CPU via fibers).

The gate (testing agent) and the profiler drive kernels only through this interface, so
they run unchanged on either backend. Backends live inside a worker process
(`astra_cuda.execution.worker`): user and candidate code never runs in the CLI or language-server process.

Host data are NumPy arrays (bfloat16 through `ml_dtypes.bfloat16`). A backend owns its
buffers; the gate moves data in and out explicitly, so poisoning, input-mutation checks and
re-validation after timing work the same everywhere.

What a backend can do beyond the common interface is declared in its `caps` (Capabilities):
the gate and the profiler branch on those, never on a backend's name or on probing.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

# The backends' errors are defined with the other shared errors, so a caller can name them without
# loading a backend (`import astra_cuda.api` loads none); every backend module imports them here.
from ..errors import BackendUnavailable as BackendUnavailable, CompileError as CompileError
from ..errors import LaunchError as LaunchError, Unsupported as Unsupported


@dataclass(frozen=True)
class Scalar:
    """A by-value kernel argument. `ctype` is the C++ parameter type as written in the
    signature after removing const (e.g. 'int', 'int64_t', 'float', 'const float' -> 'float')."""

    ctype: str
    value: Any
    dtype: str  # numpy dtype name: 'int32', 'float32', 'float16', 'bfloat16', 'bool', ...


@dataclass(frozen=True)
class Packed:
    """A kernel argument Astra assembles from bytes and device addresses: a struct passed by
    value (its fields' bytes, with the address of a buffer at each pointer field), or — with
    `in_memory` — a table of device pointers, placed in device memory and passed as a pointer
    to it. `pointers`: (byte offset into `data`, buffer, byte offset into the buffer); the
    backend writes each address where the launch can use it (on the CPU, inside the process
    that runs the launch). A pointer may point at another `in_memory` Packed (a struct's field
    pointing to records, `gate.checks`): the backend places its bytes in device memory first."""

    data: bytes
    pointers: tuple[tuple[int, "Buffer | Packed", int], ...] = ()
    in_memory: bool = False


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0


@dataclass(frozen=True)
class ResourceUsage:
    registers: int | None = None
    spills_bytes: int | None = None  # spill stores + loads, bytes
    shared_static_bytes: int | None = None
    stack_bytes: int | None = None
    max_threads_per_block: int | None = None


class Buffer:
    """Opaque device (or host-emulated device) buffer; `nbytes`, `dtype`, `shape` known."""

    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]


class Module:
    """A compiled translation unit. `kernel(expr)` gives a handle to launch."""

    compiler: str = ""  # what compiled it ('nvcc 13.0, flags …'), for verdicts; '' where the backend says none
    unit: Any = None    # the CompileUnit it was compiled from (`compile_unit`): what a host program builds on


@dataclass
class Schedule:
    """How the CPU backend runs a launch: the thread interleaving ('forward', 'reverse',
    'random'; the GPU ignores it: the hardware chooses) and, where `caps.rounding_modes`, the IEEE
    rounding direction of the kernel's floating-point arithmetic ('nearest', 'upward',
    'downward', 'towardzero') and, where `caps.atomic_ledger`, what each floating-point atomic
    add adds: 'value' (the kernel's own arithmetic), 'magnitude' (its value's absolute value) or
    'count' (one) — how many adds an element takes and their magnitudes, measured
    (gate/atomic_bound.py)."""

    order: str = "forward"
    seed: int = 0
    rounding: str = "nearest"
    atomics: str = "value"


@dataclass(frozen=True)
class Capabilities:
    """What a backend offers beyond compile/upload/launch. Each flag names a method or option
    that works only where it is set."""

    timing: bool = False             # time(): event timing; speed is reported only from such a backend
    copy_ceiling: bool = False       # copy_ceiling(): the measured device copy bandwidth
    device_info: bool = False        # device_info(): name, SM count, per-SM limits
    thread_schedules: bool = False   # launch(schedule=...) picks the thread interleaving (races show as
                                     # schedule-dependent results); else repeated runs are compared
    address_sanitizer: bool = False  # compile(sanitize=True) in this process: out-of-bounds accesses
    race_checker: bool = False       # compile(races=True): data races between threads of a block
    build_prefetch: bool = False     # compiles are separate processes: start every build at once
    compute_sanitizer: bool = False  # the unit can run under compute-sanitizer (gate/sanitizer.py)
    host_code: bool = False          # kernels run as host code (the CPU backend, sandboxed): a unit
                                     # must compile for the GPU (NVRTC) before it is built or run
    rounding_modes: bool = False     # launch(schedule=Schedule(rounding=...)) runs the kernel's float
                                     # arithmetic in another IEEE rounding direction (its own rounding
                                     # error made visible: gate/run.py's rounding allowance)
    atomic_ledger: bool = False      # launch(schedule=Schedule(atomics=...)): float atomic adds add their
                                     # magnitude or one instead (gate/atomic_bound.py)
    device_arrays: bool = False      # array_module(), generator(), adopt(): arrays made where the buffers
                                     # live (a timed size's inputs drawn there: gate/device_case.py)


@dataclass
class TimingResult:
    times_us: list[float] = field(default_factory=list)  # one per launch

    @property
    def median_us(self) -> float:
        return float(np.median(self.times_us)) if self.times_us else float("nan")


@dataclass(frozen=True)
class TimedLaunch:
    """One launch of a timing loop and the untimed work around it. Before the launch: `copies`
    (destination, source) bring fresh inputs, `fills` (buffer, byte, element positions or None
    for every byte) poison outputs. After it: `keeps` (destination, source, element positions
    or None for the whole buffer) copy what the launch left for checking once the loop is over.
    Positions are int64 element indices into the flattened buffer, held in a device buffer."""

    args: Sequence[Buffer | Scalar | Packed]
    copies: Sequence[tuple[Buffer, Buffer]] = ()
    fills: Sequence[tuple[Buffer, int, Buffer | None]] = ()
    keeps: Sequence[tuple[Buffer, Buffer, Buffer | None]] = ()


class Backend(ABC):
    name: str  # 'gpu' or 'cpu'
    caps: Capabilities = Capabilities()

    @abstractmethod
    def compile(self, source: str, name_expressions: Sequence[str], *, filename: str = "kernel.cu",
                options: Sequence[str] = (), sanitize: bool = False, races: bool = False) -> Module:
        """Compile a stand-alone unit (from `astra_cuda.compile.extract`). `name_expressions` are the kernel
        names to look up, e.g. 'silu_and_mul' or 'act_and_mul<__half>'. Cached by content
        hash. `sanitize` / `races`: an instrumented build (caps.address_sanitizer /
        caps.race_checker; Unsupported elsewhere). Raises CompileError or Unsupported."""

    def compile_unit(self, unit: Any, *, sanitize: bool = False, races: bool = False, role: str = "") -> Module:
        """Compile the kernel of `unit` (an `astra_cuda.compile.extract.CompileUnit`): the cut unit's text
        here. A backend that compiles the user's whole file instead (the GPU's, with nvcc where a
        CUDA toolkit is installed) overrides this; its module is launched by the unit's name
        expression all the same. `role` ("reference", "candidate"): whom the module is for. A
        backend that keeps loaded modules (the GPU's) never gives one role's module to another —
        a module's `__device__` variables are shared by every kernel launched from it, and one
        file's reference kernel and rewrite are one cubin. Here every compile is a module of its
        own (the CPU's: its own `__device__` variables, `CpuModule.state`), so it needs none."""
        variant = {k: True for k, on in (("sanitize", sanitize), ("races", races)) if on}
        mod = self.compile(unit.source + unit.appendix, [unit.name_expression], filename=unit.path,
                           options=unit.options(), **variant)
        mod.unit = unit
        return mod

    def build_host(self, module: Module, main: str) -> Any:
        """A host executable of the unit `module` was compiled from (`Module.unit`: its text and
        appendix) with `main` after it, built by the compiler that builds this backend's kernels
        (so a class is laid out as the kernel reads it): the constructor program of
        `astra_cuda.model.construct`, which `astra_cuda.compile.hostprog.run` runs confined.
        LaunchError where this backend cannot build one."""
        raise LaunchError(f"the {self.name} backend cannot build a host program (an object a constructor builds)")

    def read_global(self, module: Module, symbol: str, nbytes: int) -> bytes:
        """The first `nbytes` of an `extern "C"` global of the module as compiled (the layout
        probe of struct parameters, `astra_cuda.model.layout`). LaunchError if it is not there."""
        raise LaunchError(f"the {self.name} backend cannot read {symbol} from a module")

    @abstractmethod
    def resources(self, module: Module, name_expression: str) -> ResourceUsage:
        """Registers/spills/shared memory (static data; None where unknown)."""

    @abstractmethod
    def upload(self, host: np.ndarray) -> Buffer: ...

    @abstractmethod
    def download(self, buf: Buffer) -> np.ndarray: ...

    @abstractmethod
    def fill_bytes(self, buf: Buffer, byte: int) -> None:
        """Poison: set every byte of the buffer to `byte` (0xFF gives NaN for floats)."""

    def overrun(self, buf: Buffer) -> tuple[int, int] | None:
        """Whether a launch wrote past the end of `buf`, which `upload` made: (the first changed
        byte's offset past the end, bytes changed) of the guard after it (`backends/guard.py`), or
        None while the guard holds its pattern — and for a buffer placed without one (`view`,
        a sanitizer's exact allocations, a backend that places none)."""
        return None

    @abstractmethod
    def launch(self, module: Module, name_expression: str, launch: Launch,
               args: Sequence[Buffer | Scalar | Packed], *, schedule: Schedule | None = None,
               timeout_s: float = 30.0) -> None:
        """Run one launch to completion (synchronous). Raises LaunchError on a fault,
        a deadlock/divergent barrier (CPU) or a timeout."""

    def time(self, module: Module, name_expression: str, launch: Launch, launches: Iterable[TimedLaunch], *,
             flush_l2: bool = True) -> TimingResult:
        """Run `launches` in order, each timed on its own (one time per launch, warm-up included:
        the caller decides which count), with the L2 flushed before each and its `copies`,
        `fills` and `keeps` done outside the timed region. `launches` may be a generator: it is
        consumed as the launches are issued. Only backends with `caps.timing`."""
        raise NotImplementedError(f"the {self.name} backend does not measure time")

    def copy_ceiling(self) -> float:
        """Bytes per second a large device-to-device copy moves (read + written). Only backends
        with `caps.copy_ceiling`."""
        raise NotImplementedError(f"the {self.name} backend has no copy ceiling")

    def device_info(self) -> dict[str, Any]:
        """The device's name and per-SM limits. Only backends with `caps.device_info`."""
        raise NotImplementedError(f"the {self.name} backend has no device to describe")

    def sanitizer_pool(self, tool: str) -> Any:
        """A worker pool (`astra_cuda.execution.worker.Pool`) whose workers run under compute-sanitizer --tool
        TOOL. Only backends with `caps.compute_sanitizer`; BackendUnavailable when the tool is
        not installed."""
        raise BackendUnavailable(f"the {self.name} backend has no compute-sanitizer")

    def numerics_warnings(self, reference_source: str, candidate_source: str) -> list[str]:
        """What this backend cannot reproduce of the candidate's numerics against the
        reference's (e.g. fast-math intrinsics emulated on a CPU): warnings for the verdict."""
        return []

    # ---- buffer plumbing for the timing loop (backends that measure time) ---------------------
    def allocate(self, nbytes: int) -> Buffer:
        """Uninitialised device bytes (contents unspecified)."""
        return self.upload(np.empty(max(1, nbytes), dtype=np.uint8))

    def guarded(self, dtype: np.dtype, shape: tuple[int, ...]) -> Buffer:
        """A fresh buffer of `dtype` and `shape` (contents unspecified) with the guard `upload`
        places after it, in the same allocation, where this backend places guards (`overrun`
        checks it); elsewhere, and for a sanitizer's exact allocations, exactly its bytes."""
        dt = np.dtype(dtype)
        return self.view(self.allocate(int(np.prod(shape, dtype=np.int64)) * dt.itemsize), 0, dt, shape)

    def view(self, buf: Buffer, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> Buffer:
        """A buffer of `dtype` and `shape` at byte `offset` inside `buf` (sharing its memory):
        arguments placed at fresh addresses without allocating."""
        raise NotImplementedError(f"the {self.name} backend does not place buffers")

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Device-to-device copy of `src` into `dst` (the same number of bytes)."""
        raise NotImplementedError(f"the {self.name} backend does not copy buffers")

    def within_tolerance(self, got: Buffer, want: Buffer, atol: float, rtol: float) -> bool | None:
        """Whether every element of `got` is within tolerance of `want` by the rules of
        astra_cuda.gate.compare, checked where the data live; None when this backend cannot tell
        (the caller then compares on the host). Never True where the host comparison fails."""
        return None

    def same_bytes(self, a: Buffer, b: Buffer) -> bool:
        """Whether two buffers hold the same bytes (compared where they live when possible)."""
        x, y = self.download(a), self.download(b)
        return x.nbytes == y.nbytes and bool(np.array_equal(x.reshape(-1).view(np.uint8),
                                                            y.reshape(-1).view(np.uint8)))

    # ---- arrays where the buffers live (caps.device_arrays) ------------------------------------
    def array_module(self) -> Any:
        """The array module of this backend's buffers (CuPy on the GPU)."""
        raise NotImplementedError(f"the {self.name} backend has no array module")

    def generator(self, seed: int) -> Any:
        """A random generator of `array_module()` seeded with `seed`, with NumPy's Generator methods
        (`random`, `standard_normal`, `integers`)."""
        raise NotImplementedError(f"the {self.name} backend draws no values")

    def adopt(self, array: Any, dtype: np.dtype, shape: tuple[int, ...]) -> Buffer:
        """An array of `array_module()` in `dtype`'s storage type (bfloat16 as uint16 bits) taken as a
        buffer of `dtype` and `shape`, without a copy through the host."""
        raise NotImplementedError(f"the {self.name} backend adopts no arrays")

    def digest(self, buf: Buffer, key: tuple[int, int]) -> int:
        """`device_digest.digest` of the buffer's bytes, computed where they live where possible."""
        from .device_digest import digest
        return digest(np, self.download(buf), key)

    def holds_byte(self, buf: Buffer, byte: int) -> bool:
        """Whether some element of the buffer still has every byte equal to `byte` (never written)."""
        from .device_digest import holds_pattern
        return holds_pattern(np, self.download(buf), buf.dtype.itemsize, byte)

    def close(self) -> None:
        pass
