"""nvcc on the user's own file: the compiler wherever a CUDA toolkit is installed.

`compile(text, path, context, arch, kernels)` compiles the file text as it is — host code
included (nvcc's front end checks all of it; nothing is run) — to a cubin for `arch` with the
project's flags (`-I`, `-isystem`, `-D`, `-std`, the device flags; for a PyTorch extension,
torch's include folders and flags, `torch_ext`), then the CUDA library headers of NVIDIA's wheels
that a compiler-only toolkit lacks (`toolkit.library_headers`). The text is written to a copy in a build
folder, headed by `#line 1 "<path>"`: every message names the user's file and line, and the
file's folder is searched for its quoted `#include`s first, as it would be in place.

Kernels with template arguments (`act<__half, 4>`) are instantiated by a probe appended to the
copy; the cubin's symbols then give each kernel's mangled name (`cubin`). Registers, spills and
shared memory come from `-Xptxas -v`; the headers read, from the line markers of the device
pass's preprocessed file (kept with `-keep`; `-MD` ran the preprocessor a second time, 12% of a
small CUB kernel's compile), key the cache (`depcache`): a repeated compile costs a few `stat`
calls, and editing a header invalidates. A compile that stopped at a header it did not find is not
cached (the header may come).

nvcc runs under `astra_cuda.compile.confine`: it may read the toolkit, the project's folders (and
torch's), the system's headers, and write only its build folder; like every compiler of user
code it gets 2 GiB of address space, 64 MiB per file and 45 s (confine.compiler_memory,
COMPILER_FILE_SIZE, compiler_seconds).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import confine
from ..model import source
from ..backends.base import BackendUnavailable, ResourceUsage
from ..contract import DEFAULT_ARCH
from ..diagnostics import Diagnostic
from .project import DEFAULT_STD, ProjectContext
from . import cubin, depcache, messages, torch_ext
from .toolkit import Toolkit, library_headers

APPENDIX = "astra-instantiations"  # the name of the appended probes in messages
CACHE_VERSION = 2                  # bump when what an entry holds changes


class InvalidName(ValueError):
    """A name expression that is not one C++ expression."""


@dataclass(frozen=True)
class NvccResult:
    ok: bool                             # nvcc compiled the file (each kernel found: `kernels`)
    cubin: str | None                    # the cubin (in the cache) when ok
    diagnostics: tuple[Diagnostic, ...]  # at the user's lines
    resources: dict[str, ResourceUsage]  # name expression (else mangled name) -> usage
    kernels: dict[str, str]              # name expression -> mangled name in the cubin
    log: str
    compiler: str                        # 'nvcc 13.0, flags -std=c++17 -arch=sm_90 …'
    arch: str
    headers: tuple[str, ...] = ()        # every header the compile read
    seconds: float = 0.0                 # what this call took (a cache hit: about nothing)
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "cubin": self.cubin, "diagnostics": [d.to_json() for d in self.diagnostics],
                "resources": {k: vars(v) for k, v in self.resources.items()}, "kernels": self.kernels,
                "log": self.log, "compiler": self.compiler, "arch": self.arch, "seconds": self.seconds,
                "cached": self.cached}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "astra" / "nvcc"


def project_flags(context: ProjectContext, text: str = "", path: str = "") -> list[str]:
    """The project's flags as nvcc spells them (torch's added for a PyTorch extension)."""
    extra = torch_ext.nvcc_flags(context) if text and torch_ext.uses_torch(text, path, context) else None
    include = list(context.include_dirs) + (list(extra.include_dirs) if extra else [])
    system = [d for d in context.system_dirs if d not in include]
    system += [d for d in (extra.system_dirs if extra else ()) if d not in system and d not in include]
    defines = [f"-D{n}" if v is None else f"-D{n}={v}" for n, v in context.defines]
    out = [f"-I{d}" for d in dict.fromkeys(include)]
    for d in system:
        out += ["-isystem", d]
    out += list(dict.fromkeys(defines + (list(extra.defines) if extra else [])))
    out += [f"-U{n}" for n in context.undefines]
    out.append(f"-std={extra.std if extra else context.std or DEFAULT_STD}")
    out += list(dict.fromkeys([*context.flags, *(extra.flags if extra else ())]))
    return out


def describe(toolkit: Toolkit, flags: Sequence[str], arch: str) -> str:
    """'nvcc 13.0, flags -std=c++17 -arch=sm_90 -I…': what judged, for verdicts and messages."""
    return f"{toolkit.describe()}, flags {' '.join([*flags, f'-arch={arch}'])}"


def _appendix(names: dict[str, int | None]) -> str:
    """Probes that instantiate each templated kernel and name it in the cubin (see `cubin`);
    probe N is on line N + 1 of the appendix, so a message there names its expression."""
    lines = []
    for expr, n in names.items():
        if n is None:
            continue
        p = f"{cubin.PROBE}{n}"
        lines.append(f'#line {n + 1} "{APPENDIX}"\n'
                     f"template <class T, T F> __device__ int {p} = 0; "
                     f"template __device__ int {p}<decltype(&{expr}), &{expr}>;\n")
    return "\n" + "".join(lines) if lines else ""


def _check_names(kernels: Sequence[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for i, expr in enumerate(dict.fromkeys(kernels)):
        if (source.parse_expression(expr) is None and not _template_id(expr)) or any(c in expr for c in ";{}#\"'\\\n"):
            raise InvalidName(f"not a kernel name: {expr!r}")
        # a template, or a qualified name (its namespace may be spelled through a macro: the
        # compiler resolves it in the probe, as it does the template arguments)
        out[expr] = i if "<" in expr or "::" in expr else None
    return out


def _template_id(expr: str) -> bool:
    """`name<args>` whose arguments the spec's `instantiate` takes (`spec.parse_template_args`), where
    tree-sitter misreads the expression as a whole (CuTe's layouts: `k<cute::Shape<int, int>, …>`)."""
    from ..model.spec import parse_template_args
    m = re.fullmatch(r"\s*((?:::)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)\s*(<.*>)\s*", expr, re.S)
    try:
        return m is not None and bool(parse_template_args(m.group(2)))
    except ValueError:
        return False


def read_headers(build: str, links: dict[str, str], user_path: str) -> list[str]:
    """The headers the device pass's preprocessor read (its `.cpp1.ii`, kept in `build`): the
    files its line markers (`# 12 "x.h" 2`) name."""
    ii = next((os.path.join(build, n) for n in sorted(os.listdir(build)) if n.endswith(".cpp1.ii")), None)
    if ii is None:
        return []
    named: dict[str, None] = {}
    with open(ii, errors="replace") as f:
        for line in f:
            if line.startswith("# ") and '"' in line:
                named[line.split('"', 2)[1]] = None
    return _deps("x: " + " ".join(n for n in named if " " not in n and not n.startswith("<")), links, build, user_path)


def _deps(text: str, links: dict[str, str], build: str, user_path: str) -> list[str]:
    """The headers in a dependency list (`x: a.h b.h`): real files (through our links: the user's
    folders), not the copy or the user's file."""
    out = []
    body = text.replace("\\\n", " ")
    _, _, body = body.partition(":")
    for word in body.split():
        p = os.path.normpath(_through(word, links))
        if not os.path.isabs(p) or p.startswith(build.rstrip("/") + "/") or messages.same_file(p, user_path):
            continue
        if os.path.isfile(p):
            out.append(p)
    return list(dict.fromkeys(out))


def confinement(toolkit: Toolkit, flags: Sequence[str], folder: str, build: str) -> confine.Confinement:
    """What this nvcc run may read: the toolkit, the project's folders (-I and -isystem), torch's
    (`torch_ext.read_dirs`), the system's headers; it writes the build folder only."""
    spelled = [f"-I{folder}"]
    it = iter(flags)
    for f in it:
        if f == "-isystem":
            spelled.append(f"-I{next(it, '')}")
        elif f.startswith("-I"):
            spelled.append(f)
    jail = confine.for_unit(spelled, (toolkit.root, *toolkit.include_dirs, *torch_ext.read_dirs()),
                            workdir=build, exec_dirs=(toolkit.root,))
    return dataclasses.replace(jail, memory=confine.compiler_memory(confine.heavy(flags)),
                               file_size_room=DEVICE_C_FILE_SIZE)


_cache: depcache.DepCache | None = None


def build_cache() -> depcache.DepCache:
    global _cache
    if _cache is None or _cache.root != cache_root():
        _cache = depcache.DepCache(cache_root())
    return _cache


def compile(text: str, path: str, context: ProjectContext, arch: str = DEFAULT_ARCH,
            kernels: Sequence[str] = (), *, toolkit: Toolkit, timeout_s: float | None = None) -> NvccResult:
    """Compile `text` (the file at `path`, or a candidate's text for it) for `arch`; find the
    mangled name of each name expression in `kernels`. Never raises for bad code (`ok` False,
    with diagnostics); InvalidName for a name that is not a C++ name expression;
    BackendUnavailable when nvcc cannot be confined."""
    t0 = time.perf_counter()
    why = confine.unavailable_reason()  # no Landlock (and no opt-out): refused before anything runs
    if why is not None:
        raise BackendUnavailable(why)
    path = os.path.abspath(path)
    names = _check_names(kernels)
    flags = project_flags(context, text, path)
    label = describe(toolkit, flags, arch)
    flags += library_headers(toolkit)  # searched after the project's folders; not in the label
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    copy = f'#line 1 "{quoted}"\n{text}' + ("" if text.endswith("\n") else "\n") + _appendix(names)
    key = depcache.key_of(CACHE_VERSION, toolkit.nvcc, toolkit.version, os.stat(toolkit.nvcc).st_mtime_ns,
                          flags, arch, path, copy)
    store = build_cache()
    hit = store.get(key)
    raw = _raw_of(hit.data) if hit is not None else None
    if hit is not None and raw is not None:
        return _interpret(raw, text, path, names, toolkit, label, arch, hit.path("module.cubin") if raw.ok else None,
                          True, time.perf_counter() - t0)
    # The same text compiled for more kernels (the file's static check names them all, a check
    # one): that compile serves, so a file's front end (minutes for torch's headers) runs once.
    file_key = depcache.key_of(CACHE_VERSION, "file", toolkit.nvcc, toolkit.version, os.stat(toolkit.nvcc).st_mtime_ns,
                               flags, arch, path, text)
    shared = _shared(store, file_key, names)
    if shared is not None:
        raw, hit, kept = shared
        return _interpret(raw, text, path, kept, toolkit, label, arch, hit.path("module.cubin"), True,
                          time.perf_counter() - t0)
    from ..storage import after_compiler, writing
    scratch = "nvcc's build folder"
    with writing(scratch, tempfile.gettempdir()):
        build = tempfile.mkdtemp(prefix="astra-nvcc-")
    try:
        with writing(scratch, build):
            raw = _run(toolkit, copy, path, flags, arch, build,
                       timeout_s if timeout_s is not None else confine.compiler_seconds(confine.heavy(flags)))
        if not raw.ok:
            after_compiler(raw.log, build, scratch)
        module = os.path.join(build, "module.cubin")
        entry = store.put(key, list(raw.headers), vars(raw), {"module.cubin": module} if raw.ok else {}) \
            if not raw.timed_out and not _MISSING.search(raw.log) else None
        cubin_path = entry.path("module.cubin") if entry is not None and raw.ok else None
        if cubin_path is not None:   # what `_shared` finds: the last compile of this text that passed
            store.put(file_key, list(raw.headers), {"names": list(names), "key": key}, {})
        if raw.ok and cubin_path is None:  # no cache here: keep the cubin elsewhere
            with writing("the compiled module", tempfile.gettempdir()):
                cubin_path = shutil.copy(module, tempfile.mkdtemp(prefix="astra-cubin-"))
        return _interpret(raw, text, path, names, toolkit, label, arch, cubin_path, False, time.perf_counter() - t0)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _shared(store: depcache.DepCache, file_key: str,
            names: dict[str, int | None]) -> "tuple[_Raw, depcache.Entry, dict[str, int | None]] | None":
    """The cached compile of the same text, flags and arch for a superset of `names` that passed,
    with its own names (their probe numbers are its appendix's lines). Only a passing one: a
    failure there may be another kernel's instantiation, and without it this one may compile."""
    index = store.get(file_key)
    if index is None:
        return None
    kept = index.data.get("names")
    if not isinstance(kept, list) or not set(names) <= set(kept):
        return None
    hit = store.get(str(index.data.get("key")))
    raw = _raw_of(hit.data) if hit is not None else None
    if hit is None or raw is None or not raw.ok:
        return None
    return raw, hit, _check_names(kept)


def _raw_of(data: dict[str, Any]) -> "_Raw | None":
    try:
        return _Raw(**data)
    except TypeError:  # an entry of another shape: compiled again
        return None


@dataclass
class _Raw:
    """What one nvcc run said, as the cache keeps it: everything else is read from it again."""
    ok: bool
    log: str
    headers: list[str]
    symbols: list[list[Any]]     # [name, demangled, entry] of each cubin symbol
    ptx: str = ""           # when ptxas failed: the PTX, to map its messages to lines
    timed_out: float = 0.0  # the limit it ran past (0: finished)
    memory: int = 0         # the address space it ran under (0: an older entry's, the default)


# A header the compile did not find: not in the headers read, so no cache entry would notice it come.
_MISSING = re.compile(r"No such file or directory|cannot open source file")


def safe_argv(flags: list[str], folder: str, build: str) -> tuple[list[str], str, dict[str, str]]:
    """nvcc runs its steps through a shell and does not quote every argument (a backquote in an
    include folder's name, `$(...)` in a macro's value or a file name are executed): so no
    argument comes from the user. Each include folder is reached through a link of ours in the
    build folder (`i0` the file's own), each macro is a `#define` heading the copy (an undefined one
    an `#undef` after them); the file is `astra_file.cu`. Returns (argv flags, the #define lines, link -> real folder)."""
    argv: list[str] = []
    defines: list[str] = []
    links: dict[str, str] = {}

    def link(d: str) -> str:
        name = os.path.join(build, f"i{len(links)}")
        os.symlink(d, name)
        links[name] = d
        return name

    argv.append(f"-I{link(folder)}")
    it = iter(flags)
    for f in it:
        if f == "-isystem":
            argv += ["-isystem", link(next(it))]
        elif f.startswith("-I"):
            argv.append(f"-I{link(f[2:])}")
        elif f.startswith("-D"):
            name, eq, value = f[2:].partition("=")
            defines.append(f"#define {name} {' '.join(value.splitlines()) if eq else '1'}\n")
        elif f.startswith("-U"):   # after every -D: a macro name (project.from_flags checked it)
            defines.append(f"#undef {f[2:]}\n")
        else:
            argv.append(f)  # -std=, the device flags: from fixed lists (project.DEVICE_FLAGS, torch_ext)
    return argv, "".join(defines), links


def _through(text: str, links: dict[str, str]) -> str:
    """Paths through our links named as the user's folders again."""
    for name in sorted(links, key=len, reverse=True):
        text = text.replace(name + "/", links[name].rstrip("/") + "/")
    return text


def real_paths(text: str, links: dict[str, str], build: str) -> str:
    """A log as the user reads it: their folders' names, the build folder left out."""
    return _through(text, links).replace(build + "/", "")


# cicc writes, beside its PTX, the front end's C rendering of the device code (the device C file,
# `--gen_device_file_name`): nothing of a cubin build reads it, it cannot be sent to /dev/null (cicc
# wants a regular file), and it is ~70 times the PTX — 72 MB for flash-attention's forward kernel
# (1 MB of PTX), past the COMPILER_FILE_SIZE every other file of a compile of user code keeps to.
# cicc alone may write files of DEVICE_C_FILE_SIZE: room for a kernel 7 times flash-attention's,
# under the sandbox's own ceiling (sandbox.COMPILER_FILE_LIMIT, 1 GiB).
DEVICE_C_FILE_SIZE = 512 << 20


def with_device_c_room(cicc: str, file_size: int = confine.COMPILER_FILE_SIZE) -> str:
    """A cicc command line as a shell line that lets it (and it alone) write files of up to
    DEVICE_C_FILE_SIZE, the next step back under `file_size` (the confinement's soft limit, its hard
    one DEVICE_C_FILE_SIZE: see `confinement`)."""
    # (a shell that cannot raise it leaves the limit as it was: cicc then stops at a large file, as before)
    return f"ulimit -S -f {DEVICE_C_FILE_SIZE >> 9} 2>/dev/null || :; {cicc}; ulimit -S -f {file_size >> 9}"


def dryrun_listing(listing: str) -> list[tuple[str, list[str]]] | None:
    """The lines of nvcc's `-dryrun` listing in order, each (shell line, its words): a one-word
    variable setting (`CICC_PATH=…`) as its `export` line with no words (other settings left out),
    each command as listed. None where a line cannot be split."""
    out: list[tuple[str, list[str]]] = []
    for raw in listing.splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].strip()
        try:
            words = shlex.split(line)
        except ValueError:
            return None
        if not words or line.startswith("--"):
            continue
        if re.match(r"^[A-Za-z_]\w*=", line):
            if len(words) == 1:
                out.append(("export " + shlex.quote(words[0]), []))
            continue
        out.append((line, words))
    return out


