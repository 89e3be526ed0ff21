"""The GPU backend: CuPy on an NVIDIA GPU. Where a CUDA toolkit is installed, a kernel's module is
the cubin nvcc made of the user's whole file (`astra_cuda.compile.nvcc`, with the project's flags),
loaded with `RawModule(path=...)` and launched by the kernel's mangled name; elsewhere CuPy's
NVRTC compiles the cut unit (`compile`).

CuPy is imported only inside the worker process (`astra_cuda.execution.worker`; `astra_cuda.execution.jobs.BackendsJob`
probes it there). A fault that poisons the CUDA context (illegal address,
trap) makes this backend refuse further work and asks the worker to retire after replying, so
the next job gets a fresh process and context.

Timing follows the method of ../shared/notes/gpu-machine.md: CUDA events around each launch,
the L2 flushed (a memset of twice the L2 size) before each, and the caller's plan of copies,
poison fills and snapshots (`TimedLaunch`) done outside the events; after an idle spell the GPU
is kept busy for a few milliseconds first, so clocks that dropped while idle do not slow the first
launches. The device copy ceiling (bytes read + written by a large device-to-device
copy) is measured once per device and cached on disk.

Long because it is the one place CuPy is called: compiling, memory and buffer placement,
launches with their fault handling, the timing loop, on-device comparisons and the copy
ceiling share the device, its stream and its lost-context state.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .. import redact
from .base import (Backend, BackendUnavailable, Buffer, Capabilities, CompileError, Launch, LaunchError, Module,
                   Packed, ResourceUsage, Scalar, Schedule, TimedLaunch, TimingResult, Unsupported)

# Set in workers started by `sanitizer_pool()`: the tool name and its log file.
SANITIZER_ENV = "ASTRA_SANITIZER"
SANITIZER_LOG_ENV = "ASTRA_SANITIZER_LOG"

IDLE_S = 0.001       # idle longer than this before a timing loop: wake the GPU first ...
WAKE_FLUSHES = 20    # ... with this many L2-flush memsets (~0.7 ms on an H100),
LONG_IDLE_S = 0.05   # and after a longer spell
LONG_WAKE_FLUSHES = 100  # with this many (~4 ms)

# Errors after which the CUDA context is unusable: the worker must be replaced.
_STICKY = ("illegal address", "illegal memory", "misaligned address", "illegal instruction", "hardware stack",
           "unspecified launch failure", "device-side assert", "invalid program counter", "invalid address space",
           "launch timed out", "ErrorLaunchFailure", "ErrorIllegalAddress", "ErrorAssert", "ErrorHardwareStackError",
           "ErrorIllegalInstruction", "ErrorMisalignedAddress", "ErrorInvalidAddressSpace", "ErrorInvalidPc",
           "ErrorLaunchTimeout", "ErrorContextIsDestroyed", "ERROR_ILLEGAL_ADDRESS", "ERROR_LAUNCH_FAILED",
           "ERROR_ASSERT", "ERROR_ILLEGAL_INSTRUCTION", "ERROR_MISALIGNED_ADDRESS", "ERROR_HARDWARE_STACK_ERROR")


def _cupy():
    try:
        import cupy
        return cupy
    except Exception as e:  # ImportError, or CuPy failing to find CUDA
        raise BackendUnavailable(f"CuPy is not usable here ({e.__class__.__name__}: {e})") from None


class GpuBuffer(Buffer):
    """A device array. Types CuPy cannot hold (bfloat16) live as unsigned integers of the same
    width; `dtype` and `shape` are the logical ones."""

    def __init__(self, array, dtype: np.dtype, shape: tuple[int, ...]):
        self.array = array
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.nbytes = int(array.nbytes)


class GpuModule(Module):
    def __init__(self, raw, names: Sequence[str], key: str, lowered: dict[str, str] | None = None,
                 compiler: str = ""):
        self.raw = raw
        self.names = tuple(names)
        self.key = key
        self.lowered = dict(lowered or {})  # name expression -> mangled name (a cubin's kernels)
        self.compiler = compiler
        self.functions: dict[str, Any] = {}
        self.dyn_smem: dict[str, int] = {}  # the dynamic shared-memory limit raised so far

    def function(self, name: str):
        f = self.functions.get(name)
        if f is None:
            try:
                f = self.raw.get_function(self.lowered.get(name, name))
            except Exception as e:
                raise CompileError(f"kernel {name!r} not found in the compiled module ({e})") from None
            self.functions[name] = f
        return f


def _storage_dtype(cp, dt: np.dtype) -> np.dtype:
    try:
        cp.dtype(dt)
        if dt.kind in "biufc":
            return dt
    except TypeError:
        pass
    return np.dtype(f"u{dt.itemsize}")  # bfloat16 and friends: raw bits


def _device_index() -> int:
    return 0


def compile_confinement(cp, options: Sequence[str]):
    """What CuPy's compile of a unit with these options may touch: the project's folders, CUDA's
    and CCCL's headers, the stand-ins, the CUDA toolkit CuPy uses, NVRTC's and the Python
    libraries; it writes only CuPy's kernel cache (and opens the driver's device files)."""
    from ..compile import confine, static
    inc = static.cuda_include_dir()
    ours = [*([inc] if inc else []), *static.cccl_include_dirs(), static.nvrtc_shim_dir()]
    try:
        toolkit = cp.cuda.get_cuda_path()
        if toolkit:
            ours.append(toolkit)
    except Exception:  # no toolkit: CuPy's wheels bring NVRTC and the headers
        pass
    import tempfile
    if _env_true("CUPY_CACHE_IN_MEMORY"):
        cache = tempfile.gettempdir()   # this worker's own (see _private_tempdir)
    else:
        cache = cupy_cache_dir()
        os.makedirs(cache, exist_ok=True)  # created here: the confined thread may not write its parent
    devices = sorted(str(d) for d in Path("/dev").glob("nvidia*") if not d.is_dir())
    return confine.for_unit(options, (*ours, *confine.loaded_library_dirs("libnvrtc"), *confine.python_dirs()),
                            workdir=cache, devices=devices)


def cupy_cache_dir() -> str:
    """CuPy's kernel cache (its documented `CUPY_CACHE_DIR`, else `~/.cupy/kernel_cache`), read
    the way CuPy reads it: CuPy has no public call for it, so the backend sets the variable when it
    starts and both always agree."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")


