"""The GPU backend: CuPy on an NVIDIA GPU. Where a CUDA toolkit is installed, a kernel's module is
the cubin nvcc made of the user's whole file (`astra_cuda.compile.nvcc`, with the project's flags),
loaded with `RawModule(path=...)` and launched by the kernel's mangled name; elsewhere CuPy's
NVRTC compiles the cut unit (`compile`).

CuPy is imported only inside the worker process (`astra_cuda.execution.worker`; `astra_cuda.execution.jobs.BackendsJob`
probes it there). A fault that poisons the CUDA context (illegal address, trap) makes this backend
refuse further work and asks the worker to retire after replying, so the next job gets a fresh
process and context.

Timing follows the method of ../shared/notes/gpu-machine.md: CUDA events around each launch,
the L2 flushed (a memset of twice the L2 size) before each, and the caller's plan of copies,
poison fills and snapshots (`TimedLaunch`) done outside the events; after an idle spell the GPU
is kept busy for a few milliseconds first, so clocks that dropped while idle do not slow the first
launches. Beside it: where CuPy's NVRTC compile may reach (`cupy_confinement`), the pass rule on device
arrays (`device_compare`), the compute-sanitizer pool and log (`gpu_sanitizer`), the device's copy
ceiling (`copy_ceiling`), how a launch's failure is read (`gpu_faults`), the reference's module of
its own, loaded afresh for each launch (`own_module`), host programs (`gpu_host`).
Long because it is the one place CuPy's device is driven: compiling, memory and buffer placement,
launches with their fault handling and the timing loop share the device, its stream and its state.
"""
from __future__ import annotations

import hashlib
import os
import time
from contextlib import nullcontext
from typing import Any, Iterable, Sequence

import numpy as np

from .. import redact
from .base import (Backend, BackendUnavailable, Capabilities, CompileError, Launch, LaunchError, Module,
                   Packed, ResourceUsage, Scalar, Schedule, TimedLaunch, TimingResult, Unsupported)
from . import copy_ceiling, gpu_buffer, gpu_faults, gpu_host, guard, own_module
from .gpu_buffer import GpuBuffer, storage_dtype as _storage_dtype
from .cupy_confinement import compile_confinement, cupy_cache_dir, load_nvrtc, private_tempdir, require_confinement
from .device_compare import within_tolerance
from .gpu_arrays import DeviceArrays
from .gpu_sanitizer import SANITIZER_ENV, SANITIZER_LOG_ENV, SanitizerLog, sanitizer_pool

IDLE_S = 0.001       # idle longer than this before a timing loop: wake the GPU first ...
WAKE_FLUSHES = 20    # ... with this many L2-flush memsets (~0.7 ms on an H100),
LONG_IDLE_S = 0.05   # and after a longer spell
LONG_WAKE_FLUSHES = 100  # with this many (~4 ms)

def _cupy():
    try:
        import cupy
        return cupy
    except Exception as e:  # ImportError, or CuPy failing to find CUDA
        raise BackendUnavailable(f"CuPy is not usable here ({e.__class__.__name__}: {e})") from None


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
        self.image: own_module.Image | None = None   # the reference's: loaded afresh for each launch

    def function(self, name: str):
        f = self.functions.get(name)
        if f is None:
            try:
                f = self.raw.get_function(self.lowered.get(name, name))
            except Exception as e:
                raise CompileError(f"kernel {name!r} not found in the compiled module ({e})") from None
            self.functions[name] = f
        return f


def _device_index() -> int:
    return 0


def _retire_worker() -> None:
    try:
        from ..execution import worker
        worker.retire_after_reply()
    except Exception:
        pass


