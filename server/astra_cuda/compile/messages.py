"""What a CUDA compiler's log says, as diagnostics at the user's lines and resource usage — pure.

nvcc and NVRTC share the EDG front end (`path(line): error: text`, the source line and a caret
under it) and ptxas (`ptxas …ptx, line N; error : …`, `Used N registers, … bytes smem`). nvcc
also runs the host compiler's preprocessor first (`path:line:col: fatal error: …`). Each
diagnostic names the compiler that judged in its `source` ("nvcc 13.0", "NVRTC 13.5").

A message in a file other than the user's is shown at the top of the file, saying where it was;
`places` names the files Astra itself wrote (an instantiation appended to a copy) for such
messages.
"""
from __future__ import annotations

import os
import re
from typing import Callable

from .. import redact
from ..backends.base import ResourceUsage
from ..diagnostics import Diagnostic

# EDG front-end message: `path(line): error: text` (also 'warning', 'catastrophic error', 'remark').
_FRONT = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<sev>(?:catastrophic )?error|warning|remark)"
                    r"(?: #(?P<num>[\w-]+))?: (?P<msg>.*)$")
FRONT_ERROR = re.compile(r"^.+?\(\d+\): (?:catastrophic )?error", re.M)
# The host preprocessor (gcc/clang -E) nvcc runs first: `path:line:col: fatal error: text`.
_CPP = re.compile(r"^(?P<path>[^:\s()][^:()]*):(?:(?P<line>\d+):(?P<col>\d+):)? (?P<sev>fatal error|error|warning): "
                  r"(?P<msg>.*)$")
_PTXAS_LINE = re.compile(r"ptxas (?:application ptx input|[^,]*\.ptx), line (?P<ptxline>\d+); "
                         r"(?P<sev>error|warning)\s*: (?P<msg>.*)")
_PTXAS_ENTRY = re.compile(r"ptxas (?P<sev>error|warning)\s*: (?P<msg>.*?'(?P<entry>[\w$.]+)'.*)")
_PTXAS_OTHER = re.compile(r"ptxas (?P<sev>error|fatal|warning)\s*: (?P<msg>.*)")


