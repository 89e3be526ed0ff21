"""The CPU backend's host compiler: which compiler and flags (CUDA's and libcu++'s headers, torch's),
Astra's own builds (the runtime object, the precompiled shim, the executor) and the content-hash
cache every build goes into, pruned by age and size; a user's unit is built by `unit_build` through
these same steps.

Long because the builds and the cache are one protocol: every build (runtime object, precompiled
shim, module, executor) is named by the content it came from, written beside its final name and
renamed in under one lock per name, and the pruning and the quotas rely on those names and on the
times builds mark when they are reused."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from astra_cuda.backends.base import BackendUnavailable, CompileError, Unsupported

from astra_cuda.compile import confine
from astra_cuda.compile.cut import TORCH_DEVICE_HEADER, TORCH_DEVICE_MACRO
from astra_cuda import redact, storage

from . import screen

RUNTIME_DIR = Path(__file__).parent / "runtime"
TORCH_TYPES_HEADER = "astra_torch_types.h"   # in runtime/include, beside TORCH_DEVICE_HEADER
SHIM = RUNTIME_DIR / "astra_cuda_shim.h"
RUNTIME_SRC = RUNTIME_DIR / "astra_runtime.cpp"
FALLBACK_INCLUDE = RUNTIME_DIR / "fallback"
COMPILE_TIMEOUT_S = 120     # Astra's own builds (the runtime, the precompiled shim)
CACHE = "the CPU backend's module cache"  # what a full disk stops writing (storage.NoSpace)
MAX_MODULE_BYTES = 1 << 30  # the compiled modules of the cache together (each at most 64 MiB:
                            # confine.COMPILER_FILE_SIZE); the oldest go first


def cache_dir() -> Path:
    base = os.environ.get("ASTRA_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "astra"
    d = root / "cpu"
    d.mkdir(parents=True, exist_ok=True)
    return d


@functools.cache
def compiler() -> str:
    cxx = os.environ.get("ASTRA_CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise BackendUnavailable("the CPU backend needs a C++ compiler (g++) on PATH")
    return cxx


@functools.cache
def compiler_version() -> str:
    return subprocess.run([compiler(), "--version"], capture_output=True, text=True).stdout.split("\n")[0]


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA fp16/bf16/vector headers: from the nvidia-cuda-runtime wheel (with stand-ins for
    the two toolkit-internal headers that wheel lacks), else from a CUDA toolkit."""
    candidates = []
    try:
        import nvidia  # namespace package of the NVIDIA wheels

        for p in nvidia.__path__:
            candidates += [Path(p) / "cu13" / "include", Path(p) / "cuda_runtime" / "include"]
    except ImportError:
        pass
    for c in candidates:
        if (c / "cuda_fp16.h").is_file() and (c / "vector_types.h").is_file():
            if (c / "crt" / "host_defines.h").is_file() and (c / "nv" / "target").is_file():
                return (str(c),)
            return (str(FALLBACK_INCLUDE), str(c))
    for c in (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include",):
        if (c / "cuda_fp16.h").is_file():
            return (str(c),)
    raise BackendUnavailable("CUDA headers (cuda_fp16.h) not found: install nvidia-cuda-runtime")


def libcuxx_flags(source: str) -> list[str]:
    """Flags that include the unit's host-capable libcu++ headers (`cuda/std/limits`, ...) in host
    mode — before the shim and NVRTC's macros, as a host compiler's build of them — and put CCCL's
    folder (with its own `nv/target`) ahead of the stand-ins. Their `#include` in the unit then
    finds them done. [] when the unit includes none."""
    included = screen.includes(source)
    heads = list(dict.fromkeys(p for p in included if screen.host_libcuxx(p)))
    # the real CUB brings libcu++'s function objects (cuda::maximum, cuda::std::plus); its stand-in does
    # not, so a unit that includes CUB and names cuda:: gets them (one that does not keeps the PCH)
    implied = ["cuda/std/functional", "cuda/functional"] \
        if "cuda::" in source and any(p.startswith("cub/") for p in included) else []
    if not heads and not implied:
        return []
    folder = next((str(c) for d in cuda_include_dirs() for c in (Path(d) / "cccl", Path(d))
                   if (c / "cuda" / "std" / "limits").is_file()), None)
    if folder is None:
        if not heads:
            return []
        raise Unsupported("the CPU backend cannot run this kernel faithfully; needs a GPU to verify: libcu++ ("
                          + ", ".join(heads) + ") is not installed for the host compiler (nvidia-cuda-cccl)")
    return ["-isystem", folder, *(x for h in dict.fromkeys(heads + implied) for x in ("-include", h))]


SANITIZERS = ("", "address", "thread")  # plain build, ASan (out of bounds), TSan (data races)

# Kernel code is compiled with the compiler's alignment check: a GPU faults on an access that is
# not aligned to its type (a `float4` load from a float pointer plus one), x86 does not, so without
# it the CPU would pass what the GPU cannot run. A failed check calls the runtime's own handler
# (astra_runtime.cpp), never a sanitizer library: it names the access and aborts the launch.
ALIGNMENT_CHECK = ["-fsanitize=alignment", "-fno-sanitize-recover=alignment"]


def unit_flags(sanitize: str) -> list[str]:
    """Flags for kernel code (a unit and the precompiled shim it includes): the runtime and the
    link take `base_flags` only, so that no sanitizer library is linked for the alignment check."""
    return [*base_flags(sanitize), *ALIGNMENT_CHECK]


def base_flags(sanitize: str) -> list[str]:
    flags = ["-std=c++17", "-O1", "-fPIC", "-ffp-contract=fast", "-fno-strict-aliasing",
             "-w", "-pthread"]
    if platform.machine() in ("x86_64", "AMD64"):
        flags.append("-mfma")  # nvcc contracts a*b+c into FMAs; so must we, to match bits
    if sanitize:  # sanitized frames are larger: 256 KiB fiber stacks instead of 64 KiB
        flags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-DASTRA_STACK_SHIFT=18"]
    if os.environ.get("ASTRA_CPU_SWITCH") == "ucontext":
        flags.append("-DASTRA_USE_UCONTEXT")  # the portable fallback (default off x86-64)
    flags += ["-I", str(RUNTIME_DIR / "include")]  # stand-ins (cooperative groups, CUB) ahead of the toolkit
    cub = cub_header_names()
    if cub is not None:
        flags += ["-I", str(cub)]
    for d in cuda_include_dirs():
        flags += ["-isystem", d]
    flags += ["-I", str(RUNTIME_DIR)]
    return flags


@functools.cache
def cub_header_names() -> Path | None:
    """A folder with every header name of the real CUB (`cub/block/block_load.cuh`, ...), each
    including the stand-in `cub/cub.cuh`: a kernel reaches CUB through whichever header its
    project includes, and a file that includes CUB but whose kernel uses none of it is never
    refused for the include (a CUB name the stand-in lacks is refused by the screen)."""
    from astra_cuda.compile import static
    real = next((Path(d) / "cub" for d in static.cccl_include_dirs() if (Path(d) / "cub").is_dir()), None)
    if real is None:
        return None
    names = sorted(str(p.relative_to(real)) for p in real.rglob("*.cuh") if p.name != "cub.cuh" or p.parent != real)
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    root = cache_dir() / f"cub-names-{digest}"
    done = root / ".complete"
    if not done.exists():
        tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix="cub-names."))
        for name in names:
            f = tmp / "cub" / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("// Astra CPU backend: CUB's header names lead to the stand-in.\n#include <cub/cub.cuh>\n")
        (tmp / ".complete").write_text("")
        try:
            os.replace(tmp, root)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return root