def _private_tempdir() -> None:
    """CuPy's compile writes its source to a temporary folder (tempfile's default): the confined
    thread may write only under CuPy's cache, so this worker's temporary files go to a folder of
    its own there, removed when it exits."""
    import atexit
    import shutil
    import tempfile
    from ..storage import writing
    if _env_true("CUPY_CACHE_IN_MEMORY"):
        base = tempfile.mkdtemp(prefix="astra-gpu-")
    else:
        with writing("CuPy's kernel cache", cupy_cache_dir()):
            os.makedirs(cupy_cache_dir(), exist_ok=True)
            base = tempfile.mkdtemp(prefix="astra-tmp-", dir=cupy_cache_dir())
    tempfile.tempdir = base
    atexit.register(shutil.rmtree, base, True)


def _require_confinement() -> None:
    """No Landlock here: CuPy's NVRTC would read a hostile `#include` unconfined, so the backend
    refuses, like the CPU backend (ASTRA_UNSAFE_NO_SANDBOX=1 is the informed user's way on)."""
    from ..compile import confine
    reason = confine.unavailable_reason()
    if reason:
        raise BackendUnavailable(f"the GPU backend {reason}")


def _load_nvrtc(cp) -> None:
    """Load NVRTC now, so its folder is known (and open) before the first confined compile."""
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception:  # found later by CuPy itself, or reported by the compile
        pass