def same_file(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


Places = dict[str, Callable[[int], str]]  # a file Astra wrote -> what its 0-based line N is


def _elsewhere(path: str, line: int, msg: str, places: Places) -> str:
    where = places.get(path)
    if where is None and not redact.quotable(path):
        msg = redact.NOT_SHOWN  # `#include ".env"`: its tokens would be quoted here
    return f"in {where(line)}: {msg}" if where else f"in {path}:{line + 1}: {msg}"


def _anchor(echoed: str, col: int, end_col: int, real: str) -> tuple[int, int]:
    """The caret's token found in the user's own line: nvcc echoes the line after macro
    expansion (`__global__` reads `__attribute__((global))`), so its column is in the expanded
    text. The token's n-th occurrence there is its n-th in the user's line; unchanged when
    the token is not there."""
    token = echoed[col:end_col]
    if not token.strip() or echoed == real:
        return col, end_col
    nth = echoed[:col].count(token)
    at = -1
    for _ in range(nth + 1):
        at = real.find(token, at + 1)
        if at < 0:
            return col, end_col
    return at, at + len(token)


def front_diagnostics(log: str, user_path: str, compiler: str, code_prefix: str = "nvrtc",
                      places: Places | None = None, user_text: str | None = None) -> list[Diagnostic]:
    """The EDG front end's errors and warnings (nvcc's and NVRTC's), with the column read off
    the caret line under the echoed source (re-anchored in `user_text`, the user's file, when
    the echo is macro-expanded)."""
    places = places or {}
    user_lines = user_text.splitlines() if user_text is not None else None
    out: list[Diagnostic] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        m = _FRONT.match(lines[i])
        if not m:
            i += 1
            continue
        sev = "error" if "error" in m.group("sev") else ("warning" if m.group("sev") == "warning" else "info")
        msg = m.group("msg").strip()
        line = int(m.group("line")) - 1
        col, end_col, src = 0, None, ""
        # The echoed source line (indented by 2) and a caret line under it give the column.
        j = i + 1
        if j + 1 < len(lines) and lines[j + 1].strip() == "^":
            col = max(0, lines[j + 1].index("^") - 2)
            src = lines[j][2:] if lines[j].startswith("  ") else lines[j]
            k = col
            while k < len(src) and (src[k].isalnum() or src[k] == "_"):
                k += 1
            end_col = k if k > col else col + 1
            j += 2
        # Context lines such as 'detected during instantiation of ...' belong to this message.
        while j < len(lines) and lines[j].startswith("          ") and lines[j].strip():
            msg += " (" + lines[j].strip() + ")"
            j += 1
        if not same_file(m.group("path"), user_path):
            msg = _elsewhere(m.group("path"), line, msg, places)
            line, col, end_col = 0, 0, None
        elif end_col is not None and user_lines is not None and 0 <= line < len(user_lines):
            col, end_col = _anchor(src, col, end_col, user_lines[line])
        out.append(Diagnostic(line, col, line, end_col if end_col is not None else col + 1, sev, msg,
                              code=f"{code_prefix}-{m.group('num')}" if m.group("num") else "compile",
                              source=compiler))
        i = j
    return out


_MISSING = re.compile(r"^(\S+): No such file or directory$")
# A header found nowhere the compile looks: what such headers usually are, and what to do.
NOT_FOUND = (" (not in the file's folder, the project's include folders or the CUDA toolkit: a header the "
             "project's build generates or downloads — a git submodule, CMake's FetchContent — or one of a "
             "library not installed here; give its folder with -I, or a compile_commands.json, once it exists)")


def preprocessor_diagnostics(log: str, user_path: str, compiler: str,
                             places: Places | None = None) -> list[Diagnostic]:
    """The host preprocessor's errors (a header not found, or not readable: `Permission
    denied` under the confinement), at the user's line and column."""
    out: list[Diagnostic] = []
    for raw in log.splitlines():
        m = _CPP.match(raw)
        if not m:
            continue
        line, col = int(m.group("line") or 1) - 1, int(m.group("col") or 1) - 1
        msg = m.group("msg").strip()
        missing = _MISSING.match(msg)
        if missing and not missing.group(1).startswith("/"):
            msg += NOT_FOUND
        sev = "warning" if m.group("sev") == "warning" else "error"
        if not same_file(m.group("path"), user_path):
            msg = _elsewhere(m.group("path"), line, msg, places or {})
            line, col = 0, 0
        out.append(Diagnostic(line, col, line, col + 1, sev, msg, code="preprocessor", source=compiler))
    return out


def _ptx_locations(ptx: str, user_path: str) -> tuple[list[int | None], dict[str, int]]:
    """(line -> user line) for each PTX line, and entry (mangled) -> its first user line."""
    files: dict[str, str] = {}
    for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.M):
        files[m.group(1)] = m.group(2)
    at: list[int | None] = []
    first: dict[str, int] = {}
    entry, cur = None, None
    for text in ptx.splitlines():
        e = re.match(r"\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)", text)
        if e:
            entry, cur = e.group(1), None
        loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)", text)
        if loc and same_file(files.get(loc.group(1), ""), user_path):
            cur = int(loc.group(2)) - 1
            if entry and entry not in first:
                first[entry] = cur
        at.append(cur)
    return at, first


