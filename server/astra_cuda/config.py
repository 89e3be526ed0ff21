"""The project's Astra configuration, one for the command line and the editor alike.

Read from the nearest `astra.toml`, or `pyproject.toml` with a `[tool.astra]` table, in the file's
folder or a parent up to the repository root (the folder with `.git`); an `astra.toml` wins over a
`pyproject.toml` in the same folder, as ruff's own files do. Beside it, the flags clangd reads —
`compile_flags.txt` (one flag a line) and `.clangd` (`CompileFlags: Add:`) — give include folders,
macros, the standard and the GPU architecture. The compile part becomes `ProjectContext`s
(`contexts`), merged by `project.resolve` after the command line and the editor's settings and
before `compile_commands.json`; the rest (backend, architecture, budgets, tolerances, the LLM
endpoint and model) is read through `effective`, which says where every value came from.

A cloned repository is not trusted: nothing here names a program to run, include folders outside
the repository are dropped (as `compile_commands.json`'s are), a key is refused outright, and an
LLM endpoint from a project file is used only with the user's consent (`endpoint_allowed`).
"""
from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import AstraError

if TYPE_CHECKING:
    from .compile.project import ProjectContext

MAX_FILE_BYTES = 1 << 20      # a configuration file is a few lines
FILES = ("astra.toml", "pyproject.toml")
FLAG_FILES = ("compile_flags.txt", ".clangd")
BACKENDS = ("auto", "gpu", "cpu", "static")
EFFORTS = ("minimal", "low", "medium", "high")
STANDARDS = ("c++11", "c++14", "c++17", "c++20")
TRUST_ENV = "ASTRA_TRUST_PROJECT_LLM"   # '1': use an endpoint a project file names (CI, your own repository)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _int(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _num(lo: float, hi: float) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


# Every key a project file may hold: its check, what it means, and the default.
KEYS: dict[str, tuple[Any, str, Any]] = {
    "include": (_strs, "include folders (like -I), relative to the file that names them", []),
    "defines": (_strs, "macros for every build: NAME or NAME=VALUE", []),
    "std": (lambda v: v in STANDARDS, "C++ standard", None),
    "compile_commands": (_str, "compile_commands.json, relative to the file that names it", None),
    "backend": (lambda v: v in BACKENDS, "where kernels run: auto, gpu, cpu or static", "auto"),
    "arch": (lambda v: _str(v) and v.startswith(("sm_", "compute_")), "GPU architecture (sm_90)", None),
    "budgets.rounds": (_int(1, 1000), "optimization rounds", 5),
    "budgets.tune": (_int(0, 1000), "tuning points after the rounds", 8),
    "budgets.seconds": (_num(1, 7 * 86400), "wall-clock limit of one optimize run, seconds", None),
    "budgets.tokens": (_int(1, 10**10), "LLM tokens one optimize run may use (as the endpoint counts them)", None),
    "llm.base_url": (lambda v: _str(v) and v.startswith(("http://", "https://")),
                     "OpenAI-compatible endpoint (used only with your consent)", None),
    "llm.model": (_str, "model name at the endpoint", None),
    "llm.reasoning_effort": (lambda v: v in EFFORTS, "reasoning effort: minimal, low, medium or high", None),
    "llm.temperature": (_num(0, 2), "sampling temperature", None),
    "llm.max_tokens": (_int(16, 1 << 20), "most tokens one reply may have", None),
    "llm.timeout": (_num(1, 3600), "seconds one model call may take", None),
}
# Per element type: `[tool.astra.tolerances] float16 = { atol = 1e-2, rtol = 1e-2 }`.
TOLERANCE_KEYS = ("atol", "rtol")
SECRET_WORDS = ("key", "token_secret", "secret", "password", "authorization")


@dataclass(frozen=True)
class Value:
    value: Any
    source: str     # 'astra.toml:4', 'pyproject.toml [tool.astra]', 'command line', 'settings', 'default'