def dryrun_steps(listing: str, file_size: int = confine.COMPILER_FILE_SIZE) -> list[str]:
    """The steps of nvcc's `-dryrun` listing as shell lines, run as nvcc would run them: its
    variable settings exported, then each command, cicc with room for its device C file
    (`with_device_c_room`). [] where the listing cannot be read."""
    out = [with_device_c_room(line, file_size) if words and "cicc" in os.path.basename(words[0]) else line
           for line, words in dryrun_listing(listing) or []]
    return out if any("cicc" in s for s in out) else []


def run_steps(toolkit: Toolkit, steps: list[str], script: str, sandbox: confine.Confinement,
              timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`steps` (shell lines from nvcc's listing) run by a shell in `sandbox`, stopping at the first
    that fails, with the toolkit's bin folder first on the PATH as nvcc has it."""
    bindir = os.path.dirname(toolkit.nvcc)
    Path(script).write_text(f"PATH={shlex.quote(bindir)}:$PATH\nset -e\n" + "\n".join(steps) + "\n")
    return confine.run(["/bin/sh", script], sandbox, timeout_s)


def _run(toolkit: Toolkit, copy: str, path: str, flags: list[str], arch: str, build: str, timeout_s: float) -> _Raw:
    folder = os.path.dirname(path)
    argv, defines, links = safe_argv(flags, folder, build)
    cu = os.path.join(build, "astra_file.cu")
    Path(cu).write_text(defines + copy)
    out = os.path.join(build, "module.cubin")
    cmd = [toolkit.nvcc, "--cubin", f"-arch={arch}", *argv, "-lineinfo", "-Xptxas", "-v", "-keep", "-keep-dir", build,
           "-o", out, cu]
    sandbox = confinement(toolkit, flags, folder, build)
    try:
        # nvcc's own steps, run by a shell as nvcc runs them, with room for cicc's device C file
        # (`with_device_c_room`); nvcc itself where its listing cannot be read
        listed = confine.run([cmd[0], "-dryrun", *cmd[1:]], sandbox, timeout_s)
        steps = dryrun_steps(listed.stdout + listed.stderr, sandbox.file_size)
        p = (run_steps(toolkit, steps, os.path.join(build, "steps.sh"), sandbox, timeout_s) if steps
             else confine.run(cmd, sandbox, timeout_s))
    except subprocess.TimeoutExpired:
        return _Raw(False, "", [], [], timed_out=timeout_s)
    log = real_paths(p.stdout + p.stderr, links, build)
    ok = p.returncode == 0 and os.path.isfile(out)
    deps = read_headers(build, links, path)
    symbols: list[list[Any]] = [[s.name, s.demangled, s.entry] for s in cubin.symbols(Path(out).read_bytes())] if ok else []
    ptx = _kept_ptx(build) if not ok and "ptxas" in log and not messages.FRONT_ERROR.search(log) else ""
    return _Raw(ok, log, deps, symbols, real_paths(ptx, links, build), memory=sandbox.memory)


def _interpret(raw: _Raw, text: str, path: str, names: dict[str, int | None], toolkit: Toolkit, label: str,
               arch: str, cubin_path: str | None, cached: bool, seconds: float) -> NvccResult:
    """The result of a run: messages at the user's lines, each name expression's kernel found
    in the cubin with its resources; a name not found is an error of its own."""
    said = toolkit.describe()
    if raw.timed_out:
        d = Diagnostic(0, 0, 0, 1, "error", f"nvcc did not finish within {raw.timed_out:g} s (an #include of a "
                       "FIFO, or a template explosion?)", code="timeout", source=said)
        return NvccResult(False, None, (d,), {}, {}, "", label, arch, (), seconds, cached)
    by_line = {n: expr for expr, n in names.items() if n is not None}
    places = {APPENDIX: lambda line: f"Astra's instantiation of `{by_line.get(line, '?')}` (the spec's `instantiate`)"}
    found, problems = cubin.kernel_names([cubin.Symbol(*s) for s in raw.symbols], names) if raw.ok else ({}, [])
    diags = messages.front_diagnostics(raw.log, path, said, "nvcc", places, user_text=text)
    diags += messages.preprocessor_diagnostics(raw.log, path, said, places)
    diags += messages.ptxas_diagnostics(raw.log, raw.ptx, path, found, said)
    if not raw.ok and not any(d.severity == "error" for d in diags):
        diags.append(messages.failed_without_message(raw.log, said, raw.memory))
    diags += [Diagnostic(0, 0, 0, 1, "error", msg, code="kernel", source=said) for msg in problems]
    diags = _first_per_instantiation(diags)
    return NvccResult(raw.ok, cubin_path, tuple(diags), messages.resources(raw.log, found), found, raw.log, label,
                      arch, tuple(raw.headers), seconds, cached)


def _first_per_instantiation(diags: list[Diagnostic]) -> list[Diagnostic]:
    """One message per failed instantiation: the first says why, the rest follow from it."""
    seen: set[str] = set()
    out = []
    for d in diags:
        head = d.message.split("`instantiate`): ", 1)[0] if d.message.startswith("in Astra's instantiation of `") else None
        if head is not None:
            if head in seen:
                continue
            seen.add(head)
        out.append(d)
    return out


def _kept_ptx(build: str) -> str:
    """ptxas failed (bad inline PTX): the PTX nvcc kept (`-keep`), whose `.loc` lines map its
    messages back."""
    ptx = next((os.path.join(build, n) for n in sorted(os.listdir(build)) if n.endswith(".ptx")), None)
    return Path(ptx).read_text(errors="replace") if ptx is not None else ""
