"""What a compile of user code may read and write: one policy for every compiler that reads a
user's source — NVRTC for the static checks and the GPU backend, g++ for the CPU backend, nvcc —
and for Astra's own reads of a project's headers (extract).

It may read the system's headers, libraries and programs, Astra's own files (CUDA's headers, the
NVRTC stand-ins, the CPU runtime, compile caches, the Python libraries an in-process compiler
runs from), and the user's project: the folders of the unit's -I options, widened to their
workspace root so that `#include "../common/x.cuh"` works — never the home folder itself, nor
a folder above it, where dotfiles with credentials live. It writes only its own build directory
(and /dev/null). Nothing else: `#include "/etc/shadow"`, "~/.ssh/id_rsa", a `../` escape or a
symbolic link that leads out of the project fails with "Permission denied" instead of quoting
the file in a diagnostic, and `#include "/dev/zero"` fails instead of reading forever.

Enforced by Landlock (compile/sandbox.py) in two ways: a compiler program runs through the
sandbox wrapper (`run`); an in-process compiler (NVRTC, through ctypes or CuPy) runs in a
fresh thread that confines itself first (`call`) — Landlock binds the calling thread and the
threads it starts, never the rest of the worker. Why that is sound: the thread is new for every
compile and ends with it (a Python thread is never reused), so no other job ever runs confined
and the confinement never outlives the compile; Landlock only removes rights, so whatever else
Python happens to run on it (a finaliser) can fail but never read more; the in-process compilers
read their `#include`s on the calling thread (NVRTC has no thread pool unless `-split-compile`,
which no project file can pass: project.DEVICE_FLAGS). A compile that does not finish leaves its
thread blocked inside NVRTC: `CompileTimeout`, and the caller retires its worker.

Where the kernel has no Landlock, compiles of user code are refused with the reason
(ASTRA_UNSAFE_NO_SANDBOX=1 lets an informed user go on without; the process says so once).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Sequence, TypeVar, cast

from ..errors import BackendUnavailable, CompileError

SYSTEM_EXEC = ("/usr/bin", "/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/lib", "/lib64", "/lib32",
               "/usr/lib32", "/usr/local/bin", "/usr/local/lib", "/usr/local/libexec")
SYSTEM_READ = ("/usr/include", "/usr/local/include", "/usr/share/gcc", "/etc/ld.so.cache", "/etc/alternatives")
CUDA_TOOLKITS = ("/usr/local/cuda", "/opt/cuda")  # a toolkit's folder, also as /usr/local/cuda-12.8
COMPILE_TIMEOUT_S = 120.0
MEMORY_ENV = "ASTRA_COMPILER_MEMORY"  # e.g. "8G": a project whose kernels need more to compile


def _size(text: str) -> int | None:
    """'2G', '512M', '1048576' -> bytes (None when it does not read)."""
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in ("K", "M", "G") else t
    return int(digits) * scale if digits.isdigit() and int(digits) > 0 else None


TIME_ENV = "ASTRA_COMPILER_TIMEOUT"  # e.g. "300": a project whose heavy templates take nvcc minutes


# A PyTorch extension's compile reads ~6,000 of torch's headers: nvcc's front end needs more than
# 2 GiB of address space for them (`std::optional` instantiations ran out at 2 GiB on a 2-core
# machine and on an H200) and 30-120 s on 2 cores. Such a compile gets these budgets instead
# (vLLM files with torch 2.14.1: cicc peaks at 3.5-4.0 GiB of address space, 2.7-3.0 GB resident,
# up to 167 s of CPU; benchmarks/results/hostile-bounds-cpu.md).
HEAVY_MEMORY = 6 << 30
HEAVY_SECONDS = 240.0


@lru_cache(maxsize=1)
def installed_torch_include_dirs() -> tuple[str, ...]:
    """The include folders of the torch installed beside Astra (as cpp_extension.include_paths()
    lists them; found, never imported), or () when there is none."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return ()
    for loc in list(spec.submodule_search_locations or []) if spec is not None else []:
        inc = Path(loc) / "include"
        if (inc / "torch" / "extension.h").is_file() or (inc / "torch" / "all.h").is_file():
            api = inc / "torch" / "csrc" / "api" / "include"
            return tuple(str(d.resolve()) for d in (inc, api) if d.is_dir())
    return ()