def ptxas_diagnostics(log: str, ptx: str, user_path: str, lowered: dict[str, str],
                      compiler: str = "ptxas") -> list[Diagnostic]:
    """ptxas's errors (bad inline PTX, too much shared memory), mapped to the user's lines
    through the `.loc` directives of the PTX (when it is given) and kernel names."""
    at, first = _ptx_locations(ptx, user_path) if ptx else ([], {})
    names = {v: k for k, v in lowered.items()}
    out: list[Diagnostic] = []
    seen: set[tuple[int, str]] = set()
    for raw in log.splitlines():
        text = raw.strip()
        if not text.startswith("ptxas") or text.startswith("ptxas info") or text.startswith("ptxas  "):
            continue
        line, msg, sev = 0, None, "error"
        m = _PTXAS_LINE.search(text)
        if m:
            n = int(m.group("ptxline")) - 1
            line = at[n] or 0 if 0 <= n < len(at) else 0
            msg, sev = f"inline PTX / ptxas: {m.group('msg').strip()}", m.group("sev")
        elif (m := _PTXAS_ENTRY.search(text)) is not None:
            entry = m.group("entry")
            line = first.get(entry, 0)
            msg = m.group("msg").replace(entry, names.get(entry, entry))
            sev = m.group("sev")
            if "too much shared data" in msg:
                msg += " — static __shared__ arrays are limited to 48 KiB; use dynamic shared memory " \
                       "(extern __shared__) for more"
        elif (m := _PTXAS_OTHER.search(text)) is not None:
            if m.group("sev") == "fatal" and out:
                continue  # 'Ptx assembly aborted due to errors' repeats what was said
            msg, sev = f"ptxas: {m.group('msg').strip()}", "warning" if m.group("sev") == "warning" else "error"
        if msg is None or (line, msg) in seen:
            continue
        seen.add((line, msg))
        out.append(Diagnostic(line, 0, line, 1, sev, msg, code="ptxas", source=compiler))
    return out


_RES_ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_RES_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RES_USED = re.compile(r"Used (\d+) registers")
_RES_SMEM = re.compile(r"(\d+) bytes smem")


def resources(log: str, lowered: dict[str, str], lowered_names: tuple[str, ...] = ()) -> dict[str, ResourceUsage]:
    """Registers, spills, static shared memory and stack per kernel from `-Xptxas -v`, keyed by
    the name expression where `lowered` (expression -> mangled) knows it, else the mangled name."""
    names = {v: k for k, v in lowered.items()}
    raw: dict[str, dict[str, int]] = {}
    cur = None
    for text in log.splitlines():
        m = _RES_ENTRY.search(text)
        if m:
            cur = m.group(1)
            raw.setdefault(cur, {})
            continue
        if cur is None:
            continue
        if (m := _RES_FRAME.search(text)) is not None:
            raw[cur]["stack_bytes"] = int(m.group(1))
            raw[cur]["spills_bytes"] = int(m.group(2)) + int(m.group(3))
        if (m := _RES_USED.search(text)) is not None:
            raw[cur]["registers"] = int(m.group(1))
            s = _RES_SMEM.search(text)
            raw[cur]["shared_static_bytes"] = int(s.group(1)) if s else 0
    out = {names.get(k, k): ResourceUsage(**v) for k, v in raw.items() if "registers" in v}
    # A unit holds one kernel: if its lowered name could not be read, the one entry is it.
    missing = [n for n in lowered_names if n not in out]
    if len(missing) == 1 and len(out) == 1 and next(iter(out)).startswith("_Z"):
        out = {missing[0]: next(iter(out.values()))}
    return out


def failed_without_message(log: str, compiler: str, memory: int = 0) -> Diagnostic:
    """A failed compile whose log held no message Astra reads: its last line, at the top (or the
    limit it hit: memory — `memory` the address space it ran under, 0 the default —, output size)."""
    from . import confine
    said = confine.limit_message(log, 0, memory) or _broken_module(log) or \
        "compilation failed: " + (log.strip().splitlines() or ["(no compiler log)"])[-1]
    return Diagnostic(0, 0, 0, 1, "error", said, code="compile", source=compiler)


_UNDEFINED = re.compile(r'warning #114-D: (function "[^"\n]+") was referenced but not defined')


def _broken_module(log: str) -> str | None:
    """NVVM's "Broken module found" after the front end's warning that a function was referenced
    but never defined: a device function declared for every type but defined only in explicit
    specializations for others (apex's `copy_vector<float, 1>`), which nvcc turns into a module
    it cannot link — said as that, not as NVVM's last line."""
    if "Broken module found" not in log:
        return None
    named = list(dict.fromkeys(_UNDEFINED.findall(log)))
    if not named:
        return None
    return (f"{named[0]} is called but never defined for these template arguments (declared, but defined only "
            f"for others, e.g. in explicit specializations){' (and ' + str(len(named) - 1) + ' more)' if len(named) > 1 else ''}:"
            f" NVVM refuses the module ('Broken module found')")
