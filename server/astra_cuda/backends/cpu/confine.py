"""What the compiler may touch when it reads a user's source (the CPU backend's g++ runs).

It may read the system's headers, libraries and programs, CUDA's headers, Astra's runtime and
compile cache (`Confinement.read_dirs`), and the user's project: the folders of the unit's -I
options, widened to their workspace root so that `#include "../common/x.cuh"` works — never the
home folder itself, where dotfiles with credentials live. It writes only its own build directory
(and /dev/null), with an empty environment and limits (sandbox.py). Nothing else:
`#include "/etc/shadow"` or "~/.ssh/id_rsa" fails with "Permission denied" instead of quoting the
file in a diagnostic, and `#include "/dev/zero"` fails instead of reading forever.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from astra_cuda.backends.base import BackendUnavailable

from . import sandbox

SYSTEM_EXEC = ("/usr/bin", "/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/lib", "/lib64", "/lib32",
               "/usr/lib32", "/usr/local/bin", "/usr/local/lib", "/usr/local/libexec")
SYSTEM_READ = ("/usr/include", "/usr/local/include", "/usr/share/gcc", "/etc/ld.so.cache", "/etc/alternatives")
SANDBOX_SCRIPT = Path(sandbox.__file__)


@dataclass(frozen=True)
class Confinement:
    workdir: str                   # the only place it writes
    project_dirs: tuple[str, ...]  # the user's folders it may read
    read_dirs: tuple[str, ...]     # Astra's own: CUDA headers, the runtime, the compile cache


def project_dirs(options: Sequence[str]) -> tuple[str, ...]:
    from astra_cuda.workspace import root_for

    dirs = []
    for o in options:
        if o.startswith("-I") and len(o) > 2 and os.path.isdir(o[2:]):
            root = root_for(o[2:])
            if root not in (Path.home().resolve(), Path("/")):
                dirs.append(str(root))
    return tuple(dict.fromkeys(dirs))


def argv(cmd: list[str], c: Confinement) -> list[str]:
    """The command run through the Landlock wrapper (sandbox.py as a script)."""
    exe = shutil.which(cmd[0]) or cmd[0]
    exe_dirs = {os.path.dirname(os.path.realpath(exe)), os.path.dirname(os.path.abspath(exe))}
    rules: list[str] = []
    for p in (*SYSTEM_EXEC, *sorted(exe_dirs)):
        rules += ["--exec", p]
    for p in (*SYSTEM_READ, *c.read_dirs, *c.project_dirs):
        rules += ["--read", p]
    rules += ["--write", c.workdir, "--write", os.devnull]
    return [sys.executable, "-S", "-I", str(SANDBOX_SCRIPT), *rules, "--", exe, *cmd[1:]]


def run(cmd: list[str], c: Confinement, timeout_s: float) -> subprocess.CompletedProcess:
    env = {"PATH": os.pathsep.join((os.path.dirname(shutil.which(cmd[0]) or cmd[0]), "/usr/bin", "/bin")),
           "TMPDIR": c.workdir, "LC_ALL": "C"}
    if sandbox.opted_out():
        env[sandbox.OPT_OUT_ENV] = "1"
    r = subprocess.run(argv(cmd, c), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                       env=env, cwd=c.workdir)
    if r.returncode == sandbox.WRAPPER_FAILED and "astra sandbox:" in r.stderr:
        raise BackendUnavailable(f"the CPU backend cannot sandbox the compiler: {r.stderr.strip()}")
    return r