class GpuBackend(DeviceArrays, Backend):
    name = "gpu"
    caps = Capabilities(timing=True, copy_ceiling=True, device_info=True, compute_sanitizer=True, device_arrays=True)

    def __init__(self, *, exact_alloc: bool = False):
        require_confinement()
        os.environ["CUPY_CACHE_DIR"] = cupy_cache_dir()   # the folder the confined compile may write
        private_tempdir()
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
        self.exact_alloc, self._guard, self._uploads = False, None, 0
        self.sanitizer = os.environ.get(SANITIZER_ENV) or None
        self._sanitizer_log = SanitizerLog(os.environ.get(SANITIZER_LOG_ENV) or None)
        if exact_alloc or self.sanitizer:
            self.use_exact_allocations()
        self._modules: dict[str, GpuModule] = {}
        load_nvrtc(cp)
        self._flush = None
        self._busy_until = 0.0  # time.monotonic() when the last timing loop ended
        self._held: list = []   # the last launch's records (see _args)
        self._loaded: GpuModule | None = None   # the reference's last fresh load (see _as_loaded)
        self.poisoned: str | None = None

    # ---- device facts ---------------------------------------------------------------------
    @classmethod
    def probe(cls) -> tuple[bool, str]:
        """(usable, why) — call inside a worker: it creates a CUDA context."""
        try:
            require_confinement()
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
    def _builds(self, sanitize: bool, races: bool) -> None:
        if races:
            raise Unsupported("the GPU backend has no race-checker build (compute-sanitizer racecheck runs "
                              "the kernel instead)")
        if sanitize and not self.sanitizer:
            raise Unsupported("a sanitizer build needs a worker running under compute-sanitizer "
                              "(astra_cuda.backends.gpu_sanitizer.sanitizer_pool())")

    def compile(self, source: str, name_expressions: Sequence[str], *, filename: str = "kernel.cu",
                options: Sequence[str] = (), sanitize: bool = False, races: bool = False, role: str = "") -> GpuModule:
        self._check_usable()
        self._builds(sanitize, races)
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
        code = own_module.nvrtc_source(code, role)   # the reference's module is its own (own_module)
        key = hashlib.sha256(repr((code, names, opts, role)).encode()).hexdigest()
        mod = self._modules.get(key)
        if mod is not None:
            return mod
        from ..storage import writing
        with writing("CuPy's kernel cache", cupy_cache_dir()):  # a full disk: said, not a traceback
            try:
                raw = self._confined_raw_module(code, opts, names, role)
            except CompileError as e:
                inc = static.cuda_include_dir()
                more = [f"-I{d}" for d in ([inc] if inc else []) + static.cccl_include_dirs() if f"-I{d}" not in opts]
                if "cannot open source file" in e.log and more:
                    raw = self._confined_raw_module(code, opts + more, names, role)
                else:
                    raise
        mod = GpuModule(raw, names, key)
        if role == own_module.REFERENCE:   # launched afresh from its image, never recompiled (own_module)
            mod.image = own_module.image_of(raw)
            if mod.image is None:
                raise CompileError("CuPy did not hand over the reference's compiled module, which each of its "
                                   "launches loads afresh (own_module): this CuPy is not supported")
        for n in names:  # load now: a missing name is a compile problem, not a launch one
            mod.function(n)
        self._modules[key] = mod
        return mod

    def compile_unit(self, unit, *, sanitize: bool = False, races: bool = False, role: str = "") -> GpuModule:
        """The unit's whole file compiled by nvcc where a CUDA toolkit is installed (and, for a
        PyTorch extension, torch's headers are here): its cubin loaded, the kernel launched by
        its mangled name. Elsewhere, and for the search's proven cut (`unit.search_cut`, set by
        `compile.fastpath` only), CuPy's NVRTC compiles the cut unit, or nvcc as proven. Kept per role (own_module)."""
        from ..compile import SEARCH_NVCC, nvcc, toolkit
        self._check_usable()
        tk, why = toolkit.for_file(unit.file_text, unit.path, unit.context) if unit.file_text else (None, "")
        text = unit.file_text
        if getattr(unit, "search_cut", ""):   # the search's proven cut (compile.fastpath)
            if unit.search_cut == SEARCH_NVCC and tk is not None:
                text = unit.source   # nvcc on the cut: the proof compared its code with the file's
            else:
                tk, why = None, unit.search_cut   # NVRTC, in-process
        if tk is None:
            mod = self.compile(unit.source + unit.appendix, [unit.name_expression], filename=unit.path,
                               options=unit.options(), sanitize=sanitize, races=races, role=role)
            mod.compiler, mod.unit = mod.compiler or f"NVRTC (CuPy): {why or 'no file text'}", unit
            return mod
        self._builds(sanitize, races)
        try:
            r = nvcc.compile(text + unit.appendix, unit.path, unit.context, self.arch,
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
            data = f.read()
        key = f"cubin:{hashlib.sha256(data).hexdigest()}:{role}"
        mod = self._modules.get(key)
        if mod is None:
            try:
                with self.device:
                    raw = self.cp.RawModule(path=own_module.cubin_path(r.cubin, role))
            except Exception as e:
                raise CompileError(f"could not load the compiled module: {e}", log=str(e)) from None
            mod = GpuModule(raw, [], key, compiler=r.compiler if text is unit.file_text else f"{unit.search_cut}: {r.compiler}")
            if role == own_module.REFERENCE:   # launched afresh from its image (own_module)
                mod.image = own_module.Image(data)
            self._modules[key] = mod
        mod.lowered.update(r.kernels)
        mod.names, mod.unit = tuple(dict.fromkeys((*mod.names, unit.name_expression))), unit
        with self.device:  # load now: a missing kernel is a compile problem, not a launch one
            mod.function(unit.name_expression)
        return mod

    def build_host(self, module: Module, main: str) -> Any:
        return gpu_host.build_host(self.arch, module, main)

    def _confined_raw_module(self, code: str, opts: list[str], names: list[str], role: str = ""):
        """NVRTC opens the unit's `#include`s inside this process: CuPy compiles (and loads) the
        module in a thread confined to what a compiler of user code may read (astra_cuda.compile.confine),
        plus CuPy's kernel cache and the driver's device files. A compile that never finishes
        (an `#include` of a FIFO in the project) retires this worker."""
        from ..compile import confine
        try:
            return confine.call(compile_confinement(self.cp, opts), self._raw_module, code, opts, names, role)
        except confine.CompileTimeout:
            self.poisoned = "an NVRTC compile did not finish"
            _retire_worker()
            raise

    def _raw_module(self, code: str, opts: list[str], names: list[str], role: str = ""):
        cp = self.cp
        try:
            raw = cp.RawModule(code=code, options=tuple(opts), name_expressions=names or None)
            # a confined compile runs on a fresh thread: load on our device; the reference's image kept
            with self.device, own_module.keeping_image(cp) if role == own_module.REFERENCE else nullcontext():
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
        if self.exact_alloc:
            return gpu_buffer.upload(self.cp, host, None)
        return gpu_buffer.upload(self.cp, host, self._next_guard())

    def _next_guard(self) -> Any:
        """The guard for the next guarded buffer: the base pattern keyed by a byte of its own."""
        if self._guard is None:
            self._guard = self.cp.asarray(guard.PATTERN)   # the guard's base pattern on the device, once
        self._uploads += 1
        return guard.keyed(self._guard, self._uploads)

    def guarded(self, dtype: np.dtype, shape: tuple[int, ...]) -> GpuBuffer:
        """A device case's run buffer (gate/device_case.py): its bytes and a keyed guard after
        them in one allocation, as `upload` places them — nothing through the host."""
        self._check_usable()
        dt, shape = np.dtype(dtype), tuple(int(n) for n in shape)
        if self.exact_alloc:
            return super().guarded(dt, shape)
        return gpu_buffer.guarded(self.cp, dt, shape, self._next_guard())

    def overrun(self, buf: GpuBuffer) -> tuple[int, int] | None:
        return None if buf.raw is None else guard.first_changed(self.cp, buf.raw, buf.nbytes, buf.pattern)

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
        # records a struct's field points to: no kernel argument holds them, so they are held here
        # until the next launch's arguments are made (by then this launch is enqueued, and CuPy's
        # pool reuses their memory in stream order)
        self._held = []
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
            if isinstance(buf, Packed) and buf.in_memory and within == 0 and offset + 8 <= len(data):
                # records a field points to: in device memory like a table, alive as long as one
                records = self._packed(buf)
                self._held.append(records)
                data[offset:offset + 8] = int(records.data.ptr).to_bytes(8, "little")
                continue
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
                if module.image is not None:   # the reference's globals as loaded, never as launches left them
                    return own_module.Loaded(self.cp, module.image).read(symbol, nbytes)
                ptr = module.raw.get_global(symbol)
                host = np.empty(int(nbytes), dtype=np.uint8)
                ptr.copy_to_host(host.ctypes.data, int(nbytes))
        except Exception as e:
            raise LaunchError(f"{symbol} is not in the compiled module ({e})") from None
        return host.tobytes()

    def _as_loaded(self, module: GpuModule) -> GpuModule:
        """The module a launch or a timing loop runs: the reference's loaded afresh from its image
        (own_module), which no candidate's launch has met. The load before stays held until this one
        replaces it (its launches are over by then) and is unloaded then: one at a time."""
        if module.image is None:
            return module
        with self.device:
            self._loaded = GpuModule(own_module.Loaded(self.cp, module.image), module.names, module.key,
                                     {**module.image.names, **module.lowered}, module.compiler)
        return self._loaded

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
            self._enqueue(self._as_loaded(module), name_expression, launch, self._args(args))
            done = cp.cuda.Event(disable_timing=True)
            done.record()
        except Exception as e:
            raise self._fault(e) from None
        # Poll rather than block, so a kernel that never finishes becomes an error here.
        deadline = time.monotonic() + timeout_s
        spins = 0
        try:
            while not gpu_faults.finished(cp, done):
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
            raise self._fault(e, self._sanitizer_log.new_errors()) from None
        report = self._sanitizer_log.new_errors()
        if report:
            raise LaunchError(f"compute-sanitizer ({self.sanitizer}) found errors in {name_expression}:\n{report}")

    def _fault(self, e: Exception, report: str = "") -> Exception:
        if isinstance(e, (LaunchError, CompileError, BackendUnavailable)):
            return e
        text = f"{e.__class__.__name__}: {e}" + (f"\ncompute-sanitizer: {report}" if report else "")
        if gpu_faults.lost_context(text):
            self.poisoned = text
            _retire_worker()
            return LaunchError(f"the kernel faulted: {text} (the CUDA context is lost; the worker is replaced)")
        return gpu_faults.launch_error(e, text)

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
            module = self._as_loaded(module)   # the reference: one fresh load for the loop, no candidate beside it
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
        return copy_ceiling.cached(self.props["name"], self.measure_copy_ceiling)

    def measure_copy_ceiling(self, nbytes: int = 1 << 30) -> float:
        return copy_ceiling.measure(self.cp, nbytes)

    def close(self) -> None:
        self._modules.clear()
        self._flush = self._loaded = None
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass


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