@functools.cache
def runtime_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(RUNTIME_DIR.rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    h.update(compiler_version().encode())
    h.update(" ".join(cuda_include_dirs()).encode())
    return h.hexdigest()[:16]


_build_locks: dict[str, threading.RLock] = {}
_build_locks_guard = threading.Lock()


@contextmanager
def one_build(out: Path):
    """One build of a given output at a time in this process: a second thread that wants the same
    module (the gate builds in parallel, and the reference is often the candidate's very text)
    waits and then finds it cached instead of compiling it again."""
    with _build_locks_guard:
        lock = _build_locks.setdefault(str(out), threading.RLock())
    with lock:
        yield


def atomic_build(out: Path, cmd_for: "callable", what: str, confined: "confine.Confinement | None" = None) -> Path:
    """Run a compile into a temporary file and rename it into place (safe across processes).
    With `confined`, the compiler runs sandboxed and writes only into its build directory."""
    with one_build(out):
        return atomic_build_unlocked(out, cmd_for, what, confined)


def reuse(out: Path) -> bool:
    """Mark a cached build as just used (pruning spares recent ones); False when there is none,
    or when another process pruned it a moment ago."""
    try:
        os.utime(out)
        return True
    except FileNotFoundError:
        return False


def atomic_build_unlocked(out: Path, cmd_for: "callable", what: str,
                           confined: "confine.Confinement | None" = None) -> Path:
    if reuse(out):
        return out
    if confined is not None:
        tmp = str(Path(confined.workdir) / "out.tmp")
    else:
        # the temporary name must not match the cache's globs: pruning would take it mid-build
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name + ".", suffix=".tmp")
        os.close(fd)
    try:
        cmd = cmd_for(tmp)
        limit = COMPILE_TIMEOUT_S if confined is None else confine.compiler_seconds()  # user code: 45 s
        try:
            r = run_compiler(cmd, confined, limit)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{what}: the C++ compiler timed out after {limit:g} s")
        if r.returncode != 0:  # out of room for its output: the cache's disk, not the kernel
            storage.after_compiler(r.stderr, Path(tmp).parent, CACHE)
        if r.returncode != 0 and confined is not None and (hit := limit_message(r)) is not None:
            raise CompileError(f"{what}: {hit}", log=redact.included(r.stderr))
        if r.returncode != 0:
            launcher = [l for l in r.stderr.splitlines() if l.startswith("<astra launcher>") and ": error" in l]
            if launcher and not any(": error" in l and not l.startswith("<astra launcher>")
                                    for l in r.stderr.splitlines()):
                raise CompileError(f"{what}: cannot take the kernel by its name expression (is the "
                                   f"name right, and are template arguments given?):\n"
                                   + "\n".join(launcher[:4]), log=redact.included(r.stderr))
            log = redact.included(r.stderr)  # never the text of an included .env
            raise CompileError(f"{what} failed:\n{first_errors(log)}", log=log)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def build_dir() -> tempfile.TemporaryDirectory:
    """A private build directory inside the cache (same filesystem: the result is renamed in),
    named by its owner (`_owner`) so that one a killed process left is known as stale."""
    global _builds_pruned
    if time.monotonic() - _builds_pruned > BUILD_PRUNE_EVERY_S:
        _builds_pruned = time.monotonic()
        prune_builds()
    return tempfile.TemporaryDirectory(prefix=f"build-{_owner()}-", dir=cache_dir())


