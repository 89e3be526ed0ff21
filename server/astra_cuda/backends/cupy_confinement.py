"""Where CuPy's NVRTC compile of a cut unit may reach, on the GPU backend: the confinement of
the thread it compiles in (`compile_confinement`, under `astra_cuda.compile.confine`), CuPy's
kernel cache (the one folder it writes) and the worker's own temporary folder inside it, the
refusal to start where Landlock is missing, and NVRTC loaded before the first confined compile.
Imports no CuPy: the backend passes its module in."""
from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Sequence

from .base import BackendUnavailable

if TYPE_CHECKING:
    from ..compile.confine import Confinement


def compile_confinement(cp: ModuleType, options: Sequence[str]) -> Confinement:
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
    if env_true("CUPY_CACHE_IN_MEMORY"):
        cache = tempfile.gettempdir()   # this worker's own (see private_tempdir)
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


def private_tempdir() -> None:
    """CuPy's compile writes its source to a temporary folder (tempfile's default): the confined
    thread may write only under CuPy's cache, so this worker's temporary files go to a folder of
    its own there, removed when it exits."""
    import atexit
    import shutil
    import tempfile
    from ..storage import writing
    if env_true("CUPY_CACHE_IN_MEMORY"):
        base = tempfile.mkdtemp(prefix="astra-gpu-")
    else:
        with writing("CuPy's kernel cache", cupy_cache_dir()):
            os.makedirs(cupy_cache_dir(), exist_ok=True)
            base = tempfile.mkdtemp(prefix="astra-tmp-", dir=cupy_cache_dir())
    tempfile.tempdir = base
    atexit.register(shutil.rmtree, base, True)


def require_confinement() -> None:
    """No Landlock here: CuPy's NVRTC would read a hostile `#include` unconfined, so the backend
    refuses, like the CPU backend (ASTRA_UNSAFE_NO_SANDBOX=1 is the informed user's way on)."""
    from ..compile import confine
    reason = confine.unavailable_reason()
    if reason:
        raise BackendUnavailable(f"the GPU backend {reason}")


def load_nvrtc(cp: ModuleType) -> None:
    """Load NVRTC now, so its folder is known (and open) before the first confined compile."""
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception:  # found later by CuPy itself, or reported by the compile
        pass


def env_true(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
