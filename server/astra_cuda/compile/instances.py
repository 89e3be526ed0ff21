"""The instances of a kernel template that the project's own code makes, as nvcc sees them.

A templated kernel in a header is often instantiated only through layers a reader cannot
follow: a launcher template whose traits class is an alias of its parameters, called from
macros in other files (flash-attention's `ln_fwd_kernel<Kernel_traits, …>` from
`REGISTER_FWD_LAUNCHER(256, fp32, …)`), or a dispatch switch over torch's scalar types (apex's
softmax headers, instantiated for `c10::Half` and `c10::BFloat16` only). The compiler knows the
answer: the front end of nvcc's device compiler (`cicc`) writes one host stub per kernel
instance of the translation unit, `__wrapper__device_stub_<kernel><args>`, its arguments spelled
from the global scope. `of()` runs the two steps of nvcc's that make them — the device
preprocessor and cicc, as `nvcc -dryrun` lists them, its PTX thrown away — on the unit that holds
the file (the file itself, or the `.cu` beside a header that includes it:
`headers.translation_unit`) and reads the stubs. Confined like every compiler of user code;
cached by the unit and every header it read (`depcache`), so a repeated call costs a few
`stat`s.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

from ..model.spec import split_template_args
from . import confine, depcache, headers, nvcc
from ..contract import DEFAULT_ARCH
from .project import ProjectContext
from .toolkit import Toolkit, library_headers

CACHE_VERSION = 1
MAX_INSTANCES = 256
_ran: dict[str, list[str]] = {}   # this process's answers, those not cached (a time limit) included


class Instances(list[tuple[str, ...]]):
    """Template argument lists, and `late`: nvcc ran past its time limit, so an empty list says
    nothing of the unit (on a loaded machine a unit that makes instances can take that long)."""
    late = False


class _Late(list[str]):
    """The stubs kept for a unit that ran past its limit: none, and known to be late."""


def of(kernel: str, path: str, context: ProjectContext, *, toolkit: Toolkit,
       timeout_s: float | None = None) -> Instances:
    """The template argument lists of `kernel` (its unqualified name) that the project's
    translation unit of the file at `path` instantiates (a header's: the first `.cu` beside it
    that includes it, whole), in the order nvcc wrote their stubs; [] when there are
    none, the unit does not compile, runs past its time limit (`late`) or nvcc cannot be confined."""
    if confine.unavailable_reason() is not None or not kernel.isidentifier():
        return Instances()
    found = headers.includer(os.path.abspath(path), context)
    path = found[0] if found is not None else os.path.abspath(path)
    try:
        unit = Path(path).read_text(errors="surrogateescape")
    except OSError:
        return Instances()
    flags = nvcc.project_flags(context, unit, path) + library_headers(toolkit)
    key = depcache.key_of("instances", CACHE_VERSION, toolkit.nvcc, toolkit.version, flags, path, unit)
    store = nvcc.build_cache()
    hit = store.get(key)
    stubs: list[str] | None = hit.data.get("stubs") if hit is not None else _ran.get(key)
    if stubs is None:
        from ..storage import writing
        with writing("nvcc's build folder", tempfile.gettempdir()):
            build = tempfile.mkdtemp(prefix="astra-instances-")
        try:
            with writing("nvcc's build folder", build):
                got = _host_stubs(toolkit, unit, path, flags, build,
                                  timeout_s if timeout_s is not None else confine.compiler_seconds(confine.heavy(flags)))
            if got is None:
                stubs = _Late()
            else:
                stubs, deps, finished = got
                if finished:
                    store.put(key, deps, {"stubs": stubs}, {})
            _ran[key] = stubs   # a unit that ran past its limit is not tried again by this process
        finally:
            shutil.rmtree(build, ignore_errors=True)
    out = Instances(stub_instances(stubs or [], kernel))
    out.late = isinstance(stubs, _Late)
    return out


_STUB = re.compile(r"\b__wrapper__device_stub_(\w+)<")


def stub_instances(stubs: Iterable[str], kernel: str) -> list[tuple[str, ...]]:
    """The argument lists of `kernel`'s stubs among the stub lines (`template<> void
    __wrapper__device_stub_k< ::Tr<float> ,true>(…)`): each argument without its leading `::`."""
    out: list[tuple[str, ...]] = []
    for line in stubs:
        m = _STUB.search(line)
        if m is None or m.group(1) != kernel or not line.lstrip().startswith("template<>"):
            continue
        args = _balanced(line[m.end() - 1:])
        if args is None:
            continue
        found = tuple(_plain(a) for a in split_template_args(args))
        if found not in out:
            out.append(found)
        if len(out) >= MAX_INSTANCES:
            break
    return out


_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|short|char|long long|unsigned)\)(-?\d+)[uUlL]*")


def _plain(arg: str) -> str:
    """An argument as a user writes it: no leading `::`, no cast on a literal (`(unsigned int)256u`: 256),
    `(bool)1` as true."""
    arg = re.sub(r"(?<![\w:])::(?=\w)", "", " ".join(arg.split()))
    arg = re.sub(r"\(bool\)([01])\b", lambda m: "true" if m.group(1) == "1" else "false", arg)
    arg = _CAST.sub(r"\1", arg).replace("< ", "<").replace(" >", ">").replace(" ,", ",")
    arg = arg.replace("( ", "(").replace(" )", ")")
    while arg.startswith("(") and arg.endswith(")") and _balanced("<" + arg[1:-1] + ">") == "<" + arg[1:-1] + ">":
        arg = arg[1:-1].strip()   # `( ::ns::E::kAuto)`, an enumerator as the stub writes it: ns::E::kAuto
    return arg


def _balanced(text: str) -> str | None:
    """The `<…>` at the start of `text` (angle brackets balanced; parentheses too)."""
    depth = 0
    for i, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
            if depth == 0:
                return text[:i + 1]
    return None


def _host_stubs(toolkit: Toolkit, unit: str, path: str, flags: list[str], build: str,
                timeout_s: float) -> tuple[list[str], list[str], bool] | None:
    """(the stub lines of the unit's kernel instances, the headers read, whether it finished and
    compiled); None where it ran past `timeout_s`."""
    folder = os.path.dirname(path)
    argv, defines, links = nvcc.safe_argv(flags, folder, build)
    cu = os.path.join(build, "astra_file.cu")
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    Path(cu).write_text(f'{defines}#line 1 "{quoted}"\n{unit}\n')
    sandbox = nvcc.confinement(toolkit, flags, folder, build)
    plan = [toolkit.nvcc, "-cuda", f"-arch={DEFAULT_ARCH}", "-dryrun", "-keep", "-keep-dir", build, *argv, "-o", os.path.join(build, "host.ii"), cu]
    try:
        listed = confine.run(plan, sandbox, timeout_s)
        steps = _steps(listed.stdout + listed.stderr)
        if not steps:
            return [], [], True
        ran = nvcc.run_steps(toolkit, steps, os.path.join(build, "host.sh"), sandbox, timeout_s)
    except subprocess.TimeoutExpired:
        return None
    stub = next((os.path.join(build, n) for n in os.listdir(build) if n.endswith(".stub.c")), None)
    lines = [ln for ln in Path(stub).read_text(errors="replace").splitlines()
             if "__wrapper__device_stub_" in ln and ln.lstrip().startswith("template<>")] if stub else []
    # a unit that does not compile is not cached: the headers it read do not key an entry (one it missed may come)
    return lines, nvcc.read_headers(build, links, path), ran.returncode == 0


def _steps(dryrun: str) -> list[str]:
    """The steps of nvcc's `-dryrun` listing that make the stubs: its variable settings that are one
    word (`CICC_PATH=…`), exported; the device preprocessor that writes cicc's input; cicc,
    unoptimised (`-O0`), its PTX sent to /dev/null, the module id written by itself
    (`--gen_module_id_file`). cicc's front end instantiates the kernels and writes the stubs; the host preprocessor and
    `cudafe++` before it (whose output the host compiler reads, and which only gives cicc the
    module id) and everything after it (ptxas, fatbinary, the host compiler) are left out —
    `cudafe++` alone parsed a PyTorch extension's headers for as long as cicc did."""
    out: list[str] = []
    commands: list[tuple[str, list[str]]] = []
    for line, words in nvcc.dryrun_listing(dryrun) or []:
        if not words:
            out.append(line)
            continue
        if "cicc" not in os.path.basename(words[0]):
            commands.append((line, words))
            continue
        source = next((w for w in reversed(words) if w.endswith(".ii")), None)
        writer = next((c for c, w in commands if source is not None and _output(w) == source), None)
        if writer is None:
            return []
        # its PTX is not needed: not written (a large one ran into the 64 MiB file limit)
        cicc = re.sub(r'(\s-o\s+)("[^"]*"|\S+)', r"\1/dev/null", line)
        if "--gen_module_id_file" not in words:
            cicc = cicc.replace("--module_id_file_name", "--gen_module_id_file --module_id_file_name", 1)
        # unoptimised: the stubs are the front end's, and NVVM's optimizer is a quarter of the rest
        cicc = re.sub(r'^("[^"]*"|\S+)', r"\1 -O0", cicc, count=1)
        return out + [writer, nvcc.with_device_c_room(cicc)]   # its device C file is written all the same
    return []


def _output(words: list[str]) -> str | None:
    """The file a command writes (`-o FILE`)."""
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"), None)