# A process killed mid-build (SIGKILL, the machine's OOM killer, a closed editor) leaves its build
# folder (a unit, its objects: 2.5 GB of them here). Each folder is named by its owner: pid, start
# time (pids are reused) and the boot and pid namespace they mean something in; a folder whose
# owner is gone is removed, one of a live process never. A folder named otherwise (another
# namespace or an older Astra) goes only after a day unused.
BUILD_PRUNE_EVERY_S = 600
_builds_pruned = -float(BUILD_PRUNE_EVERY_S)
_BUILD_NAME = re.compile(r"build-(\d+)-(\d+)-([0-9a-f]{8})-[^/]+")


def _start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None where there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            line = f.read()
        return int(line[line.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=1)
def _where() -> str:
    """The boot and pid namespace a pid means something in ('' where either cannot be read)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return hashlib.sha256(f"{boot} {os.readlink('/proc/self/ns/pid')}".encode()).hexdigest()[:8]
    except OSError:
        return ""


def _owner() -> str:
    start, where = _start_time(os.getpid()), _where()
    return f"{os.getpid()}-{start}-{where}" if start is not None and where else "x"


def prune_builds() -> list[str]:
    """Remove the build folders in the cache whose owner is gone (or, named otherwise, unused for
    a day): only this user's real folders, never a link. Returns the names removed."""
    d, now, gone = cache_dir(), time.time(), []
    try:
        entries = list(os.scandir(d))
    except OSError:
        return gone
    for e in entries:
        if not e.name.startswith("build-"):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        m = _BUILD_NAME.fullmatch(e.name)
        if m and _where() and m.group(3) == _where():
            stale = _start_time(int(m.group(1))) != int(m.group(2))
        else:
            stale = now - st.st_mtime > 86400
        if stale:
            shutil.rmtree(e.path, ignore_errors=True)  # never follows a link inside
            gone.append(e.name)
    return gone


def confinement(workdir: str, options: Sequence[str]) -> confine.Confinement:
    """What a compile of user code in `workdir` may touch (confine.py says what and why)."""
    from astra_cuda.compile import torch_ext
    torch = torch_ext.read_dirs() if f"-D{TORCH_DEVICE_MACRO}" in options else ()
    return confine.for_unit(options, (*cuda_include_dirs(), str(RUNTIME_DIR), str(cache_dir()), *torch), workdir)


def torch_options(source: str, options: Sequence[str]) -> list[str]:
    """A PyTorch extension's unit (its torch #includes lead to TORCH_DEVICE_HEADER, `compile.cut`):
    the macro that reads those parts of torch, the installed torch's folders as system headers
    where the project gives none, its element types read before the shim as a host compiler reads
    them (`-include astra_torch_types.h`: a later `-include` comes after it), and the standard torch
    compiles with (`compile.torch_ext.STD`, as nvcc's compile of the file). [] for any other unit."""
    from astra_cuda.compile import torch_ext
    from astra_cuda.compile.project import ProjectContext
    if TORCH_DEVICE_HEADER not in screen.includes(source):
        return []
    given = torch_ext.given(ProjectContext(include_dirs=tuple(o[2:] for o in options if o.startswith("-I"))))
    dirs = () if given else torch_ext.installed_include_dirs()
    if not given and not dirs:
        return []   # no torch here: the unit compiles without it, or says which name it lacks
    return [f"-D{TORCH_DEVICE_MACRO}", *(x for d in dirs for x in ("-isystem", d)), f"-std={torch_ext.STD}",
            "-include", TORCH_TYPES_HEADER]


def run_compiler(cmd: list[str], confined: "confine.Confinement | None",
                 timeout_s: float = COMPILE_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a compiler command; sandboxed (Landlock, limits, an empty environment) when `confined`."""
    if confined is None:
        return confine.run_group(cmd, timeout_s)
    return confine.run(cmd, confined, timeout_s)


def limit_message(r: subprocess.CompletedProcess, memory: int = 0) -> str | None:
    """What a compile of user code that hit one of its limits is told (None: it hit none)."""
    return confine.limit_message(r.stderr, r.returncode, memory)


def first_errors(log: str, limit: int = 12) -> str:
    lines = [l for l in log.splitlines() if ": error" in l or ": fatal error" in l]
    return "\n".join((lines or log.splitlines())[:limit])


def _flags_digest(sanitize: str) -> str:
    return hashlib.sha256(" ".join(unit_flags(sanitize)).encode()).hexdigest()[:8]


def runtime_object(sanitize: str) -> Path:
    out = cache_dir() / f"runtime-{runtime_digest()}-{_flags_digest(sanitize)}.o"
    flags = base_flags(sanitize)
    if sanitize == "thread":  # not instrumented itself: it only annotates fibers and barriers
        flags = [f for f in flags if f != "-fsanitize=thread"] + ["-DASTRA_TSAN_ANNOTATE"]
    # -O2: built once per cache, and the scheduler is on every thread's path.
    return atomic_build(out, lambda tmp: [compiler(), *flags, "-O2", "-c", str(RUNTIME_SRC), "-o", tmp],
                         "building the CPU runtime")


def tsan_hook() -> Path:
    """The small library the race checker's child preloads ahead of libtsan, through which the
    runtime filters ThreadSanitizer's reports (runtime/astra_tsan_hook.cpp)."""
    out = cache_dir() / f"tsan-hook-{runtime_digest()}.so"
    return atomic_build(out, lambda tmp: [compiler(), "-shared", "-fPIC", "-O2", str(RUNTIME_DIR / "astra_tsan_hook.cpp"),
                                           "-o", tmp], "building the race checker's report hook")


def executor_program() -> Path:
    """The CPU backend's executor (runtime/astra_executor.cpp: the zygote and its launch
    processes), built once per runtime version."""
    out = cache_dir() / f"executor-{runtime_digest()}"
    atomic_build(out, lambda tmp: [compiler(), "-std=c++17", "-O2", str(RUNTIME_DIR / "astra_executor.cpp"),
                                    "-o", tmp, "-ldl"], "building the CPU backend's executor")
    if out.stat().st_mode & 0o555 != 0o555:  # readable by the user it runs as (the symbolizer reads it)
        out.chmod(0o755)
    return out


def precompiled_shim(sanitize: str) -> Path:
    """The shim header with a precompiled (.gch) twin next to it: a unit then compiles ~3x
    faster. Falls back to the plain header if precompiling fails."""
    d = cache_dir() / f"pch-{runtime_digest()}-{_flags_digest(sanitize)}"
    header, gch = d / SHIM.name, d / (SHIM.name + ".gch")
    if gch.exists():
        os.utime(d)
        return header
    d.mkdir(exist_ok=True)
    if not header.exists():
        fd, tmp = tempfile.mkstemp(dir=d, prefix="shim.")
        with os.fdopen(fd, "w") as f:
            f.write(SHIM.read_text())
        os.replace(tmp, header)
    try:
        atomic_build(gch, lambda tmp: [compiler(), *unit_flags(sanitize), "-x", "c++-header", str(header), "-o", tmp],
                      "precompiling the CUDA shim")
    except CompileError:
        return SHIM
    return header


def prepare(sanitize: str = "") -> tuple[Path, Path]:
    """Build (or find) the runtime object and the precompiled shim, in parallel when both are
    missing: (runtime object, shim header to -include)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        shim = pool.submit(precompiled_shim, sanitize)
        rt = runtime_object(sanitize)
        return rt, shim.result()


def built_modules(d: Path) -> list[Path]:
    """The cache's kernel modules and the constructor programs built of units (`unit_build.build_host`)."""
    return [*d.glob("mod-*.so"), *d.glob("host-*")]


def module_bytes() -> int:
    total = 0
    for p in built_modules(cache_dir()):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


MAX_MODULES = 512
# Precompiled shims (~65 MB a set, one per runtime version and build flavour): every checkout
# and version of Astra on a machine adds its own, and a day of several checkouts left 312 of them
# (20 GB, a full disk). The least recently used go first, never the running version's.
MAX_PCH_BYTES = 2 << 30
PRUNE_MIN_AGE_S = 600  # a module used within this long may be loading in another process
QUOTA_MIN_AGE_S = 60   # over MAX_MODULE_BYTES, only the last minute's modules are spared


def _age(p: Path, now: float) -> float | None:
    try:
        return now - p.stat().st_mtime
    except FileNotFoundError:  # another process pruned or renamed it meanwhile
        return None


def prune_cache() -> None:
    """Keep the cache bounded: the newest modules (at most MAX_MODULES, MAX_MODULE_BYTES), and only the current runtime's builds
    (precompiled headers are ~30 MB each). Several processes share the cache, so anything may
    vanish under us, and nothing used in the last minutes is taken."""
    d, now = cache_dir(), time.time()
    aged = [(a, p) for p in built_modules(d) if (a := _age(p, now)) is not None]
    aged.sort(key=lambda ap: ap[0], reverse=True)  # oldest first
    if len(aged) > MAX_MODULES:
        for a, p in aged[:len(aged) - MAX_MODULES * 3 // 4]:
            if a > PRUNE_MIN_AGE_S:
                p.unlink(missing_ok=True)
    sizes = []
    for a, p in aged:
        try:
            sizes.append((a, p, p.stat().st_size))
        except FileNotFoundError:
            pass
    total = sum(n for _, _, n in sizes)
    for a, p, n in sizes:  # a byte quota too: a few large modules (a static array) must not fill the disk
        if total <= MAX_MODULE_BYTES * 3 // 4:
            break
        if a > QUOTA_MIN_AGE_S:
            p.unlink(missing_ok=True)
            total -= n
    current = runtime_digest()
    prune_builds()
    for p in list(d.glob("runtime-*.o")) + list(d.glob("pch-*")) + list(d.glob("*.tmp")):
        # other processes may run other versions: only what is unused for a day goes
        a = _age(p, now)
        if a is not None and a > 86400 and (p.suffix == ".tmp" or current not in p.name):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    pchs = []
    for p in d.glob("pch-*"):
        a = _age(p, now)  # a set's folder is touched whenever it is used
        if a is not None:
            pchs.append((a, p, sum(f.stat().st_size for f in p.iterdir() if f.is_file())))
    total = sum(n for _, _, n in pchs)
    for a, p, n in sorted(pchs, key=lambda apn: apn[0], reverse=True):  # least recently used first
        if total <= MAX_PCH_BYTES * 3 // 4:
            break
        if a > PRUNE_MIN_AGE_S and current not in p.name:
            shutil.rmtree(p, ignore_errors=True)
            total -= n


def warm() -> None:
    """Build the runtime objects and precompiled shims ahead of time (`make setup`)."""
    prune_cache()
    for sanitize in SANITIZERS:
        rt, shim = prepare(sanitize)
        print(f"cpu backend{' (' + sanitize + ' sanitizer)' if sanitize else ''}: {rt.name}, {shim}")
