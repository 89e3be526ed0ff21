"""The project a file is compiled in: include directories, macros, the language standard and a
few device-code flags — one immutable value carried with every compile unit, so the static
(NVRTC), CPU and GPU backends build a kernel the same way and every verdict can say how.

Taken, in this order (earlier wins for a macro or the standard; include directories are
searched in this order): the command line (`-I DIR`, `-D NAME[=VALUE]`, `--std`), the editor's
`astra.*` settings, the project's configuration (`astra.toml` / `[tool.astra]`, then clangd's
`compile_flags.txt` and `.clangd`: `astra_cuda.config`), then the nearest `compile_commands.json` (the clangd/CMake convention: the
file's folder and its parents up to the workspace root, each also under `build/`; or a
configured path). Its entry for the file is used, else one for a file in the same folder, else
the first entry; which one is said in `origin`.
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from . import buildfiles, confine
from ..errors import AstraError

# Flags that mean the same to NVRTC, nvcc and (where it matters) the CPU build; others from a
# compile command are listed in `ignored`, never passed on blindly.
DEVICE_FLAGS = ("--use_fast_math", "-use_fast_math", "--expt-relaxed-constexpr", "-expt-relaxed-constexpr",
                "--extended-lambda", "-extended-lambda", "--ftz=true", "--ftz=false", "--prec-div=true",
                "--prec-div=false", "--prec-sqrt=true", "--prec-sqrt=false", "--fmad=true", "--fmad=false",
                "--expt-extended-lambda", "-expt-extended-lambda")
# nvcc's older spellings (torch's CMake and most setup.py files write them), passed on as NVRTC
# spells them too
SPELLINGS = {"--expt-extended-lambda": "--extended-lambda", "-expt-extended-lambda": "--extended-lambda"}
STANDARDS = ("c++11", "c++14", "c++17", "c++20")
DEFAULT_STD = "c++17"
MAX_COMPILE_COMMANDS_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ProjectContext:
    include_dirs: tuple[str, ...] = ()         # absolute, searched in order
    system_dirs: tuple[str, ...] = ()          # -isystem: their headers are never copied into a unit
    defines: tuple[tuple[str, str | None], ...] = ()  # (name, value or None), in order
    # -U: macros the project's build leaves undefined — also those Astra would add for it (a
    # PyTorch extension's __CUDA_NO_HALF_* defines, which vLLM's and DeepSpeed's builds drop)
    undefines: tuple[str, ...] = ()
    std: str | None = None                      # 'c++17'; None: the backends' default
    flags: tuple[str, ...] = ()                 # from DEVICE_FLAGS
    origin: tuple[str, ...] = ()                # where each part came from, for messages
    ignored: tuple[str, ...] = ()               # flags of a compile command that were not used
    compiler: str | None = None                 # a compile command's compiler (compile.toolkit vets it)

    @property
    def empty(self) -> bool:
        return not (self.include_dirs or self.system_dirs or self.defines or self.undefines or self.std or self.flags)

    def options(self) -> list[str]:
        """Compiler options in the spelling NVRTC, nvcc and g++ share."""
        out = [f"-I{d}" for d in self.include_dirs] + [f"-I{d}" for d in self.system_dirs]
        out += [f"-D{n}" if v is None else f"-D{n}={v}" for n, v in self.defines]
        out += [f"-U{n}" for n in self.undefines]
        if self.std:
            out.append(f"-std={self.std}")
        return out + list(self.flags)

    def describe(self) -> str:
        """One line for verdicts and reports."""
        if self.empty:
            return "no project context (no include paths, defines or compile_commands.json)"
        parts = []
        if self.include_dirs or self.system_dirs:
            parts.append("include " + ", ".join(self.include_dirs + self.system_dirs))
        if self.defines:
            parts.append("defines " + ", ".join(n if v is None else f"{n}={v}" for n, v in self.defines))
        if self.undefines:
            parts.append("undefines " + ", ".join(self.undefines))
        if self.std:
            parts.append(f"-std={self.std}")
        if self.flags:
            parts.append(" ".join(self.flags))
        text = "; ".join(parts)
        return text + (f" (from {', '.join(self.origin)})" if self.origin else "")

    def to_json(self) -> dict[str, Any]:
        return {"include_dirs": list(self.include_dirs), "system_dirs": list(self.system_dirs),
                "defines": [[n, v] for n, v in self.defines], "undefines": list(self.undefines),
                "std": self.std, "flags": list(self.flags),
                "origin": list(self.origin), "ignored": list(self.ignored), "compiler": self.compiler}

    def merged(self, later: "ProjectContext") -> "ProjectContext":
        """This context, then what `later` adds: its directories searched after ours, its
        macros and standard only where this one has none."""
        names = {n for n, _ in self.defines}
        return ProjectContext(
            include_dirs=tuple(dict.fromkeys(self.include_dirs + later.include_dirs)),
            system_dirs=tuple(dict.fromkeys(self.system_dirs + later.system_dirs)),
            defines=self.defines + tuple(d for d in later.defines if d[0] not in names and d[0] not in self.undefines),
            undefines=self.undefines + tuple(n for n in later.undefines if n not in names and n not in self.undefines),
            std=self.std or later.std,
            flags=tuple(dict.fromkeys(self.flags + later.flags)),
            origin=self.origin + tuple(o for o in later.origin if o not in self.origin),
            ignored=self.ignored + later.ignored,
            compiler=self.compiler or later.compiler)


def parse_define(text: str) -> tuple[str, str | None]:
    name, eq, value = text.strip().partition("=")
    if not name.isidentifier():
        raise AstraError(f"bad macro definition {text!r}: expected NAME or NAME=VALUE")
    return name, (value if eq else None)


def _macro_name(text: str) -> str:
    name = text.strip()
    if not name.isidentifier():
        raise AstraError(f"bad macro name to undefine {text!r}: expected NAME")
    return name


def _std(value: str | None, where: str) -> str | None:
    if not value:
        return None
    v = value.strip().lower().removeprefix("-std=").removeprefix("--std=").replace("gnu++", "c++")
    if v not in STANDARDS:
        raise AstraError(f"{where}: unsupported language standard {value!r} (one of {', '.join(STANDARDS)})")
    return v


def from_flags(include_dirs: Iterable[str] = (), defines: Iterable[str] = (), std: str | None = None,
               flags: Iterable[str] = (), *, origin: str, base: str | None = None,
               undefines: Iterable[str] = ()) -> ProjectContext:
    """A context from explicit values (command line or settings); relative directories are
    taken from `base` (default: the current directory)."""
    root = Path(base) if base else Path.cwd()
    dirs = []
    for d in include_dirs or ():
        p = Path(os.path.expanduser(str(d)))
        dirs.append(str((p if p.is_absolute() else root / p).resolve()))
    bad = [f for f in flags or () if f not in DEVICE_FLAGS]
    if bad:
        raise AstraError(f"{origin}: unsupported flag(s) {', '.join(bad)} (supported: {', '.join(DEVICE_FLAGS)})")
    undef = tuple(dict.fromkeys(_macro_name(u) for u in undefines or ()))
    ctx = ProjectContext(include_dirs=tuple(dict.fromkeys(dirs)),
                         defines=tuple(d for d in (parse_define(d) for d in defines or ()) if d[0] not in undef),
                         undefines=undef, std=_std(std, origin),
                         flags=tuple(dict.fromkeys(SPELLINGS.get(f, f) for f in flags or ())))
    return replace(ctx, origin=(origin,)) if not ctx.empty else ctx


# ---- compile_commands.json ----------------------------------------------------------------------

def find_compile_commands(path: str, root: str | None = None) -> Path | None:
    """The nearest compile_commands.json for `path`: its folder and each parent up to `root`
    (default: the filesystem root), each directly or under build/."""
    here = Path(path).resolve().parent
    stop = Path(root).resolve() if root else None
    for d in (here, *here.parents):
        for cand in (d / "compile_commands.json", d / "build" / "compile_commands.json"):
            if cand.is_file():
                return cand
        if stop is not None and d == stop:
            break
    return None


def _arguments(entry: dict[str, Any]) -> list[str]:
    if isinstance(entry.get("arguments"), list):
        return [str(a) for a in entry["arguments"]]
    if isinstance(entry.get("command"), str):
        try:
            return shlex.split(entry["command"])
        except ValueError:
            return []
    return []


def _entry_for(entries: list[Any], path: Path, base: Path) -> tuple[dict[str, Any] | None, str]:
    def file_of(e: dict[str, Any]) -> Path | None:
        f, d = e.get("file"), e.get("directory", ".")
        if not isinstance(f, str) or not isinstance(d, str):
            return None
        dd = Path(d) if Path(d).is_absolute() else base / d
        return (Path(f) if Path(f).is_absolute() else dd / f).resolve()

    valid = [(e, f) for e, f in ((e, file_of(e)) for e in entries if isinstance(e, dict)) if f is not None]
    for e, f in valid:
        if f == path:
            return e, "its entry"
    for e, f in valid:
        if f.parent == path.parent:
            return e, f"the entry of {f.name} (same folder)"
    return (valid[0][0], f"the entry of {valid[0][1].name} (no entry for this file)") if valid else (None, "")


@lru_cache(maxsize=8)
def _entries(db: Path, mtime_ns: int, size: int) -> list[Any]:
    """The database's entries, read once per version of the file (editors ask on every save)."""
    if size > MAX_COMPILE_COMMANDS_BYTES:
        raise AstraError(f"{db}: larger than {MAX_COMPILE_COMMANDS_BYTES >> 20} MiB; not read")
    try:
        entries = json.loads(db.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AstraError(f"{db}: not a readable compile_commands.json ({e.__class__.__name__}: {e})") from None
    if not isinstance(entries, list):
        raise AstraError(f"{db}: a compile_commands.json holds a list of entries")
    return entries


def from_compile_commands(db: str | Path, path: str) -> ProjectContext:
    """The context of `path` in a compile_commands.json. Relative `directory` values are taken
    from the JSON file's folder (so a database can travel with a source tree)."""
    db = Path(db).resolve()
    try:
        st = db.stat()
    except OSError as e:
        raise AstraError(f"{db}: cannot read ({e.strerror})") from None
    entries = _entries(db, st.st_mtime_ns, st.st_size)
    entry, which = _entry_for(entries, Path(path).resolve(), db.parent.resolve())
    if entry is None:
        return ProjectContext(origin=(f"{db} (no usable entry)",))
    d = entry.get("directory", ".")
    cwd = Path(d) if Path(d).is_absolute() else (db.parent / d)
    command = _arguments(entry)
    ctx = from_arguments(command[1:], cwd=cwd, origin=f"{db}, {which}", source=path, db=db)  # the compiler first
    compiler = command[0] if command else None
    if compiler and os.sep in compiler:
        compiler = str((Path(compiler) if Path(compiler).is_absolute() else cwd / compiler).resolve())
    return replace(ctx, compiler=compiler)


def from_arguments(args: list[str], *, cwd: Path, origin: str, source: str, db: Path | None = None) -> ProjectContext:
    """The context a compiler's arguments give (a compile command's, compile_commands.txt's,
    .clangd's, a project file's): -I/-isystem/-D/-std and DEVICE_FLAGS; other flags are listed
    as ignored. Relative folders are taken from `cwd`. These come with the project, so they may
    point a compile only at the project itself, CUDA and the system's headers: `-I /root` or
    `-I /etc` from a cloned repository would open those folders to the compilers
    (astra_cuda.compile.confine)."""
    inc: list[str] = []
    sysinc: list[str] = []
    defs: list[str] = []
    undefs: list[str] = []
    flags: list[str] = []
    ignored: list[str] = []
    std = None
    takes_value = {"-I": inc, "--include-path": inc, "-isystem": sysinc, "--system-include": sysinc,
                   "-D": defs, "--define-macro": defs, "-U": undefs, "--undefine-macro": undefs}
    i = 0
    while i < len(args):
        a = args[i]
        joined = next((k for k in takes_value if a.startswith(k) and len(a) > len(k)), None)
        if a in takes_value and i + 1 < len(args):
            _take(takes_value[a], args[i + 1], defs, undefs)
            i += 2
            continue
        if joined is not None:
            _take(takes_value[joined], a[len(joined):].lstrip("="), defs, undefs)
        elif a.startswith(("-std=", "--std=")):
            std = a.split("=", 1)[1]
        elif a in ("-std", "--std") and i + 1 < len(args):
            std, i = args[i + 1], i + 1
        elif a in DEVICE_FLAGS:
            flags.append(SPELLINGS.get(a, a))
        elif a.startswith(("--cuda-gpu-arch=", "--offload-arch=")):
            pass   # the GPU architecture: read by astra_cuda.config, not a compile flag here
        elif a.startswith("-"):
            ignored.append(a)
        i += 1

    def resolve(x: str) -> str:
        return str((Path(x) if Path(x).is_absolute() else cwd / x).resolve())
    try:
        std_value = _std(std, origin)
    except AstraError:
        std_value, ignored = None, ignored + [f"-std={std}"]
    # The project is where the file naming these flags lives (a compile command's `directory` can
    # be anywhere, so it never counts) and the source's own repository.
    anchor = db.parent if db is not None else cwd
    roots = [r for r in (confine.project_root(anchor), confine.project_root(Path(source).resolve().parent)) if r]
    inc, sysinc = [resolve(x) for x in inc], [resolve(x) for x in sysinc]
    ignored += [f"-I{d} (outside the project)" for d in (*inc, *sysinc) if confine.outside_project(d, roots)]
    inc = [d for d in inc if not confine.outside_project(d, roots)]
    sysinc = [d for d in sysinc if not confine.outside_project(d, roots)]
    return ProjectContext(include_dirs=tuple(dict.fromkeys(inc)),
                          system_dirs=tuple(dict.fromkeys(sysinc)),
                          defines=tuple(parse_define(x) for x in defs if x.split("=")[0].isidentifier()),
                          undefines=tuple(dict.fromkeys(u for u in undefs if u.isidentifier())),
                          std=std_value, flags=tuple(dict.fromkeys(flags)), origin=(origin,), ignored=tuple(ignored))


def _take(into: list[str], value: str, defs: list[str], undefs: list[str]) -> None:
    """One -D or -U in command-line order: the later of the two for one name wins."""
    name = value.split("=", 1)[0]
    if into is undefs:
        defs[:] = [d for d in defs if d.split("=", 1)[0] != name]
    elif into is defs and name in undefs:
        undefs.remove(name)
    into.append(value)


def resolve(path: str, *, cli: ProjectContext | None = None, settings: ProjectContext | None = None,
            compile_commands: str | None = None, root: str | None = None,
            discover: bool = True, files: tuple[ProjectContext, ...] = ()) -> ProjectContext:
    """The context for `path`: `cli`, then `settings`, then the project's configuration `files`
    (astra.toml or [tool.astra], compile_flags.txt, .clangd: `config.ProjectConfig.contexts`), then
    a compile_commands.json (the given one, else the nearest up to `root` when `discover`), or
    where there is none and `discover`, what the project's CMakeLists.txt / setup.py give nvcc
    (`buildfiles`)."""
    ctx = ProjectContext()
    for part in (cli, settings, *files):
        if part is not None:
            ctx = ctx.merged(part)
    db = Path(compile_commands) if compile_commands else (find_compile_commands(path, root) if discover else None)
    if compile_commands and not Path(compile_commands).is_file():
        raise AstraError(f"compile_commands.json not found: {compile_commands}")
    if db is not None:
        ctx = ctx.merged(from_compile_commands(db, path))
    elif discover:
        for args, folder, origin in buildfiles.flags(path):
            ctx = ctx.merged(from_arguments(args, cwd=folder, origin=origin, source=path))
    return ctx


__all__ = ["ProjectContext", "from_flags", "from_compile_commands", "from_arguments", "find_compile_commands", "resolve",
           "parse_define", "DEFAULT_STD", "DEVICE_FLAGS"]

