"""Where the CUDA toolkit is: the nvcc Astra compiles a user's file with.

Looked for in this order: `ASTRA_CUDA_TOOLKIT` (a toolkit folder, or `none` for NVRTC only), the
project's compile_commands.json compiler, `CUDA_HOME`, `CUDA_PATH`, `nvcc` on `PATH`, then
/usr/local/cuda. A compile_commands.json comes with a repository, so its compiler is taken only
when it is a toolkit's own nvcc outside the project (a `bin/` with `nvcc.profile` and `ptxas`,
beside an `include/` with `cuda_runtime.h`): Astra never runs a program a cloned repository
names. nvcc found through the environment may be a wrapper script (/usr/local/bin/nvcc that
execs the real one); its toolkit folder is then what `nvcc -dryrun` reports as `_HERE_`.

A full toolkit has the headers of CUDA's libraries (cuBLAS, cuFFT, ...); a compiler-only one
(nvcc and CCCL) plus NVIDIA's wheels should compile the same files: `library_headers` gives
every nvcc compile the wheels' library headers the toolkit lacks, in a folder searched after
the project's.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import confine
from .project import ProjectContext

TOOLKIT_ENV = "ASTRA_CUDA_TOOLKIT"
DEFAULT_ROOTS = ("/usr/local/cuda",)


@dataclass(frozen=True)
class Toolkit:
    nvcc: str        # the toolkit's own nvcc (real path)
    root: str        # its folder: bin/, nvvm/, include/ or targets/<arch>/include/
    version: str     # '13.0'
    origin: str      # how it was found, for messages

    @property
    def include_dirs(self) -> tuple[str, ...]:
        """The toolkit's header folders (a compile may read them)."""
        root = Path(self.root)
        found = [root / "include", *sorted((root / "targets").glob("*/include"))]
        return tuple(str(d.resolve()) for d in found if d.is_dir())

    def describe(self) -> str:
        return f"nvcc {self.version}"


def _toolkit_bin(path: Path) -> bool:
    """A toolkit's own bin/ (what nvcc itself reads at start)."""
    return (path / "nvcc.profile").is_file() and (path / "ptxas").is_file()


def _root_of_real(nvcc: str) -> str | None:
    real = Path(os.path.realpath(nvcc))
    return str(real.parent.parent) if real.name == "nvcc" and _toolkit_bin(real.parent) else None


