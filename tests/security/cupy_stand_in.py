"""CuPy as the GPU backend's compile, launch and timing loop drive it, where the device is one
address space: every module loaded in the process has its `__device__` variables (`globals`) in
it, and a kernel reaches any of them (on a GPU: one CUDA context, an address the candidate kept,
guessed or scanned for). Kernels are Python functions by name, `kernel(module_globals, args)`;
an image is the JSON of the globals a load starts from. CuPy's own behaviour kept: RawModule
compiles through `cupy.cuda.compiler.function.Module().load(image)` (where the backend's
`own_module.keeping_image` looks), and one loaded module per source or path (its memo)."""
from __future__ import annotations

import ctypes
import json
import types
import weakref
from typing import Any, Callable

import numpy as np

LIVE: "weakref.WeakSet[Module]" = weakref.WeakSet()   # every loaded module: the device's address space
KERNELS: dict[str, Callable[[dict, tuple], None]] = {}
LOADS, UNLOADS = [0], [0]
GLOBALS: dict[int, Any] = {}   # "device addresses" of globals read (get_global_var) -> their bytes


def image(**globals_: int) -> bytes:
    return json.dumps(globals_).encode()


class Module:
    """cupy.cuda.function.Module: one load of an image."""

    def __init__(self):
        self.globals: dict[str, Any] = {}
        self.mapping: dict[str, str] | None = None

    def load(self, data: bytes) -> None:
        try:
            self.globals = json.loads(data)
        except ValueError:   # a real cubin (nvcc's): the globals its source gives them
            self.globals = {"table": 3}
        LIVE.add(self)
        LOADS[0] += 1

    def get_function(self, name: str) -> Function:
        return Function(self, name)

    def get_global_var(self, name: str) -> int:
        data = np.asarray(self.globals[name], np.int32)   # int32 globals, laid out as on the device
        GLOBALS[id(data)] = data
        return id(data)

    def _set_mapping(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def __del__(self):
        UNLOADS[0] += 1


class Function:
    def __init__(self, module: Module, name: str):
        if name not in KERNELS:
            raise KeyError(name)
        self.module, self.name, self.ptr = module, name, id(self)
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem: int = 0, **kw) -> None:
        KERNELS[self.name](self.module.globals, args)


function = types.SimpleNamespace(Module=Module, Function=Function)
_MEMO: dict[Any, Module] = {}     # CuPy's _get_raw_module: one module per source (or path) per process
SOURCES: dict[str, bytes] = {}    # source text -> the image its compile gives


class CompileException(Exception):
    pass


compiler = types.SimpleNamespace(function=function, CompileException=CompileException)


class RawModule:
    def __init__(self, code: str | None = None, options: tuple = (), name_expressions=None, path: str | None = None):
        self.key = code if code is not None else ("path", path)
        self.code, self.path = code, path

    def compile(self) -> None:
        self.module   # noqa: B018 - compiled (and loaded) when first asked for, as CuPy does

    @property
    def module(self) -> Module:
        mod = _MEMO.get(self.key)
        if mod is None:
            mod = compiler.function.Module()   # looked up when called, as CuPy's compiler does
            data = next((img for src, img in SOURCES.items() if self.code and self.code.startswith(src)), None)
            mod.load(data if data is not None else image(table=3))
            _MEMO[self.key] = mod
        return mod

    def get_function(self, name: str) -> Function:
        return Function(self.module, name)


class Event:
    def __init__(self, *a, **k):
        self.ptr = id(self)

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _get_elapsed_time(start, end) -> float:
    return 0.001


def _memcpy(dst: int, src: int, n: int, kind: int) -> None:
    ctypes.memmove(dst, GLOBALS[src].ctypes.data, n)


runtime = types.SimpleNamespace(eventQuery=lambda ptr: 0, CUDARuntimeError=RuntimeError, memcpy=_memcpy,
                                memcpyDeviceToHost=2,
                                memsetAsync=lambda *a: None, memcpyAsync=lambda *a: None,
                                memcpyDeviceToDevice=3)
cuda = types.SimpleNamespace(function=function, compiler=compiler, runtime=runtime, Event=Event,
                             get_elapsed_time=_get_elapsed_time,
                             get_current_stream=lambda: types.SimpleNamespace(ptr=0),
                             driver=types.SimpleNamespace(funcSetAttribute=lambda *a: None))
cp = types.SimpleNamespace(cuda=cuda, RawModule=RawModule)


def reset() -> None:
    LIVE.clear()
    KERNELS.clear()
    _MEMO.clear()
    SOURCES.clear()
    compiler.function = function
    LOADS[0] = UNLOADS[0] = 0


def backend(monkeypatch) -> Any:
    """A GpuBackend on this CuPy (no device: what compile, launch and time touch); NVRTC's
    compile runs in the calling thread (the confinement is another test's)."""
    import contextlib

    from astra_cuda.backends import gpu
    from astra_cuda.backends.gpu_sanitizer import SanitizerLog
    from astra_cuda.compile import confine
    reset()
    monkeypatch.setattr(confine, "call", lambda c, fn, *a, **k: fn(*a))
    monkeypatch.setattr(gpu, "compile_confinement", lambda *a: None)
    b = object.__new__(gpu.GpuBackend)
    b.cp, b.device, b._modules, b.poisoned, b.sanitizer, b.arch = cp, contextlib.nullcontext(), {}, None, None, "sm_90"
    b._sanitizer_log, b._held, b._loaded, b._busy_until, b._flush = SanitizerLog(None), [], None, 1e18, None
    b.props = {"l2_bytes": 0}
    return b