def heavy(options: Iterable[str]) -> bool:
    """Whether a compile with these options reads the torch installed beside Astra (a PyTorch
    extension's: `-I`/`-isystem` of its include folder, by real path). Never what a file or a
    project can say of itself — a define, a project folder named torch/include — so hostile code
    cannot buy the larger budgets; a project's own copy of torch gets them from the user
    ($ASTRA_COMPILER_MEMORY, $ASTRA_COMPILER_TIMEOUT)."""
    installed = set(installed_torch_include_dirs())
    if not installed:
        return False
    folders, it = [], iter(options)
    for o in it:
        if o in ("-I", "-isystem"):
            folders.append(next(it, ""))
        elif o.startswith(("-I", "-isystem")):
            folders.append(o.removeprefix("-isystem") if o.startswith("-isystem") else o[2:])
    return any(f and os.path.realpath(f) in installed for f in folders)


def compiler_seconds(heavy: bool = False) -> float:
    """How long each compiler run of user code (nvcc, NVRTC, g++, their preprocessors) may take:
    45 s (a real unit compiles in seconds to tens of seconds; a 2**16-term expression keeps g++
    busy for minutes, a constexpr loop nvcc as long), 240 s for a PyTorch extension, or
    $ASTRA_COMPILER_TIMEOUT seconds."""
    try:
        seconds = float(os.environ.get(TIME_ENV, ""))
    except ValueError:
        seconds = 0.0
    return seconds if seconds > 0 else (HEAVY_SECONDS if heavy else 45.0)


def compiler_memory(heavy: bool = False) -> int:
    """The address space each compiler process of user code gets: 2 GiB (a 835-byte macro
    explosion drove the preprocessor to 4 GB, and what read its output to 22 GB), 6 GiB for a
    PyTorch extension, or $ASTRA_COMPILER_MEMORY."""
    return _size(os.environ.get(MEMORY_ENV, "")) or (HEAVY_MEMORY if heavy else 2 << 30)


COMPILER_FILE_SIZE = 64 << 20  # the largest file a compiler of user code writes (a module, a preprocessed unit)
# What the limits look like when they are hit: a clear error instead of the compiler's words.
OUT_OF_MEMORY = ("virtual memory exhausted", "out of memory", "Cannot allocate memory", "std::bad_alloc",
                 "Killed signal terminated program")
FILE_TOO_LARGE = ("File size limit exceeded", "signal 25", "File too large")


def limit_hit(log: str, returncode: int) -> str | None:
    """Which of the limits a failed compiler run hit ('memory', 'file size'), else None."""
    if returncode in (-25, 128 + 25, 153) or any(s in log for s in FILE_TOO_LARGE):
        return "file size"
    if any(s in log for s in OUT_OF_MEMORY):
        return "memory"
    return None


def limit_message(log: str, returncode: int, memory: int = 0) -> str | None:
    """What a user is told when a compiler run of their code hit one of its limits (None: it
    hit none); `memory` the run's address-space limit (0: compiler_memory())."""
    hit = limit_hit(log, returncode)
    if hit == "memory":
        return (f"the compiler needed more than {(memory or compiler_memory()) >> 20} MiB of memory (a macro or "
                f"template that explodes? a kernel that truly needs more: set {MEMORY_ENV}=8G)")
    if hit == "file size":
        return (f"the compiler's output would be larger than {COMPILER_FILE_SIZE >> 20} MiB (a large static "
                "array, or a macro that explodes?)")
    return None

T = TypeVar("T")


