"""Host programs built from a user's unit: the constructor program of `astra_cuda.model.construct`
(a class object the kernel takes by value, built as the host would build it, its bytes printed).

`build_nvcc` compiles one with nvcc and the project's flags (the GPU backend's: nvcc's host
compiler lays the class out as the kernel reads it), confined as nvcc's cubin compile is
(`compile.nvcc`: include folders through links, macros as `#define`s, the toolkit and the
project readable, the build folder the only one written). `run` runs a built program under the
same confinement as a compiler (Landlock: the system's libraries and programs and its own folder
only, nothing written but that folder; an empty environment; memory, time and file-size limits;
its own process group, killed on the time limit) and a system-call filter (seccomp: it may compute,
print and read what Landlock lets it; a socket, a new process or program, ptrace or another
process's memory kill it, and namespaces, mounts, keys, BPF and signals to others are refused —
`sandbox.host_program_filter`): the program is the user's code, never run unconfined. The CPU backend builds its own with g++ (`backends.cpu.unit_build.build_host`).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from ..errors import CompileError, LaunchError
from . import confine
from .project import ProjectContext
from .toolkit import Toolkit, library_headers

RUN_TIMEOUT_S = 20.0
RUN_MEMORY = 1 << 30
MAX_OUTPUT_CHARS = 1 << 20


def run(program: Path, args: list[str], timeout_s: float = RUN_TIMEOUT_S) -> str:
    """What `program` prints given `args`, run confined (see above). LaunchError when it fails."""
    with tempfile.TemporaryDirectory(prefix="astra-hostprog-") as d:
        # a copy in its own folder: the cache it was built in (other programs, modules) stays closed to it
        local = shutil.copy2(program, os.path.join(d, "program"))
        jail = confine.Confinement((), (), d, exec_dirs=(d,), memory=RUN_MEMORY, file_size=1 << 20, seccomp=True)
        try:
            r = confine.run([local, *args], jail, timeout_s)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"the constructor program did not finish in {timeout_s:g} s") from None
    if r.returncode == -signal.SIGSYS:
        raise LaunchError("the constructor program was stopped by the sandbox: it made a system call a program "
                          "that only computes and prints has no use for (a socket, a new process or program, "
                          "ptrace, another process's memory)")
    if r.returncode != 0:
        raise LaunchError(f"the constructor program failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout[:MAX_OUTPUT_CHARS]


def build_nvcc(source: str, main: str, path: str, context: ProjectContext, toolkit: Toolkit, arch: str) -> Path:
    """The unit's `source` and Astra's `main` as a host executable, by nvcc with the project's
    flags (`compile.nvcc`'s, its links and `#define`s: no argument comes from the user),
    confined; kept in nvcc's build cache folder by content."""
    from . import nvcc
    flags = nvcc.project_flags(context, source, path) + library_headers(toolkit)
    key = hashlib.sha256("\0".join([toolkit.nvcc, toolkit.version, arch, path, *flags, source, main]).encode()).hexdigest()
    kept = nvcc.cache_root() / f"host-{key[:24]}"
    if kept.is_file():
        return kept
    build = tempfile.mkdtemp(prefix="astra-hostprog-nvcc-")
    folder = os.path.dirname(os.path.abspath(path))
    argv, defines, links = nvcc.safe_argv(flags, folder, build)
    cu = os.path.join(build, "astra_file.cu")
    quoted = os.path.abspath(path).replace("\\", "\\\\").replace('"', '\\"')
    Path(cu).write_text(defines + f'#line 1 "{quoted}"\n' + source + ("" if source.endswith("\n") else "\n") + main)
    out = os.path.join(build, "astra_construct")
    cmd = [toolkit.nvcc, f"-arch={arch}", *argv, "-o", out, cu]
    sandbox = nvcc.confinement(toolkit, flags, folder, build)
    try:
        r = confine.run(cmd, sandbox, confine.compiler_seconds(confine.heavy(flags)))
    except subprocess.TimeoutExpired:
        shutil.rmtree(build, ignore_errors=True)
        raise CompileError("compiling the constructor program with nvcc timed out") from None
    if r.returncode != 0 or not os.path.isfile(out):
        log = nvcc.real_paths(r.stdout + r.stderr, links, build)
        shutil.rmtree(build, ignore_errors=True)
        raise CompileError(f"the constructor program does not compile with nvcc:\n{log.strip()[-2000:]}", log=log)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(out, f"{kept}.{os.getpid()}.tmp")
    os.replace(f"{kept}.{os.getpid()}.tmp", kept)   # whole or not at all, for another process too
    shutil.rmtree(build, ignore_errors=True)
    return kept