def _root_by_dryrun(nvcc: str) -> str | None:
    """The folder a wrapper's nvcc runs from (`#$ _HERE_=…/bin` in its dry run)."""
    try:
        p = subprocess.run([nvcc, "-dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True,
                           timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^#\$ _HERE_=(.+)$", p.stdout + p.stderr, re.M)
    if m is None:
        return None
    here = Path(m.group(1).strip())
    return str(here.parent.resolve()) if _toolkit_bin(here) else None


@lru_cache(maxsize=16)
def _version(nvcc: str, mtime_ns: int) -> str | None:
    try:
        p = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", p.stdout)
    return m.group(1) if m else None


@lru_cache(maxsize=16)
def at(root: str, origin: str) -> Toolkit | None:
    """The toolkit in folder `root`, or None when it is not one."""
    nvcc = Path(root) / "bin" / "nvcc"
    if not (nvcc.is_file() and os.access(nvcc, os.X_OK) and _toolkit_bin(nvcc.parent)):
        return None
    real = os.path.realpath(nvcc)
    version = _version(real, os.stat(real).st_mtime_ns)
    return Toolkit(real, str(Path(root).resolve()), version, origin) if version else None


def _from_compile_commands(context: ProjectContext) -> Toolkit | None:
    cc = context.compiler
    if not cc or os.path.basename(cc) != "nvcc" or not os.path.isabs(cc):
        return None
    root = _root_of_real(cc)
    if root is None:
        return None
    inside = confine.project_dirs(context.options())
    if any(os.path.realpath(root).startswith(os.path.realpath(d).rstrip("/") + "/") for d in inside):
        return None  # a repository's own "toolkit": never run
    return at(root, "compile_commands.json")


@lru_cache(maxsize=4)
def _from_path(path_env: str) -> Toolkit | None:
    exe = shutil.which("nvcc", path=path_env)
    if exe is None:
        return None
    root = _root_of_real(exe) or _root_by_dryrun(exe)
    return at(root, f"PATH ({exe})") if root else None


def find(context: ProjectContext | None = None) -> Toolkit | None:
    """The toolkit to compile with, or None (then NVRTC on a cut unit is the compiler)."""
    chosen = os.environ.get(TOOLKIT_ENV, "").strip()
    if chosen.lower() == "none":
        return None
    if chosen:
        return at(chosen, TOOLKIT_ENV)
    if context is not None and (tk := _from_compile_commands(context)) is not None:
        return tk
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var, "").strip()
        if home and (tk := at(home, var)) is not None:
            return tk
    if (tk := _from_path(os.environ.get("PATH", os.defpath))) is not None:
        return tk
    for root in DEFAULT_ROOTS:
        if (tk := at(root, root)) is not None:
            return tk
    return None


def why_none() -> str:
    """The reason `find` gave nothing, for the NVRTC fallback's label."""
    if os.environ.get(TOOLKIT_ENV, "").strip().lower() == "none":
        return f"CUDA toolkit turned off ({TOOLKIT_ENV}=none)"
    return "no CUDA toolkit found"


def for_file(text: str, path: str, context: ProjectContext) -> tuple[Toolkit | None, str]:
    """(the toolkit that compiles this file, '') — or (None, why NVRTC on a cut unit judges
    instead): no toolkit, or a PyTorch extension where neither torch nor its headers are here
    (the user's own build could not compile it here either)."""
    from . import torch_ext
    tk = find(context)
    if tk is None:
        return None, why_none()
    if torch_ext.uses_torch(text, path, context) and not torch_ext.available(context):
        return None, "the file includes PyTorch's headers and torch is not installed here (nor its include folders given)"
    return tk, ""


LIBRARIES = ("cublas", "cusparse", "cufft", "curand", "cusolver", "nccl", "cudnn", "nvrtc")  # header name prefixes


def _wheel_library_headers(toolkit: Toolkit) -> list[Path]:
    """The library headers (and header folders) in the NVIDIA wheels of this Python that the
    toolkit's own include folders lack; never one the toolkit has, so nothing of it is replaced."""
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
    except ImportError:
        return []
    own = [Path(d) for d in toolkit.include_dirs]
    found: dict[str, Path] = {}
    for wheel in sorted({p for base in nvidia.__path__ for p in Path(base).glob("*/include") if p.is_dir()}):
        for entry in sorted(wheel.iterdir()):
            if entry.name.startswith(LIBRARIES) and not any((d / entry.name).exists() for d in own):
                found.setdefault(entry.name, entry)
    return list(found.values())


def _fingerprint(entry: Path) -> list[list[str | int]]:
    files = sorted(entry.rglob("*")) if entry.is_dir() else [entry]
    return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]


def library_headers(toolkit: Toolkit) -> list[str]:
    """nvcc flags (`-I<folder>`, after the project's own) for the CUDA library headers that NVIDIA's
    wheels have and the toolkit lacks, or []. The folder holds copies, named by what they copy: a
    confined compile reads it like any `-I` folder, and an updated wheel is a new folder."""
    headers = _wheel_library_headers(toolkit)
    if not headers:
        return []
    digest = hashlib.sha256(repr([toolkit.root, [_fingerprint(h) for h in headers]]).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "astra" / "library-headers"
    folder = base / digest
    if not folder.is_dir():
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=base))
        for h in headers:
            (shutil.copytree if h.is_dir() else shutil.copy2)(h, tmp / h.name)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process made it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    return [f"-I{folder}"]