@dataclass(frozen=True)
class Confinement:
    project_dirs: tuple[str, ...]  # the user's folders it may read
    read_dirs: tuple[str, ...] = ()  # Astra's own: CUDA headers, the runtime, caches, libraries
    workdir: str | None = None     # where it writes (None: nowhere)
    exec_dirs: tuple[str, ...] = ()  # programs beyond the system's (a CUDA toolkit's nvcc)
    devices: tuple[str, ...] = ()  # device files it opens read-write (the GPU driver's)
    memory: int = 0                # address space of each of its processes (0: compiler_memory())
    file_size: int = COMPILER_FILE_SIZE  # the largest file it writes
    file_size_room: int = 0        # the most a step of Astra's own may raise that to (the hard limit; 0: file_size)
    seccomp: bool = False          # a host program's system-call filter too (sandbox.host_program_filter):
                                   # for a program of the user's, never a compiler (which runs others)

    def rules(self) -> list[tuple[str, str]]:
        """(path, 'read' | 'exec' | 'write') for the sandbox."""
        out = [(p, "exec") for p in (*SYSTEM_EXEC, *self.exec_dirs)]
        out += [(p, "read") for p in (*SYSTEM_READ, *self.read_dirs, *self.project_dirs)]
        if self.workdir is not None:
            out += [(self.workdir, "write"), (os.devnull, "write")]
        out += [(d, "write") for d in self.devices]
        return out

    def allows(self, path: str | os.PathLike[str]) -> bool:
        """Whether the sandbox would let a compiler read `path` (its real path decides, as for
        Landlock): the same answer for Astra's own reads of project headers."""
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            return False
        return any(_beneath(real, os.path.realpath(p)) for p, _ in self.rules())


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def project_root(folder: str | os.PathLike[str]) -> str | None:
    """The workspace root of `folder` (its nearest ancestor with `.git`, else itself), or None
    where that is the home folder, a folder above it, or the filesystem root."""
    from ..workspace import root_for

    root = root_for(folder)
    home = Path.home().resolve()
    if root == Path(root.anchor) or root == home or home.is_relative_to(root):
        return None
    return str(root)


def project_dirs(options: Sequence[str]) -> tuple[str, ...]:
    """The project folders the -I options of a unit open to a compiler."""
    dirs = []
    for o in options:
        if o.startswith("-I") and len(o) > 2 and os.path.isdir(o[2:]):
            root = project_root(o[2:])
            if root is not None:
                dirs.append(root)
    return tuple(dict.fromkeys(dirs))


def for_unit(options: Sequence[str], read_dirs: Iterable[str] = (), workdir: str | None = None,
             exec_dirs: Iterable[str] = (), devices: Iterable[str] = ()) -> Confinement:
    """What a compile with these options may touch (Astra's `read_dirs` besides the project's).
    The -I options that name Astra's own folders (CUDA's headers, the stand-ins) open only
    themselves, never the checkout around them."""
    ours = tuple(dict.fromkeys(read_dirs))
    own = [o for o in options if o.startswith("-I") and any(_beneath(os.path.realpath(o[2:]), os.path.realpath(d))
                                                             for d in (*ours, *SYSTEM_READ))]
    return Confinement(project_dirs([o for o in options if o not in own]), ours, workdir,
                       tuple(dict.fromkeys(exec_dirs)), tuple(dict.fromkeys(devices)))


def outside_project(folder: str, roots: Iterable[str]) -> bool:
    """Whether a file of the project (a compile_commands.json) may not point a compile at
    `folder`: it is in none of the project `roots`, the system's include folders or a CUDA
    toolkit (/usr/local/cuda, /usr/local/cuda-12.8, /opt/cuda)."""
    real = os.path.realpath(folder)
    if any(_beneath(real, os.path.realpath(t)) for t in (*roots, *SYSTEM_READ)):
        return False
    return not any(_beneath(real, t) or real.startswith(t + "-") for t in CUDA_TOOLKITS)


def python_dirs() -> tuple[str, ...]:
    """The interpreter's library folders: an in-process compiler runs Python and native code
    from them (CuPy's, the NVIDIA wheels' headers and libraries)."""
    import site

    found = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        found += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site.py
        pass
    found.append(str(Path(__file__).resolve().parents[1]))  # the astra_cuda package
    home = Path.home().resolve()
    out = []
    for d in found:
        if d and os.path.isdir(d) and not home.is_relative_to(Path(d).resolve()):
            out.append(d)
    return tuple(dict.fromkeys(out))


def loaded_library_dirs(prefix: str) -> tuple[str, ...]:
    """The folders of the shared libraries named `prefix`* this process has loaded (NVRTC loads
    its builtins library from beside itself on first use)."""
    out = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
                path = fields[5].strip() if len(fields) == 6 else ""
                if os.path.basename(path).startswith(prefix):
                    out.append(os.path.dirname(path))
    except OSError:
        pass
    return tuple(dict.fromkeys(out))


# ---- enforcing it ------------------------------------------------------------------------------

def _sandbox() -> ModuleType:
    from . import sandbox
    return sandbox