def _env_true(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _retire_worker() -> None:
    try:
        from ..execution import worker
        worker.retire_after_reply()
    except Exception:
        pass


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "astra"


class GpuBackend(Backend):
    name = "gpu"
    caps = Capabilities(timing=True, copy_ceiling=True, device_info=True, compute_sanitizer=True)

    def __init__(self, *, exact_alloc: bool = False):
        _require_confinement()
        os.environ["CUPY_CACHE_DIR"] = cupy_cache_dir()   # the folder the confined compile may write
        _private_tempdir()
        cp = _cupy()
        try:
            n = cp.cuda.runtime.getDeviceCount()
        except Exception as e:
            raise BackendUnavailable(f"no usable CUDA device ({e})") from None
        if n < 1:
            raise BackendUnavailable("no CUDA device")
        self.cp = cp
        self.device = cp.cuda.Device(_device_index())
        self.device.use()
        self.props = _props(cp.cuda.runtime.getDeviceProperties(self.device.id))
        self.arch = f"sm_{self.props['major']}{self.props['minor']}"
        self.exact_alloc = False
        self.sanitizer = os.environ.get(SANITIZER_ENV) or None
        self._san_log = os.environ.get(SANITIZER_LOG_ENV) or None
        self._san_offset = os.path.getsize(self._san_log) if self._san_log and os.path.exists(self._san_log) else 0
        if exact_alloc or self.sanitizer:
            self.use_exact_allocations()
        self._modules: dict[str, GpuModule] = {}
        _load_nvrtc(cp)
        self._flush = None
        self._busy_until = 0.0  # time.monotonic() when the last timing loop ended
        self.poisoned: str | None = None

    # ---- device facts ---------------------------------------------------------------------
    @classmethod
    def probe(cls) -> tuple[bool, str]:
        """(usable, why) — call inside a worker: it creates a CUDA context."""
        try:
            _require_confinement()
            cp = _cupy()
            n = cp.cuda.runtime.getDeviceCount()
            if n < 1:
                return False, "no CUDA device"
            p = _props(cp.cuda.runtime.getDeviceProperties(0))
            cp.cuda.Device(0).use()
            cp.zeros(1, dtype=cp.float32).sum().item()  # the context really works
            return True, f"{p['name']} (sm_{p['major']}{p['minor']}, {p['sm_count']} SMs)"
        except BackendUnavailable as e:
            return False, str(e)
        except Exception as e:  # driver missing, no device...
            return False, f"no usable CUDA device ({e.__class__.__name__}: {e})"

    def device_info(self) -> dict:
        return dict(self.props)

    def sanitizer_pool(self, tool: str):
        return sanitizer_pool(tool)

    def use_exact_allocations(self) -> None:
        """CuPy's pool rounds sizes up (512 B and more): a sanitizer would miss small
        out-of-bounds accesses. Without the pool every buffer is its own cudaMalloc."""
        self.cp.get_default_memory_pool().free_all_blocks()
        self.cp.cuda.set_allocator(None)
        self.exact_alloc = True

    def _check_usable(self) -> None:
        if self.poisoned:
            raise LaunchError(f"the CUDA context was lost after an earlier fault ({self.poisoned}); "
                              f"the worker is being replaced — run again")

    # ---- compiling ------------------------------------------------------------------------
    def compile(self, source: str, name_expressions: Sequence[str], *, filename: str = "kernel.cu",
                options: Sequence[str] = (), sanitize: bool = False, races: bool = False) -> GpuModule:
        self._check_usable()
        if races:
            raise Unsupported("the GPU backend has no race-checker build (compute-sanitizer racecheck runs "
                              "the kernel instead)")
        if sanitize and not self.sanitizer:
            raise Unsupported("a sanitizer build needs a worker running under compute-sanitizer "
                              "(astra_cuda.backends.gpu.sanitizer_pool())")
        from ..compile import static
        names = list(dict.fromkeys(name_expressions))
        # CuPy adds the architecture of the current device itself.
        opts = [o for o in options if not o.startswith(("--gpu-architecture", "-arch"))]
        std = [] if any(o.startswith("-std=") for o in opts) else ["-std=c++17"]  # the project's, else ours
        opts = list(dict.fromkeys([*std, "-lineinfo", *opts, f"-I{static.nvrtc_shim_dir()}"]))
        if filename and os.path.dirname(os.path.abspath(filename)):
            opts.append(f"-I{os.path.dirname(os.path.abspath(filename))}")
        from ..compile.extract import header_digest
        # CuPy's own cache keys on the source text only: the headers' digest goes into the text
        ours = {f"-I{static.nvrtc_shim_dir()}", f"-I{static.cuda_include_dir()}"}
        headers = header_digest(source, filename, [o for o in opts if o not in ours])
        code = static.NVRTC_PRELUDE + (f"// astra: headers {headers}\n" if headers else "") + source
        key = hashlib.sha256(repr((code, names, opts)).encode()).hexdigest()
        mod = self._modules.get(key)
        if mod is not None:
            return mod
        from ..storage import writing
        with writing("CuPy's kernel cache", cupy_cache_dir()):  # a full disk: said, not a traceback
            try:
                raw = self._confined_raw_module(code, opts, names)
            except CompileError as e:
                inc = static.cuda_include_dir()
                more = [f"-I{d}" for d in ([inc] if inc else []) + static.cccl_include_dirs() if f"-I{d}" not in opts]
                if "cannot open source file" in e.log and more:
                    raw = self._confined_raw_module(code, opts + more, names)
                else:
                    raise
        mod = GpuModule(raw, names, key)
        for n in names:  # load now: a missing name is a compile problem, not a launch one
            mod.function(n)
        self._modules[key] = mod
        return mod

    def compile_unit(self, unit, *, sanitize: bool = False, races: bool = False) -> GpuModule:
        """The unit's whole file compiled by nvcc where a CUDA toolkit is installed (and, for a
        PyTorch extension, torch's headers are here): its cubin loaded, the kernel launched by
        its mangled name. Elsewhere CuPy's NVRTC compiles the cut unit."""
        from ..compile import nvcc, toolkit
        self._check_usable()
        tk, why = toolkit.for_file(unit.file_text, unit.path, unit.context) if unit.file_text else (None, "")
        if tk is None:
            mod = self.compile(unit.source + unit.appendix, [unit.name_expression], filename=unit.path,
                               options=unit.options(),
                               sanitize=sanitize, races=races)
            mod.compiler = mod.compiler or f"NVRTC (CuPy): {why or 'no file text'}"
            return mod
        if races:
            raise Unsupported("the GPU backend has no race-checker build (compute-sanitizer racecheck runs "
                              "the kernel instead)")
        if sanitize and not self.sanitizer:
            raise Unsupported("a sanitizer build needs a worker running under compute-sanitizer "
                              "(astra_cuda.backends.gpu.sanitizer_pool())")
        try:
            r = nvcc.compile(unit.file_text + unit.appendix, unit.path, unit.context, self.arch,
                             [unit.name_expression], toolkit=tk)
        except nvcc.InvalidName as e:
            raise CompileError(str(e)) from None
        if not r.ok:
            errs = [d for d in r.diagnostics if d.severity == "error"] or list(r.diagnostics)
            first = errs[0].human(os.path.basename(unit.path)) if errs else "nvcc failed"
            said = "\n".join(d.human(os.path.basename(unit.path)) for d in errs[:12])
            # never the text of an included .env (redact.included)
            raise CompileError(f"{first} ({r.compiler})", log=redact.included(f"{said}\n{r.log}".strip(), unit.path))
        assert r.cubin is not None
        with open(r.cubin, "rb") as f:
            key = "cubin:" + hashlib.sha256(f.read()).hexdigest()
        mod = self._modules.get(key)
        if mod is None:
            try:
                with self.device:
                    raw = self.cp.RawModule(path=r.cubin)
            except Exception as e:
                raise CompileError(f"could not load the compiled module: {e}", log=str(e)) from None
            mod = GpuModule(raw, [], key, compiler=r.compiler)
            self._modules[key] = mod
        mod.lowered.update(r.kernels)
        mod.names = tuple(dict.fromkeys((*mod.names, unit.name_expression)))
        with self.device:  # load now: a missing kernel is a compile problem, not a launch one
            mod.function(unit.name_expression)
        return mod

    def _confined_raw_module(self, code: str, opts: list[str], names: list[str]):
        """NVRTC opens the unit's `#include`s inside this process: CuPy compiles (and loads) the
        module in a thread confined to what a compiler of user code may read (astra_cuda.compile.confine),
        plus CuPy's kernel cache and the driver's device files. A compile that never finishes
        (an `#include` of a FIFO in the project) retires this worker."""
        from ..compile import confine
        try:
            return confine.call(compile_confinement(self.cp, opts), self._raw_module, code, opts, names)
        except confine.CompileTimeout:
            self.poisoned = "an NVRTC compile did not finish"
            _retire_worker()
            raise

    def _raw_module(self, code: str, opts: list[str], names: list[str]):
        cp = self.cp
        try:
            raw = cp.RawModule(code=code, options=tuple(opts), name_expressions=names or None)
            with self.device:  # a confined compile runs on a fresh thread: load on our device
                raw.compile()
            return raw
        except cp.cuda.compiler.CompileException as e:
            log = redact.included(e.get_message() if hasattr(e, "get_message") else str(e))
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log.strip() else "")
            raise CompileError(f"NVRTC: {first.strip()}", log=log) from None
        except Exception as e:
            from ..storage import is_full
            if is_full(e):
                raise  # CuPy's kernel cache on a full disk: the caller says so (storage.writing), not the kernel
            raise CompileError(f"could not load the compiled module: {e}", log=str(e)) from None

    def resources(self, module: GpuModule, name_expression: str) -> ResourceUsage:
        f = module.function(name_expression)
        return ResourceUsage(registers=int(f.num_regs), spills_bytes=None,
                             shared_static_bytes=int(f.shared_size_bytes),
                             stack_bytes=int(f.local_size_bytes),
                             max_threads_per_block=int(f.max_threads_per_block))

    # ---- memory ---------------------------------------------------------------------------
    def upload(self, host: np.ndarray) -> GpuBuffer:
        self._check_usable()
        host = np.ascontiguousarray(host)
        store = _storage_dtype(self.cp, host.dtype)
        arr = self.cp.asarray(host.view(store) if store != host.dtype else host)
        return GpuBuffer(arr, host.dtype, host.shape)

    def download(self, buf: GpuBuffer) -> np.ndarray:
        self._check_usable()
        try:
            out = self.cp.asnumpy(buf.array)
        except Exception as e:
            raise self._fault(e) from None
        return out.view(buf.dtype).reshape(buf.shape)

    def fill_bytes(self, buf: GpuBuffer, byte: int) -> None:
        self._check_usable()
        if buf.nbytes:
            self.cp.cuda.runtime.memsetAsync(buf.array.data.ptr, int(byte) & 0xFF, buf.nbytes,
                                             self.cp.cuda.get_current_stream().ptr)

    # ---- running --------------------------------------------------------------------------
    def _args(self, args: Sequence[GpuBuffer | Scalar | Packed]) -> tuple:
        out = []
        for a in args:
            if isinstance(a, GpuBuffer):
                out.append(a.array)
            elif isinstance(a, Packed):
                out.append(self._packed(a))
            elif isinstance(a, Scalar):
                dt = np.dtype(a.dtype) if a.dtype != "bfloat16" else None
                if dt is None or dt.kind not in "biuf":
                    import ml_dtypes
                    bits = np.array(a.value, dtype=ml_dtypes.bfloat16 if a.dtype == "bfloat16" else a.dtype)
                    out.append(bits.view(f"u{bits.itemsize}")[()])
                else:
                    out.append(dt.type(a.value))
            else:
                raise TypeError(f"unexpected kernel argument {a!r}")
        return tuple(out)

    def _packed(self, a: Packed):
        """A struct's bytes with device addresses written in: passed by value as a one-element
        NumPy array of that many bytes (CuPy hands its bytes to the launch as they are); a table
        of pointers: those bytes in device memory, passed as a pointer (the array stays alive
        until the stream has run the launch: CuPy's pool reuses memory in stream order)."""
        data = bytearray(a.data)
        for offset, buf, within in a.pointers:
            if not isinstance(buf, GpuBuffer) or within > buf.nbytes or offset + 8 > len(data):
                raise LaunchError("a packed argument points outside its data or at a buffer of another backend")
            data[offset:offset + 8] = int(buf.array.data.ptr + within).to_bytes(8, "little")
        host = np.frombuffer(bytes(data), dtype=np.uint8)
        if a.in_memory:
            return self.cp.asarray(host)
        return host.view(np.dtype((np.void, len(data))))

    def read_global(self, module: Module, symbol: str, nbytes: int) -> bytes:
        if not isinstance(module, GpuModule):
            raise LaunchError("module was not compiled by the GPU backend")
        try:
            with self.device:
                ptr = module.raw.get_global(symbol)
                host = np.empty(int(nbytes), dtype=np.uint8)
                ptr.copy_to_host(host.ctypes.data, int(nbytes))
        except Exception as e:
            raise LaunchError(f"{symbol} is not in the compiled module ({e})") from None
        return host.tobytes()

    def _enqueue(self, module: GpuModule, name_expression: str, launch: Launch, kargs: tuple) -> None:
        f = module.function(name_expression)
        if launch.shared_mem > 48 * 1024 and module.dyn_smem.get(name_expression, 0) < launch.shared_mem:
            f.max_dynamic_shared_size_bytes = int(launch.shared_mem)  # opt in beyond 48 KiB
            module.dyn_smem[name_expression] = int(launch.shared_mem)
        f(tuple(launch.grid), tuple(launch.block), kargs, shared_mem=int(launch.shared_mem))

    def launch(self, module: GpuModule, name_expression: str, launch: Launch,
               args: Sequence[GpuBuffer | Scalar | Packed], *, schedule: Schedule | None = None,
               timeout_s: float = 30.0) -> None:
        self._check_usable()
        cp = self.cp
        try:
            self._enqueue(module, name_expression, launch, self._args(args))
            done = cp.cuda.Event(disable_timing=True)
            done.record()
        except Exception as e:
            raise self._fault(e) from None
        # Poll rather than block, so a kernel that never finishes becomes an error here.
        deadline = time.monotonic() + timeout_s
        spins = 0
        try:
            while not self._finished(done):
                if time.monotonic() > deadline:
                    self.poisoned = f"a launch of {name_expression} did not finish within {timeout_s:g} s"
                    _retire_worker()
                    raise LaunchError(f"{name_expression}: the kernel did not finish within {timeout_s:g} s "
                                      f"(infinite loop or deadlock?)")
                spins += 1
                if spins > 200:
                    time.sleep(0.0005)
            done.synchronize()
        except LaunchError:
            raise
        except Exception as e:
            raise self._fault(e, self._sanitizer_report()) from None
        report = self._sanitizer_report()
        if report:
            raise LaunchError(f"compute-sanitizer ({self.sanitizer}) found errors in {name_expression}:\n{report}")

    def _finished(self, event) -> bool:
        """cudaEventQuery: done, not yet, or the fault that stopped the stream (raised). CuPy's
        `Event.done` reads a fault as 'not done', which would turn a crash into a timeout."""
        runtime = self.cp.cuda.runtime
        status = runtime.eventQuery(event.ptr)  # raises CUDARuntimeError for most faults itself
        if status == 0:
            return True
        if status == 600:  # cudaErrorNotReady
            return False
        raise runtime.CUDARuntimeError(status)

    def _sanitizer_report(self) -> str:
        """New error reports in the sanitizer's log since the last look ('' if none)."""
        if not self._san_log:
            return ""
        time.sleep(0.05)  # the tool writes its report as the kernel retires
        try:
            with open(self._san_log, "rb") as f:
                f.seek(self._san_offset)
                new = f.read().decode(errors="replace")
                self._san_offset = f.tell()
        except OSError:
            return ""
        noise = ("COMPUTE-SANITIZER", "Host Frame", "Saved host backtrace", "Device Frame:")
        lines = [ln.removeprefix("=========").strip() for ln in new.splitlines()
                 if ln.startswith("=========") and not any(n in ln for n in noise)]
        errors = [ln for ln in lines if ln and not ln.startswith("ERROR SUMMARY: 0")]
        return "\n".join(errors[:12])

    def _fault(self, e: Exception, report: str = "") -> Exception:
        if isinstance(e, (LaunchError, CompileError, BackendUnavailable)):
            return e
        text = f"{e.__class__.__name__}: {e}" + (f"\ncompute-sanitizer: {report}" if report else "")
        if any(s.lower() in text.lower() for s in _STICKY):
            self.poisoned = text
            _retire_worker()
            return LaunchError(f"the kernel faulted: {text} (the CUDA context is lost; the worker is replaced)")
        if "invalid argument" in text.lower() or "too many resources" in text.lower() or \
                "invalid configuration" in text.lower():
            return LaunchError(f"the launch was refused: {e}")
        return LaunchError(f"CUDA error: {text}")

    # ---- timing ---------------------------------------------------------------------------
    def _flush_buffer(self):
        if self._flush is None:
            size = max(2 * int(self.props.get("l2_bytes") or 0), 64 << 20)
            self._flush = self.cp.empty(size, dtype=self.cp.uint8)
        return self._flush

    def flush_l2(self) -> None:
        buf = self._flush_buffer()
        self.cp.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, self.cp.cuda.get_current_stream().ptr)

    def _wake(self) -> None:
        """After an idle spell (even the few ms between two chunks), keep the GPU busy before
        timing: the first launches would otherwise run at clocks that dropped while it idled."""
        idle = time.monotonic() - self._busy_until
        if idle > IDLE_S:
            for _ in range(LONG_WAKE_FLUSHES if idle > LONG_IDLE_S else WAKE_FLUSHES):
                self.flush_l2()

    def time(self, module: GpuModule, name_expression: str, launch: Launch, launches: Iterable[TimedLaunch], *,
             flush_l2: bool = True) -> TimingResult:
        self._check_usable()
        cp = self.cp
        runtime = cp.cuda.runtime
        stream = cp.cuda.get_current_stream().ptr
        d2d = runtime.memcpyDeviceToDevice
        events = []
        try:
            self._wake()
            for t in launches:  # a generator's Python runs while the GPU works on the launches before
                start, end = cp.cuda.Event(), cp.cuda.Event()
                events.append((start, end))
                kargs = self._args(t.args)
                for dst, src in t.copies:
                    runtime.memcpyAsync(dst.array.data.ptr, src.array.data.ptr, src.nbytes, d2d, stream)
                for buf, byte, pos in t.fills:
                    if pos is None:
                        runtime.memsetAsync(buf.array.data.ptr, int(byte) & 0xFF, buf.nbytes, stream)
                    else:
                        _bytes_of(cp, buf)[pos.array] = int(byte) & 0xFF
                if flush_l2:
                    self.flush_l2()
                start.record()
                self._enqueue(module, name_expression, launch, kargs)
                end.record()
                for dst, src, pos in t.keeps:
                    if pos is None:
                        runtime.memcpyAsync(dst.array.data.ptr, src.array.data.ptr, src.nbytes, d2d, stream)
                    else:
                        cp.take(src.array.reshape(-1), pos.array, out=dst.array.reshape(-1))
            if events:
                events[-1][1].synchronize()
            times = [cp.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in events]
        except Exception as e:
            raise self._fault(e) from None
        finally:
            self._busy_until = time.monotonic()
        return TimingResult(times)

    # ---- placing buffers for the timing loop -----------------------------------------------
    def allocate(self, nbytes: int) -> GpuBuffer:
        self._check_usable()
        n = max(1, int(nbytes))
        return GpuBuffer(self.cp.empty(n, dtype=self.cp.uint8), np.dtype(np.uint8), (n,))

    def view(self, buf: GpuBuffer, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> GpuBuffer:
        dt, shape = np.dtype(dtype), tuple(int(n) for n in shape)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset < 0 or offset % dt.itemsize or offset + n > buf.nbytes:
            raise ValueError(f"a view of {n} bytes at offset {offset} does not fit a buffer of {buf.nbytes} bytes")
        raw = buf.array.reshape(-1).view(self.cp.uint8)[offset:offset + n]
        return GpuBuffer(raw.view(_storage_dtype(self.cp, dt)).reshape(shape), dt, shape)

    def copy(self, dst: GpuBuffer, src: GpuBuffer) -> None:
        self._check_usable()
        if dst.nbytes != src.nbytes:
            raise ValueError(f"copy of {src.nbytes} bytes into {dst.nbytes}")
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(dst.array.data.ptr, src.array.data.ptr, src.nbytes, rt.memcpyDeviceToDevice,
                       self.cp.cuda.get_current_stream().ptr)

    def within_tolerance(self, got: GpuBuffer, want: GpuBuffer, atol: float, rtol: float) -> bool | None:
        self._check_usable()
        if got.nbytes != want.nbytes or got.dtype != want.dtype:
            return None
        try:
            return within_tolerance(self.cp, got.array, want.array, got.dtype, atol, rtol)
        except Exception as e:
            raise self._fault(e) from None

    def same_bytes(self, a: GpuBuffer, b: GpuBuffer) -> bool:
        self._check_usable()
        if a.nbytes != b.nbytes:
            return False
        cp = self.cp
        try:
            return bool(cp.array_equal(a.array.reshape(-1).view(cp.uint8), b.array.reshape(-1).view(cp.uint8)))
        except Exception as e:
            raise self._fault(e) from None

    def copy_ceiling(self) -> float:
        """Device copy bandwidth in bytes/s (read + written), measured once per device and cached."""
        name = "".join(c if c.isalnum() else "-" for c in self.props["name"]).strip("-")
        path = _cache_dir() / f"ceiling-{name}.json"
        try:
            data = json.loads(path.read_text())
            if data.get("bytes_per_s", 0) > 0:
                return float(data["bytes_per_s"])
        except (OSError, ValueError):
            pass
        bps = self.measure_copy_ceiling()
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"device": self.props["name"], "bytes_per_s": bps,
                                       "measured_at": time.time(), "method": "device-to-device copy, "
                                       "bytes read + written, median of 20"}))
            os.replace(tmp, path)
        except OSError:  # a cache only: a full disk keeps nothing, half-written or whole
            tmp.unlink(missing_ok=True)
        return bps

    def measure_copy_ceiling(self, nbytes: int = 1 << 30) -> float:
        cp = self.cp
        free, _ = cp.cuda.runtime.memGetInfo()
        nbytes = int(min(nbytes, free // 4)) // 256 * 256
        src = cp.empty(nbytes, dtype=cp.uint8)
        dst = cp.empty(nbytes, dtype=cp.uint8)
        cp.cuda.runtime.memsetAsync(src.data.ptr, 1, nbytes, cp.cuda.get_current_stream().ptr)
        stream = cp.cuda.get_current_stream().ptr
        kind = cp.cuda.runtime.memcpyDeviceToDevice
        for _ in range(3):
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream)
        times = []
        for _ in range(20):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream)
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) / 1000.0)
        del src, dst
        cp.get_default_memory_pool().free_all_blocks()
        return 2.0 * nbytes / float(np.median(times))

    def close(self) -> None:
        self._modules.clear()
        self._flush = None
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass


TOLERANCE_CHUNK = 1 << 25  # elements per step of the on-device comparison (bounded temporaries)


def within_tolerance(xp, got, want, dtype: np.dtype, atol: float, rtol: float) -> bool | None:
    """astra_cuda.gate.compare's pass rule on arrays of the array module `xp` (CuPy here; NumPy in the
    tests), in storage types (bfloat16 as uint16): every element bitwise equal, both NaN, or both
    finite within atol + rtol * |want|, 16-bit floats compared in float32 and the others in
    float64 like the host. None for a constant `got` (the host's constant-output rule decides)."""
    g, w = got.reshape(-1), want.reshape(-1)
    if g.size == 0:
        return True
    eight = dtype.itemsize == 1 and dtype.name.startswith("float8")
    if dtype.kind != "f" and dtype.name != "bfloat16" and not eight:  # integers, booleans: exact
        return bool(xp.array_equal(g, w))
    if g.size > 1 and bool(xp.all(g == g[0])):
        return None
    # 8-bit floats: every bit pattern's value, looked up (they are stored as bytes)
    table = xp.asarray(np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)) if eight else None
    for start in range(0, g.size, TOLERANCE_CHUNK):
        a, b = g[start:start + TOLERANCE_CHUNK], w[start:start + TOLERANCE_CHUNK]
        if dtype.name == "bfloat16":  # the upper half of a float32
            a = (a.astype(xp.uint32) << 16).view(xp.float32)
            b = (b.astype(xp.uint32) << 16).view(xp.float32)
        elif table is not None:
            a, b = table[a.view(xp.uint8)], table[b.view(xp.uint8)]
        else:
            work = xp.float32 if dtype.itemsize <= 2 else xp.float64
            a, b = a.astype(work), b.astype(work)
        with np.errstate(invalid="ignore", over="ignore"):
            close = xp.isfinite(a) & xp.isfinite(b) & (xp.abs(a - b) <= atol + rtol * xp.abs(b))
            ok = (a == b) | (xp.isnan(a) & xp.isnan(b)) | close
        if not bool(xp.all(ok)):
            return False
    return True


