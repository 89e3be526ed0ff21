"""The reference's loaded module on the GPU backend is its own, never a candidate's, and every
launch of it starts from the globals its image holds.

One file's reference kernel (the spec's `reference = "…"`) and its rewrite compile to one cubin
(nvcc on the whole file), and an unchanged file is the same text as its pinned baseline. CuPy
keeps one loaded module per cubin path and per NVRTC source in each process (its
`_get_raw_module` is memoized), and a module's `__device__` variables are every kernel's of it:
a candidate's writes to them reached the reference's later launches in the same worker — its
outputs in the comparison, its time beside the candidate (tests/security/catalogue.py:
device_global_rewrites_reference, device_global_slows_reference). So the reference loads a copy
of the cubin at a path of its own, and its NVRTC source ends in one more comment line: another
path or another source is another module, with `__device__` variables of its own.

A module of its own is not enough where the reference and the candidate share one CUDA context:
a candidate that guesses (or scans for) the address of the reference module's `__device__`
variables writes them between one reference launch and the next, and the gate interleaves the
two case after case (and a worker keeps the module across the checks of a document)
(`guessed_global_rewrites_reference_module`). So every launch of the reference — and every timing
loop of it, and every read of its globals — runs from a module loaded afresh from its compiled
image (`Image`, kept in memory: the cubin nvcc made, or the one CuPy's NVRTC compile or kernel
cache handed to the driver, seen by `keeping_image`), never recompiled: a `cuModuleLoadData` of a
cubin already linked, well under a millisecond for a kernel's module, a few for the largest. The
loaded module is unloaded when the next one replaces it (`Loaded`, dropped by the backend), so
one stays loaded at a time whatever the number of launches. Per launch, in the backend, rather
than all of a check's reference outputs first: the gate runs the reference from a dozen places
(each case, device cases, the checks over its own output, repeated runs, the profiler's
expectations and timing), and one rule where the module is launched holds for all of them, and
for any added later.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REFERENCE = "reference"
MARK = "\n// astra: the reference's own module\n"   # after the code: no line number moves
MAX_DYNAMIC_SHARED = 8   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, where CuPy does not name it


def nvrtc_source(code: str, role: str) -> str:
    """The source NVRTC compiles for `role`."""
    return code + MARK if role == REFERENCE else code


def cubin_path(cubin: str, role: str) -> str:
    """The path `role` loads `cubin` from: for the reference, a copy in a folder of its own under
    the worker's private temporary folder (`cupy_confinement.private_tempdir`, removed when it exits)."""
    if role != REFERENCE:
        return cubin
    from ..storage import writing
    with writing("the reference's module", tempfile.gettempdir()):
        return shutil.copy(cubin, tempfile.mkdtemp(prefix="astra-reference-"))


@dataclass(frozen=True)
class Image:
    """A compiled module as the driver loads it, and its kernels' names in it."""
    data: bytes
    names: dict[str, str] = field(default_factory=dict)   # name expression -> the kernel's name in the image


class _Kernel:
    """A kernel of a `Loaded` module, launched as the backend launches CuPy's RawKernel."""

    def __init__(self, cp: Any, function: Any):
        self.cp, self.function = cp, function

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
                 shared_mem: int = 0) -> None:
        self.function(grid, block, args, shared_mem=shared_mem)

    def _allow_shared(self, n: int) -> None:
        driver = self.cp.cuda.driver
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", MAX_DYNAMIC_SHARED)
        driver.funcSetAttribute(self.function.ptr, attr, int(n))

    max_dynamic_shared_size_bytes = property(None, _allow_shared)   # as RawKernel's, set only


class Loaded:
    """One load of an `Image` (the driver's module, not CuPy's memoized one): its `__device__`
    variables as the image initialises them. Unloaded when dropped (CuPy's Module unloads itself)."""

    def __init__(self, cp: Any, image: Image):
        self.cp = cp
        self.module = cp.cuda.function.Module()
        self.module.load(image.data)

    def get_function(self, name: str) -> _Kernel:
        return _Kernel(self.cp, self.module.get_function(name))

    def read(self, symbol: str, nbytes: int) -> bytes:
        """The bytes of global `symbol` as loaded."""
        rt = self.cp.cuda.runtime
        host = np.empty(int(nbytes), dtype=np.uint8)
        rt.memcpy(host.ctypes.data, self.module.get_global_var(symbol), int(nbytes), rt.memcpyDeviceToHost)
        return host.tobytes()


_keep = threading.local()
_install = threading.Lock()


class _Compiler:
    """CuPy's compiler's view of `cupy.cuda.function`: its `Module` keeps the image it loads
    while `keeping_image` is on in the thread (CuPy's compile and its kernel cache both end in
    `function.Module().load(image)`)."""

    def __init__(self, real: Any):
        self._real = real
        base = real.Module

        def load(module: Any, image: bytes) -> Any:
            if getattr(_keep, "on", False):
                module.image = bytes(image)
            return base.load(module, image)
        self.Module = type("Module", (base,), {"load": load})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class keeping_image:
    """Within it, in this thread, modules CuPy compiles or takes from its cache keep their image
    (read back with `image_of`). Installed in CuPy's compiler once per process."""

    def __init__(self, cp: Any):
        self.compiler = cp.cuda.compiler

    def __enter__(self) -> keeping_image:
        with _install:
            if not isinstance(self.compiler.function, _Compiler):
                self.compiler.function = _Compiler(self.compiler.function)
        _keep.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        _keep.on = False


def image_of(raw: Any) -> Image | None:
    """The image CuPy loaded for RawModule `raw` (compiled within `keeping_image`), with its
    name expressions' lowered names; None where CuPy handed over none."""
    module = raw.module
    data = getattr(module, "image", None)
    if data is None:
        return None
    return Image(data, dict(getattr(module, "mapping", None) or {}))