def _unavailable(e: Exception, what: str = "the compiler to your project's files") -> Exception:
    sb = _sandbox()
    verb = "run it" if what == HOST_PROGRAM else "compile"
    return BackendUnavailable(f"cannot confine {what} ({e}); set "
                              f"{sb.OPT_OUT_ENV}=1 to {verb} without the sandbox, at your own risk")


HOST_PROGRAM = "a program built of your code (the constructor program) to the system calls it needs"


def host_filter() -> str | None:
    """The filter for a `seccomp` confinement; None where the user opted out of the sandbox and
    this system cannot filter system calls; BackendUnavailable where they did not (fail closed,
    as for Landlock: a program of the user's never runs unfiltered unasked). Compiled for each
    run (libseccomp: ~2 ms), so no process keeps it."""
    sb = _sandbox()
    why = None if sb.seccomp_in_kernel() else "seccomp is not available in this kernel"
    if why is None:
        try:
            return sb.host_program_filter().hex()  # type: ignore[no-any-return]
        except (sb.SandboxError, OSError, RuntimeError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    if not sb.opted_out():
        raise _unavailable(RuntimeError(why), HOST_PROGRAM)
    _warn_unconfined(RuntimeError(why))
    return None


def unavailable_reason() -> str | None:
    """Why compiles of user code are refused here (no Landlock, and no opt-out), else None."""
    sb = _sandbox()
    if sb.opted_out() or sb.landlock_abi() >= 1:
        return None
    return str(_unavailable(RuntimeError("Landlock is not available in this kernel")))


_warned = False


def _warn_unconfined(e: Exception) -> None:
    """The informed user's opt-out, said once per process (every compile would be noise)."""
    global _warned
    if not _warned:
        _warned = True
        sys.stderr.write(f"astra: compiling user code WITHOUT the sandbox ({_sandbox().OPT_OUT_ENV}=1): {e}\n")


# Limits tighter than the wrapper's own, set by a POSIX shell just before it becomes the compiler
# (limits only go down, so every process of the compile keeps them): address space in KiB,
# file size in 512-byte blocks — the soft limit every process keeps to, the hard one the most a
# step of Astra's own may raise it to (nvcc's cicc, for its device C file: nvcc.DEVICE_C_FILE_SIZE).
# A shell that cannot set one leaves the wrapper's (the soft limit first: a hard one below it is refused).
_LIMITS = ('ulimit -v {kb} 2>/dev/null; ulimit -S -f {blocks} 2>/dev/null; ulimit -H -f {room} 2>/dev/null; '
           'exec "$0" "$@"')


def argv(cmd: list[str], c: Confinement) -> list[str]:
    """The command run through the Landlock wrapper (sandbox.py as a script), under `c`'s
    memory and file-size limits."""
    sb = _sandbox()
    exe = shutil.which(cmd[0]) or cmd[0]
    exe_dirs = {os.path.dirname(os.path.realpath(exe)), os.path.dirname(os.path.abspath(exe))}
    flags = {"read": "--read", "exec": "--exec", "write": "--write"}
    rules: list[str] = ["--parent", str(os.getpid())]
    for path, kind in [*c.rules(), *((d, "exec") for d in sorted(exe_dirs))]:
        rules += [flags[kind], path]
    filt = host_filter() if c.seccomp else None
    if filt is not None:
        # no shell between: the filter lets the wrapper run this one program, nothing after it
        return [sys.executable, "-S", "-I", str(sb.__file__), *rules, "--memory", str(c.memory or compiler_memory()),
                "--file-size", str(c.file_size), "--file-size-room", str(c.file_size_room), "--seccomp", filt,
                "--", exe, *cmd[1:]]
    blocks = max(1, c.file_size >> 9)
    limits = _LIMITS.format(kb=(c.memory or compiler_memory()) >> 10, blocks=blocks,
                            room=max(blocks, c.file_size_room >> 9))
    return [sys.executable, "-S", "-I", str(sb.__file__), *rules, "--", "/bin/sh", "-c", limits, exe, *cmd[1:]]


def run(cmd: list[str], c: Confinement, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A compiler program, confined to `c` (which names its build directory), with an empty
    environment and limits, in a process group of its own that dies with it (`run_group`)."""
    sb = _sandbox()
    assert c.workdir is not None, "a compiler program needs a build directory"
    env = {"PATH": os.pathsep.join((os.path.dirname(shutil.which(cmd[0]) or cmd[0]), "/usr/bin", "/bin")),
           "TMPDIR": c.workdir, "LC_ALL": "C"}
    if sb.opted_out():
        env[sb.OPT_OUT_ENV] = "1"
    if sb.abi_cap() is not None:
        env[sb.ABI_CAP_ENV] = str(sb.abi_cap())
    r = run_group(argv(cmd, c), timeout_s, env=env, cwd=c.workdir)
    if r.returncode == sb.WRAPPER_FAILED and "astra sandbox:" in r.stderr:
        raise _unavailable(RuntimeError(r.stderr.strip().removeprefix("astra sandbox: ")),
                           *((HOST_PROGRAM,) if c.seccomp else ()))
    return r


def run_group(cmd: list[str], timeout_s: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, capture_output=True, text=True, timeout=...)` in a new process
    group, all of which is killed on the time limit or an exception (subprocess.run kills only
    the program it started: a compiler driver's cc1plus would go on, and nvcc's preprocessor
    stuck on a FIFO would keep the output pipes open)."""
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **popen)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # before it is reaped: the group cannot be another's yet
        except ProcessLookupError:
            pass
        p.communicate()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


class CompileTimeout(CompileError):
    """An in-process compile did not finish (an #include of a FIFO, a template explosion): its
    thread is left behind, so the caller retires its worker."""


class CompileOverMemory(CompileTimeout):
    """An in-process compile grew the process by more than its memory budget (an explosion):
    given up like one that does not finish, and its worker retired with it."""


COMPILE_STACK = 512 << 20  # an in-process compiler recurses once per nesting level of an
                           # expression: 2**16 terms overflowed a thread's default 8 MiB


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


_stack_lock = threading.Lock()


def call(c: Confinement, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
    """`fn(*args)` in a fresh thread that first confines itself to `c`: what an in-process
    compiler opens is checked like a sandboxed program's. Raises what `fn` raised,
    BackendUnavailable when the thread cannot be confined, CompileTimeout after `timeout_s`.
    `fn` must do its work on the calling thread (see the module docstring)."""
    sb = _sandbox()
    box: dict[str, Any] = {}
    abi = sb.landlock_abi()
    rights = {"read": sb.READ, "exec": sb.READ_EXEC, "write": sb.READ | sb.write_rights(abi)}

    def confined() -> None:
        try:
            # Files only: TCP and signal scoping are the executor's business, and a compiler
            # that talks to a GPU driver must not lose its sockets or signals.
            sb.restrict_files([(p, rights[k]) for p, k in c.rules()], net=False, scope=False)
        except (sb.SandboxError, OSError) as e:
            if not sb.opted_out():
                box["error"] = _unavailable(e)
                return
            _warn_unconfined(e)
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    # A new thread per compile (threading never reuses one): the confinement ends with it. Its
    # stack is large (reserved, not used until needed), and what the process grows by while it
    # runs is watched: a thread cannot be given limits of its own.
    t = threading.Thread(target=confined, name="astra-confined-compile", daemon=True)
    limit = COMPILE_TIMEOUT_S if timeout_s is None else timeout_s
    budget = c.memory or compiler_memory()
    with _stack_lock:
        before = threading.stack_size(COMPILE_STACK)
        try:
            t.start()
        finally:
            threading.stack_size(before)
    base, deadline = _rss(), time.monotonic() + limit
    # Stopped an eighth short of the budget: a compiler allocating fast grows by a few hundred MB
    # between two looks, and the process must never hold more than the budget.
    stop = max(budget - budget // 8, base + budget // 2)  # the process, or what it grew by
    while t.is_alive():
        t.join(min(0.05, max(0.0, deadline - time.monotonic())))
        if t.is_alive() and (rss := _rss()) > stop:
            raise CompileOverMemory(f"the compile grew to {rss >> 20} MiB of memory and was stopped short of its "
                                    f"{budget >> 20} MiB budget (a macro or template that explodes? a kernel that "
                                    f"truly needs more: set {MEMORY_ENV}=8G)")
        if t.is_alive() and time.monotonic() >= deadline:
            raise CompileTimeout(f"the compile did not finish within {limit:g} s (an #include of a FIFO, "
                                 "or a template explosion?)")
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])