def _bytes_of(cp, buf: GpuBuffer):
    """The buffer as rows of bytes, one row per element (for filling chosen elements)."""
    return buf.array.reshape(-1).view(cp.uint8).reshape(-1, buf.dtype.itemsize)


def _props(p: dict) -> dict:
    """CuPy's device property dict, reduced to what Astra uses (keys may be str or bytes)."""
    g = {(k.decode() if isinstance(k, bytes) else k): v for k, v in p.items()}
    name = g.get("name", b"GPU")
    name = name.decode(errors="replace").rstrip("\0") if isinstance(name, bytes) else str(name)
    return {"name": name, "major": int(g.get("major", 0)), "minor": int(g.get("minor", 0)),
            "sm_count": int(g.get("multiProcessorCount", 0)), "l2_bytes": int(g.get("l2CacheSize", 0)),
            "regs_per_sm": int(g.get("regsPerMultiprocessor", 65536)),
            "smem_per_sm": int(g.get("sharedMemPerMultiprocessor", 228 * 1024)),
            "smem_per_block_optin": int(g.get("sharedMemPerBlockOptin", 227 * 1024)),
            "threads_per_sm": int(g.get("maxThreadsPerMultiProcessor", 2048)),
            "blocks_per_sm": int(g.get("maxBlocksPerMultiProcessor", 32)),
            "total_mem": int(g.get("totalGlobalMem", 0))}


def sanitizer_pool(tool: str = "memcheck"):
    """A worker pool whose workers run under `compute-sanitizer --tool TOOL` (memcheck,
    racecheck, initcheck, synccheck). Inside, GpuBackend uses exact-size allocations (CuPy's
    pool rounds sizes up and would hide small out-of-bounds accesses) and turns each report into
    a LaunchError. Raises BackendUnavailable when compute-sanitizer is not installed."""
    import shutil
    import tempfile
    from ..execution import worker
    exe = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if os.access("/usr/local/cuda/bin/compute-sanitizer", os.X_OK) else None)
    if exe is None:
        raise BackendUnavailable("compute-sanitizer is not installed")
    log = os.path.join(tempfile.gettempdir(), f"astra-sanitizer-{tool}-{os.getpid()}.log")
    return worker.pool(f"gpu-sanitizer-{tool}", size=1, env={SANITIZER_ENV: tool, SANITIZER_LOG_ENV: log},
                       prefix=(exe, "--tool", tool, "--log-file", log, "--print-limit", "20",
                               "--target-processes", "application-only"))