@dataclass(frozen=True)
class ProjectConfig:
    """What the project's files say for one source file."""

    file: Path | None = None                        # astra.toml or pyproject.toml; None: none found
    values: dict[str, Value] = field(default_factory=dict)   # dotted keys of KEYS
    tolerances: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    flag_files: tuple[tuple[Path, tuple[str, ...]], ...] = ()  # (file, flags it gives this source)
    problems: tuple[str, ...] = ()                  # keys refused, files unreadable: said, never fatal

    def get(self, key: str) -> Any:
        v = self.values.get(key)
        return v.value if v is not None else KEYS[key][2]

    def contexts(self, path: str) -> list[ProjectContext]:
        """The compile part as `ProjectContext`s, most specific first: the configuration file's,
        then the flag files'."""
        from .compile import project
        out = []
        if self.file is not None and any(k in self.values for k in ("include", "defines", "std")):
            base = self.file.parent
            where = self.values.get("include") or self.values.get("defines") or self.values.get("std")
            assert where is not None
            out.append(project.from_arguments(
                [f"-I{d}" for d in self.get("include")] + [f"-D{d}" for d in self.get("defines")] +
                ([f"-std={self.get('std')}"] if self.get("std") else []),
                cwd=base, origin=where.source.split(":")[0], source=path))
        for f, flags in self.flag_files:
            out.append(project.from_arguments(list(flags), cwd=f.parent, origin=str(f), source=path))
        return out

    def compile_commands(self) -> str | None:
        v = self.values.get("compile_commands")
        if v is None or self.file is None:
            return None
        return str((self.file.parent / v.value).resolve())

    def arch(self) -> Value | None:
        """The architecture: the configuration file's, else the flag files' `--cuda-gpu-arch`."""
        if "arch" in self.values:
            return self.values["arch"]
        for f, flags in self.flag_files:
            for a in flags:
                if a.startswith(("--cuda-gpu-arch=", "--offload-arch=")):
                    return Value(a.split("=", 1)[1], str(f))
        return None


def find(path: str | os.PathLike[str]) -> Path | None:
    """The configuration file that governs `path`: the nearest astra.toml or pyproject.toml with a
    [tool.astra] table, from the file's folder up to its repository's root."""
    for d in _folders(path):
        if (d / "astra.toml").is_file():
            return d / "astra.toml"
        py = d / "pyproject.toml"
        if py.is_file() and _has_tool_astra(py):
            return py
    return None


def _folders(path: str | os.PathLike[str]) -> list[Path]:
    from .workspace import root_for
    p = Path(path).resolve()
    start = p if p.is_dir() else p.parent
    root = root_for(start)
    out = []
    for d in (start, *start.parents):
        out.append(d)
        if d == root:
            break
    return out


def _has_tool_astra(py: Path) -> bool:
    try:
        data = _toml(py)
    except AstraError:
        return True   # load() says what is wrong with it
    return isinstance(data.get("tool"), dict) and "astra" in data["tool"]


