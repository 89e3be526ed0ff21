"""The project's own lines of the device pass's preprocessed file (`astra_cuda.compile.devicepp`),
each with its origin (file and line, from the preprocessor's line markers), and the bound on how
far they may grow: code that outgrows the code of the project's files once macros are expanded
is `TooLarge`, refused at its line before tree-sitter or any compiler reads it."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..model import parse_time
from .devicepp import Preprocessed
from ..errors import AstraError

# How much code the project's files may become once macros are expanded and headers read in
# (what the cut, the name screen and the source model each walk, node by node, in Python),
# bounded before tree-sitter reads it and before any walk: a 600-byte file of doubling macros
# made a 2**20-element initialiser list of 3 MiB and 2.1 million nodes, and its check ran 6
# minutes without an error. Real code is large only where its files are (CUTLASS/CuTe read in
# as a project's own headers: 4.1 MiB and 1.2 million nodes from 4 MB of headers), so the bound
# is a floor plus a multiple of the bytes of the project's files that were read. Measured over
# the real-world suite (benchmarks/expanded_size.py, benchmarks/results/hostile-expanded-size.md):
# at most 1.77 bytes and 0.48 nodes per byte of those files; 0.66 MiB and 180,000 nodes at most
# outside CUTLASS's own tree. A tiny file may grow to the floors (a check of ~30 s at worst).
# Only code earns: the bytes of those files less comments and blank space (a file padded with
# 280 KB of comments made a 2**18-element list pass, 2 minutes to a verdict), and never beyond
# the ceilings, 1.5 times the largest real code (CUTLASS's 4.1 MiB, 1.21 million nodes): however
# many files a project holds, what is walked in Python is bounded outright.
FLOOR_BYTES = 512 << 10
BYTES_PER_SOURCE_BYTE = 8
FLOOR_NODES = 100_000
NODES_PER_SOURCE_BYTE = 2
CEILING_BYTES = 6 << 20
CEILING_NODES = parse_time.MAX_NODES  # what any parse may build (1.8 million)


@dataclass(frozen=True)
class Row:
    text: bytes
    file: str
    line: int  # 1-based, in `file`


MARKERS = re.compile(r'^# \d+ "[^\n]*$', re.M)


def marker(line: str) -> tuple[int, str, set[str]] | None:
    """`# 12 "file" 1 3` -> (12, 'file', {'1', '3'})."""
    if not line.startswith("# ") or len(line) < 3 or not line[2].isdigit():
        return None
    num, _, rest = line[2:].partition(" ")
    if not num.isdigit() or not rest.startswith('"'):
        return None
    end = rest.rfind('"')
    name = rest[1:end].replace('\\"', '"').replace("\\\\", "\\")
    return int(num), name, set(rest[end + 1:].split())


# Comments and the literals they may hide in, as the compiler's first phase reads them. A lexer's
# job, done by `re` in C and in linear time: tree-sitter's parse of a hostile file is not (4 MB of
# `a<a<...` took 16 s of CPU), and this runs before any bound holds.
# Each alternative matches wherever it starts (a literal left open ends with its line) and gives
# nothing back (possessive `*+`), so no start is tried twice: `"\\"\\"...` cannot make it quadratic.
_LEXED = re.compile(rb'//(?:[^\n\\]|\\.|\\\Z)*+|/\*.*?(?:\*/|\Z)|"(?:[^"\\\n]|\\.|\\\Z)*+(?:"|$)'
                    rb"|'(?:[^'\\\n]|\\.|\\\Z)*+(?:'|$)", re.S | re.M)
_code_cache: dict[tuple[str, int, int], int] = {}


def code_bytes(path: str) -> int:
    """The bytes of the file at `path` that are code: neither comment nor blank space (what a
    file earns in growth allowance). Remembered by size and time."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _code_cache:
        with open(path, "rb") as f:
            data = f.read(st.st_size)
        code = _LEXED.sub(lambda m: m.group(0) if m.group(0)[:1] in b"\"'" else b"", data)
        if len(_code_cache) > 4096:
            _code_cache.clear()
        _code_cache[key] = len(code.translate(None, b" \t\n\r\f\v"))
    return _code_cache[key]


@dataclass
class Read:
    """The project's files whose lines the cut reads."""
    files: list[str] = field(default_factory=list)   # real paths
    bytes: int = 0                                     # their size on disk
    _code: int = 0
    _counted: int = 0                                  # files[:_counted] are in _code

    @property
    def code(self) -> int:
        """Their bytes of code (`code_bytes`): what earns growth allowance."""
        while self._counted < len(self.files):
            self._code += code_bytes(self.files[self._counted])
            self._counted += 1
        return self._code

    def allowed_bytes(self) -> int:
        return min(CEILING_BYTES, FLOOR_BYTES + BYTES_PER_SOURCE_BYTE * self.code)

    def allowed_nodes(self) -> int:
        return min(CEILING_NODES, FLOOR_NODES + NODES_PER_SOURCE_BYTE * self.code)


