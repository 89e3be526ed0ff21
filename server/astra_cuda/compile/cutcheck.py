"""Check a cut: the unit cut out of a user's file for the CPU backend (`astra_cuda.compile.cut`) must
mean what the file means. Both are compiled by nvcc for the device, to PTX and unoptimised
(`-Xcicc -O0`: inlining, which depends on the rest of the file, cannot make them differ), and
the kernel's code — its entry with every function it calls and every variable it reads, each
named by the order of its first use — must be the same text. A cut that nvcc refuses, or
whose code differs, is an error that names what the cut left out; never a silent change.

Cached by content (the cut, the file, every project header, the toolkit), in memory and on
disk: a repeated check costs nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import confine
from ..contract import DEFAULT_ARCH

if TYPE_CHECKING:
    from .extract import CompileUnit

CACHE_VERSION = 6  # bump when the comparison changes


@dataclass(frozen=True)
class CutCheck:
    ok: bool          # the cut means what the file means (or could not be checked: `checked`)
    checked: bool     # False: no toolkit here, or nvcc does not compile the file itself
    message: str
    seconds: float = 0.0
    compiler: str = ""


# ---- PTX: top-level symbols and a kernel's closure -----------------------------------------

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
_INTERNAL = re.compile(r"(\d+)(_INTERNAL_|_GLOBAL__N_)")
_NUMBERED = re.compile(r"(__local_depot|\$L__BB)\d+")  # numbered by the function's place in the module


def _internal_names(ptx: str) -> str:
    """Names of internal linkage carry a hash of the file's path and build: `_ZN43_INTERNAL_
    e97c5749_7_cub1_cu_a3d46045_17955...`; the mangled length says where each ends. Read one after
    the other: an anonymous namespace right after the file's (`…_a3d46045_1795552_GLOBAL__N__…`,
    apex's softmax headers) has its length next to the hash's last digits."""
    out, at = [], 0
    while (m := _INTERNAL.search(ptx, at)) is not None:
        n = int(m.group(1))
        out.append(ptx[at:m.start()])
        out.append("9_INTERNAL" if m.group(2) == "_INTERNAL_" else "11_GLOBAL__N_")
        at = m.end(1) + n
    out.append(ptx[at:])
    return "".join(out)


def symbols(ptx: str) -> dict[str, str]:
    """Each top-level symbol of a PTX module (entries, functions, variables) -> its statement,
    comments removed and blanks collapsed."""
    text = _NUMBERED.sub(r"\1", _COMMENTS.sub(" ", _internal_names(ptx)))
    out: dict[str, str] = {}
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if ch == "}" and depth == 0:
                _add(out, text[start:i + 1])
                start = i + 1
        elif ch == ";" and depth == 0:
            _add(out, text[start:i + 1])
            start = i + 1
    return out


# A function-scope static `__shared__` is declared in the one function that uses it, or at module
# scope when several do (DeepSpeed's reduce::_block buffer in a file of many kernels): the same.
_SHARED_IN_BODY = re.compile(r"(?<![\w.])\.shared\s[^;{}]*;")


def _add(out: dict[str, str], stmt: str) -> None:
    words = " ".join(stmt.split())
    if "{" in words:
        for decl in _SHARED_IN_BODY.findall(words):
            words = " ".join(words.replace(decl, " ", 1).split())
            _add(out, decl)
    name = _declared(words)
    if name is not None and not (name in out and words.startswith(".extern")):
        out[name] = words


def _declared(stmt: str) -> str | None:
    """The name a statement declares (None for `.version`, `.target`...)."""
    tokens = re.findall(r"\(|\)|\[|=|;|\{|[^\s()\[\]=;{},]+", stmt)
    kinds = {".entry", ".func", ".global", ".const", ".shared", ".local"}
    if not kinds & set(tokens):
        return None
    depth, seen_kind = 0, False
    for t in tokens:
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif t in ("[", "=", ";", "{"):
            if depth == 0 and seen_kind:
                break
        elif depth == 0 and t in kinds:
            seen_kind = True
        elif depth == 0 and seen_kind and _WORD.fullmatch(t) and not t.startswith("."):
            return str(t)
    return None


# A name as an operand, never an opcode or its part: `rsqrt.approx.f32` is an instruction even in a
# module that also has a function named `rsqrt` (apex layer_norm_cuda_kernel.cu).
_OPERAND = re.compile(r"(?<![\w$.%])[A-Za-z_$][\w$]*(?![\w$.])")


def closure(entry: str, syms: dict[str, str]) -> list[str]:
    """The entry's statement and those of everything it reaches, in order of first use, each
    symbol renamed by that order (S1, S2, ...): two modules compare equal when the kernel's code
    is the same whatever its helpers are called."""
    names = {entry: entry}
    order = [entry]
    i = 0
    while i < len(order):
        for w in _OPERAND.findall(syms[order[i]]):
            if w in syms and w not in names:
                names[w] = f"S{len(names)}"
                order.append(w)
        i += 1
    return [_OPERAND.sub(lambda m: names.get(m.group(0), m.group(0)), syms[s]) for s in order]


def entries(syms: dict[str, str]) -> list[str]:
    return [n for n, s in syms.items() if " .entry " in f" {s}"]


def compare(cut_ptx: str, file_ptx: str) -> str | None:
    """None when every kernel of the cut has the same code in the file; else what differs."""
    cut, whole = symbols(cut_ptx), symbols(file_ptx)
    found = entries(cut)
    if not found:
        return "the cut unit holds no kernel"
    for e in found:
        if e not in whole:
            return f"the cut's kernel {e} is not in the file's device code"
        a, b = closure(e, cut), closure(e, whole)
        for x, y in zip(a, b):
            if x != y:
                return f"the code of {_declared(x) or e} differs: cut `{_first_difference(x, y)}`"
        if len(a) != len(b):
            return f"the kernel {e} reaches {len(a)} symbols in the cut but {len(b)} in the file"
    return None


def _first_difference(a: str, b: str) -> str:
    wa, wb = a.split(), b.split()
    k = next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), min(len(wa), len(wb)))
    return " ".join(wa[max(0, k - 4):k + 6]) + f"` where the file has `{' '.join(wb[max(0, k - 4):k + 6])}"


# ---- compiling -----------------------------------------------------------------------------

def cache_dir() -> Path:
    base = os.environ.get("ASTRA_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME")
                                                             or str(Path.home() / ".cache"), "astra")
    return Path(base) / "cutcheck"


def probe_appendix(expr: str) -> str:
    """Instantiates the kernel's name expression in device code (a template kernel has no code
    until something names it)."""
    return ("\n#line 1 \"astra-instantiation\"\n"
            f"template <class T, T F> __device__ int __astra_cut_probe = 0; "
            f"template __device__ int __astra_cut_probe<decltype(&{expr}), &{expr}>;\n")


def nvcc_ptx(nvcc: str, text: str, path: str, options: list[str], arch: str, extra: list[str], *,
         optimised: bool = False) -> tuple[str | None, str]:
    """nvcc's PTX of `text` (unoptimised unless `optimised`: what `compile.fastpath` compares with
    NVRTC's), and its log."""
    folder = os.path.dirname(path)
    from ..storage import after_compiler, writing
    toolkit = str(Path(os.path.realpath(nvcc)).parent.parent)
    scratch = "the cut check's build folder"
    with writing(scratch, tempfile.gettempdir()), tempfile.TemporaryDirectory(prefix="astra-cutcheck-") as tmp:
        cu = Path(tmp) / (os.path.basename(path) if path.endswith(".cu") else "astra_file.cu")
        quoted = path.replace("\\", "\\\\").replace('"', '\\"')
        cu.write_text(f'#line 1 "{quoted}"\n{text}')
        out = Path(tmp) / "out.ptx"
        level = [] if optimised else ["-Xcicc", "-O0"]
        cmd = [nvcc, "--ptx", f"-arch={arch}", *level, f"-I{folder}", *options, *extra, "-o", str(out), str(cu)]
        big = confine.heavy(options)
        jail = dataclasses.replace(confine.for_unit([f"-I{folder}", *_as_include(options)], (toolkit,), workdir=tmp,
                                                    exec_dirs=(toolkit,)), memory=confine.compiler_memory(big))
        try:
            r = confine.run(cmd, jail, confine.compiler_seconds(big))
        except subprocess.TimeoutExpired:
            return None, f"nvcc did not finish within {confine.compiler_seconds(big):.0f} s"
        log = (r.stdout + r.stderr).replace(tmp + "/", "")
        if r.returncode != 0 or not out.is_file():
            after_compiler(log, tmp, scratch)
            return None, log
        return out.read_text(errors="replace"), log


def _as_include(options: list[str]) -> list[str]:
    """`-isystem DIR` spelled `-IDIR`: the folders a compile may read."""
    out, it = [], iter(options)
    for o in it:
        out.append(f"-I{next(it, '')}" if o == "-isystem" else o)
    return out


def first_errors(log: str, limit: int = 3) -> str:
    lines = [ln.strip() for ln in log.splitlines() if "error" in ln]
    return "; ".join(lines[:limit]) or log.strip()[-300:]


def check(unit: CompileUnit, arch: str = DEFAULT_ARCH) -> CutCheck:
    """Whether `unit` (an `extract.CompileUnit` with its `file_text`) means what its file means."""
    from . import nvcc as nvcc_compile
    from . import toolkit
    from .headers import header_digest
    if not unit.file_text:
        return CutCheck(True, False, "the cut is not checked: the unit does not carry its file")
    tk, why = toolkit.for_file(unit.file_text, unit.path, unit.context)
    if tk is None:
        return CutCheck(True, False, f"the cut is not checked by nvcc: {why}")
    nvcc = tk.nvcc
    t0 = time.perf_counter()
    options = nvcc_compile.project_flags(unit.context, unit.file_text, unit.path)
    compiler = nvcc_compile.describe(tk, options, arch)
    options += toolkit.library_headers(tk)  # as every nvcc compile (compile.nvcc)
    expr = unit.name_expression
    key = hashlib.sha256(repr((CACHE_VERSION, unit.source, unit.file_text, unit.path, options, arch, expr, nvcc,
                               os.stat(nvcc).st_mtime_ns, header_digest(unit.file_text, unit.path, options))
                              ).encode()).hexdigest()[:32]
    cached = cache_dir() / f"{key}.json"
    try:
        return CutCheck(**{**json.loads(cached.read_text()), "seconds": time.perf_counter() - t0})
    except (OSError, ValueError, TypeError):
        pass
    with ThreadPoolExecutor(2) as pool:  # the two compiles are independent: use both cores
        # the spec's type checks on both sides: a spec that names the wrong element type fails the
        # file too (and is reported as such by the build), never as a fault of the cut
        checks = getattr(unit, "type_checks", "")
        whole_f = pool.submit(nvcc_ptx, nvcc, unit.file_text + "\n" + checks + probe_appendix(expr), unit.path, options,
                              arch, [])
        cut_f = pool.submit(nvcc_ptx, nvcc, unit.source + "\n" + probe_appendix(expr), unit.path, options, arch,
                            [f"-D{_host_macro()}"])
        (whole, whole_log), (cut_ptx, cut_log) = whole_f.result(), cut_f.result()
    left = _left_out(unit)
    if whole is None:
        result = CutCheck(True, False, f"the cut is not checked: nvcc does not compile the file ({first_errors(whole_log)})",
                          compiler=compiler)
    elif cut_ptx is None:
        named = [x for x in left if re.search(rf"\b{re.escape(x.split(' ')[0])}\b", cut_log)] or left
        result = CutCheck(False, True, "the unit cut for the CPU does not compile with nvcc although the file "
                          f"does ({first_errors(cut_log)})" + (f"; left out of it: {', '.join(named)}" if named else ""),
                          compiler=compiler)
    else:
        diff = compare(cut_ptx, whole)
        result = CutCheck(diff is None, True, "the cut means what the file means" if diff is None else
                          f"the unit cut for the CPU would change what the kernel does: {diff}"
                          + (f"; left out of it: {', '.join(left)}" if left else ""), compiler=compiler)
    result = CutCheck(result.ok, result.checked, result.message, time.perf_counter() - t0, result.compiler)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(asdict(result)))
        os.replace(tmp, cached)
    except OSError:  # a cache only: a full disk stores nothing, half-written or whole
        tmp.unlink(missing_ok=True)
    return result


def _host_macro() -> str:
    from .cut import HOST_HEADERS_MACRO
    return HOST_HEADERS_MACRO


def _left_out(unit: CompileUnit) -> list[str]:
    return list(getattr(unit, "left_out", ()))