def _read(path: Path) -> str:
    try:
        st = path.stat()
        if st.st_size > MAX_FILE_BYTES:
            raise AstraError(f"{path}: larger than {MAX_FILE_BYTES >> 10} KiB; not read")
        with open(path, "rb") as f:   # regular files only, bounded
            return f.read(MAX_FILE_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AstraError(f"{path}: cannot read ({e})") from None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as e:
        raise AstraError(f"{path}: not valid TOML ({e})") from None


def _line_of(text: str, key: str, table: str) -> int | None:
    """The 1-based line of `key =` in `table` of a TOML text (for 'where it came from')."""
    current = ""
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith("["):
            current = s.strip("[] ")
            continue
        name = s.split("=", 1)[0].strip().strip('"')
        if "=" in s and name == key and current == table:
            return i
    return None


def load(path: str | os.PathLike[str]) -> ProjectConfig:
    """The project configuration for the source file `path` (nothing found: an empty one)."""
    problems: list[str] = []
    file = None
    values: dict[str, Value] = {}
    tolerances: dict[str, tuple[float | None, float | None]] = {}
    try:
        file = find(path)
        if file is not None:
            values, tolerances, problems = _parse(file)
    except AstraError as e:
        problems.append(e.message)
    flags = tuple(_flag_files(path, problems))
    return ProjectConfig(file, values, tolerances, flags, tuple(problems))


def _parse(file: Path) -> tuple[dict[str, Value], dict[str, tuple[float | None, float | None]], list[str]]:
    text = _read(file)
    data = _toml(file)
    if file.name == "pyproject.toml":
        table, prefix = data.get("tool", {}).get("astra", {}), "tool.astra"
    else:
        table, prefix = data, ""
    if not isinstance(table, dict):
        raise AstraError(f"{file}: [{prefix or 'astra'}] is not a table")
    values: dict[str, Value] = {}
    tolerances: dict[str, tuple[float | None, float | None]] = {}
    problems: list[str] = []
    from .model import dtypes

    def walk(d: dict[str, Any], dotted: str) -> None:
        for k, v in d.items():
            key = f"{dotted}{k}"
            tbl = ".".join(x for x in (prefix, dotted.rstrip(".")) if x)
            line = _line_of(text, k, tbl)
            where = f"{file}:{line}" if line else f"{file}"
            if any(w in k.lower() for w in SECRET_WORDS):
                problems.append(f"{where}: `{key}` refused: keys never belong in a project file "
                                f"(use the editor's secret storage or the environment)")
            elif key == "tolerances":
                if not isinstance(v, dict):
                    problems.append(f"{where}: `tolerances` must be a table of element types")
                    continue
                for dt, tol in v.items():
                    known = dtypes.lookup(dt)
                    ok = known is not None and known.is_float and isinstance(tol, dict) and \
                        set(tol) <= set(TOLERANCE_KEYS) and all(_num(0, 1e6)(x) for x in tol.values())
                    if ok:
                        assert known is not None
                        tolerances[known.name] = (tol.get("atol"), tol.get("rtol"))
                    else:
                        problems.append(f"{where}: tolerances.{dt} ignored: a floating-point element type "
                                        f"(half, bfloat16, float, double) = {{ atol = …, rtol = … }}")
            elif isinstance(v, dict) and key in ("budgets", "llm"):
                walk(v, key + ".")
            elif key not in KEYS:
                problems.append(f"{where}: unknown key `{key}` ignored (known: {', '.join(KEYS)}, tolerances)")
            elif not KEYS[key][0](v):
                problems.append(f"{where}: `{key} = {v!r}` ignored: {KEYS[key][1]}")
            else:
                values[key] = Value(v, where)
    walk(table, "")
    return values, tolerances, problems


# ---- clangd's flag files --------------------------------------------------------------------------

def _flag_files(path: str | os.PathLike[str], problems: list[str]) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """(file, flags) of the nearest compile_flags.txt and .clangd that apply to `path`."""
    found: dict[str, Path] = {}
    for d in _folders(path):
        for name in FLAG_FILES:
            if name not in found and (d / name).is_file():
                found[name] = d / name
    for name in FLAG_FILES:
        f = found.get(name)
        if f is None:
            continue
        try:
            flags = _compile_flags(f) if name == "compile_flags.txt" else _clangd(f, Path(path))
        except AstraError as e:
            problems.append(e.message)
            continue
        if flags:
            yield f, tuple(flags)


def _compile_flags(f: Path) -> list[str]:
    return [ln.strip() for ln in _read(f).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _clangd(f: Path, source: Path) -> list[str]:
    """The `CompileFlags: Add:` flags of the `.clangd` fragments that apply to `source`
    (`If: PathMatch/PathExclude`, regular expressions on the path relative to the file's folder)."""
    import re

    import yaml
    try:
        docs = list(yaml.safe_load_all(_read(f)))
    except yaml.YAMLError as e:
        raise AstraError(f"{f}: not valid YAML ({str(e).splitlines()[0]})") from None
    try:
        rel = source.resolve().relative_to(f.parent.resolve()).as_posix()
    except ValueError:
        rel = source.name
    flags: list[str] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        cond = doc.get("If") or {}
        if isinstance(cond, dict):
            def listed(v: Any) -> list[str]:
                return [v] if isinstance(v, str) else [x for x in (v or []) if isinstance(x, str)]
            try:
                if cond.get("PathMatch") is not None and not any(
                        re.fullmatch(p, rel) for p in listed(cond["PathMatch"])):
                    continue
                if any(re.fullmatch(p, rel) for p in listed(cond.get("PathExclude"))):
                    continue
            except re.error as e:
                raise AstraError(f"{f}: a PathMatch is not a regular expression ({e})") from None
        cf = doc.get("CompileFlags")
        add = cf.get("Add") if isinstance(cf, dict) else None
        if isinstance(add, str):
            add = [add]
        flags += [a for a in add or [] if isinstance(a, str)]
    return flags


# ---- the effective configuration --------------------------------------------------------------

def effective(cfg: ProjectConfig, given: dict[str, Value] | None = None) -> dict[str, Value]:
    """Every key of KEYS with its value and source: what `given` says (the command line, the
    editor's settings), else the project's files, else the default."""
    out: dict[str, Value] = {}
    given = given or {}
    for key, (_, _, default) in KEYS.items():
        if key in given:
            out[key] = given[key]
        elif key == "arch" and cfg.arch() is not None:
            out[key] = cfg.arch()    # type: ignore[assignment]
        elif key in cfg.values:
            out[key] = cfg.values[key]
        else:
            out[key] = Value(default, "default")
    return out


def endpoint_allowed(source: str, consent: str | None = None, base_url: str | None = None) -> bool:
    """Whether an LLM endpoint may be used: one the user gave (command line, user settings) always;
    one from a project file only with the user's consent to that very URL, or ASTRA_TRUST_PROJECT_LLM=1."""
    if source in ("command line", "settings", "environment", "default"):
        return True
    return os.environ.get(TRUST_ENV) == "1" or (consent is not None and consent == base_url)


def tolerance_defaults(cfg: ProjectConfig) -> dict[str, tuple[float | None, float | None]]:
    return dict(cfg.tolerances)