def project_rows(pp: Preprocessed) -> tuple[list[Row], list[str | None], Read]:
    """The lines that come from the project's own files (the user's file and the headers it
    reads from its folders, not the toolkit's or the system's), each with its origin; for
    each row that is an `#include` directive (from -dI), the file the preprocessor entered for it
    when that file is the project's (None otherwise); and those files. TooLarge where the lines
    outgrow the files' code (Read.allowed_bytes)."""
    system: set[str] = set()
    roots = tuple(r.rstrip("/") + "/" for r in pp.toolkit_dirs)

    known: dict[str, bool] = {}
    read = Read()

    def own(name: str) -> bool:
        if name.startswith("<") or name in system:
            return False
        if name not in known:
            real = os.path.realpath(name)
            known[name] = not any(real.startswith(r) for r in roots)
            if known[name] and os.path.isfile(real):
                read.files.append(real)
                read.bytes += os.path.getsize(real)
        return known[name]

    def refuse(rows: list[Row], allowed: int) -> TooLarge:
        return too_large(pp, rows, f"{amount(read.code)} of code in the project's files become more than "
                                   f"{amount(allowed)} once macros are expanded")

    rows: list[Row] = []
    entered: list[str | None] = []
    file, line, mine = "", 1, False
    text = pp.text
    at = size = 0
    # Only the markers are looked at one by one; the toolkit's long stretches are skipped whole.
    for m in [*MARKERS.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        if mine and end > at:
            size += end - at
            # before this stretch is split into rows: first against the files' whole size (no
            # reading), then, past it or past the floor, against their code
            if size > min(CEILING_BYTES, FLOOR_BYTES + BYTES_PER_SOURCE_BYTE * read.bytes) \
                    or size > FLOOR_BYTES and size > read.allowed_bytes():
                allowed = read.allowed_bytes()
                raise refuse([*rows, _longest(text[at:at + allowed + 1], file, line)], allowed)
            body = text[at:end]
            lines = body.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            for k, t in enumerate(lines):
                # trailing blanks dropped: tree-sitter reads `#define X ` as running on
                row = Row(t.rstrip().encode(), file, line + k)
                last = rows[-1] if rows else None
                if last is not None and (last.file, last.line) == (file, line + k) \
                        and not last.text.lstrip().startswith(b"#") and not t.lstrip().startswith("#"):
                    # one source line split by markers (a system header's macro, `NULL` as `__null`,
                    # expanded mid-line): joined again, so no `#line` lands inside an expression
                    rows[-1] = Row(last.text + b" " + row.text.lstrip(), file, line + k)
                    continue
                rows.append(row)
                entered.append(None)
        if m is None:
            break
        num, name, flags = marker(m.group(0))  # type: ignore[misc]
        if "1" in flags and "3" in flags:
            system.add(name)
        if "1" in flags and mine and rows and entered[-1] is None and own(name) \
                and rows[-1].text.lstrip().startswith(b"#include"):
            entered[-1] = name  # the #include just read is of this project file
        file, line, mine = name, num, own(name)
        at = m.end() + 1
    return rows, entered, read


def amount(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def _longest(body: str, file: str, first: int) -> Row:
    """The longest line of `body` (whose first line is `first` of `file`), its text left out."""
    best = k = pos = 0
    most = -1
    while pos <= len(body):
        nl = body.find("\n", pos)
        nl = len(body) if nl < 0 else nl
        if nl - pos > most:
            most, best = nl - pos, k
        k, pos = k + 1, nl + 1
    return Row(b" " * most, file, first + best)


class TooLarge(AstraError):
    """The project's code, once macros are expanded, outgrows its files more than real code does
    (FLOOR_BYTES, BYTES_PER_SOURCE_BYTE, FLOOR_NODES, NODES_PER_SOURCE_BYTE)."""


def too_large(pp: Preprocessed, rows: list[Row], what: str) -> TooLarge:
    """The error at the longest row (where a macro explosion lands), in the user's file or a header."""
    at = max(rows, key=lambda r: len(r.text), default=None)
    hint = ("real code grows less than twice: a macro that multiplies its argument?"
            " Compilers and Astra's own reading would take minutes")
    if at is None:
        return TooLarge(f"{what} ({hint}): not compiled")
    own = at.file == pp.path
    return TooLarge(("" if own else f"{os.path.basename(at.file)}:{at.line}: ") + f"{what} ({hint}): not compiled",
                    line=at.line - 1 if own else None)
