"""Cut one kernel's stand-alone unit out of the device pass's preprocessed file
(`astra_cuda.compile.devicepp`): conditionals are decided and macros expanded there, so this module
only chooses declarations, by their C++ structure (tree-sitter).

What is kept, in the file's order and under the file's namespaces and `extern "C"` blocks:
- the kernel's definitions, declarations and explicit instantiations;
- every declaration its code reaches by name, transitively, that device code can use: device
  and host-device functions (every overload), `constexpr` functions, types of every kind (whole:
  a struct with its trailing `;`, an enum with its enumerators, a template with all its partial
  and explicit specializations and its members defined outside it), device, constant and
  `const` variables, aliases and using-declarations, and function declarations (no code: device
  code may name a host one where nothing runs, in `decltype`) — a name the item declares for
  itself, a parameter or local variable, is not a reference (a parameter `C` is not CuTe's `C<N>`);
- free device operators (their calls have no names): those of the project's types with the
  type, the others always;
- every `#define`/`#undef` of the project's files in place (a header of the toolkit included
  after it may read it), every `#include` of a header that is not the project's (the project's
  own are read in place), host-only ones behind `#if defined(ASTRA_HOST_HEADERS)` (defined
  only where nvcc compiles the unit; torch's also lead the CPU build to the parts of torch
  device code names, `TORCH_DEVICE_HEADER`), and `using namespace` of namespaces that exist in it.

Host functions and host variables are left out (device code cannot use them); what a cut
leaves out that the kernel needed shows when the cut unit is compiled and checked against the
whole file (`astra_cuda.compile.cutcheck`), never as a silent change. Every line keeps its origin
through `#line`, so compiler messages land on the user's file (or header) and line.

Long because the three steps are one pipeline over one text: the preprocessor's lines by
origin, the C++ items they form, and the choice of items with their writing out.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import AbstractSet

from tree_sitter import Node

from ..model import parse_time, source
from .devicepp import Preprocessed
from .torch_ext import TORCH_HEADERS
from ..errors import AstraError

HOST_HEADERS_MACRO = "ASTRA_HOST_HEADERS"
# The CPU build of a PyTorch extension defines this and reads, for each of the unit's torch
# #includes, the parts of torch device code names (the CPU runtime's astra_torch_device.h).
TORCH_DEVICE_MACRO = "ASTRA_TORCH_DEVICE"
TORCH_DEVICE_HEADER = "astra_torch_device.h"

# Headers device code may use and the CPU shim or NVRTC provide; any other header that is not
# the project's is host-only in effect (kept for nvcc behind HOST_HEADERS_MACRO).
DEVICE_HEADERS = (
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "mma.h", "cuda_pipeline.h",
    "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cooperative_groups.h", "cooperative_groups/", "cuda/",
    "cub/", "cstdint", "stdint.h", "climits", "limits.h", "cfloat", "float.h", "cmath", "math.h",
    "type_traits", "cassert", "assert.h", "cstddef", "stddef.h", "utility", "limits", "array",
    "math_constants.h", "vector_types.h", "vector_functions.h", "crt/",
)
# Provided implicitly by nvcc (and kept out by the CPU shim): never copied into a unit.
IMPLICIT_HEADERS = ("cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h",
                    "device_functions.h")
# `using namespace X` is kept for these whenever it is written (their headers are device headers).
DEVICE_NAMESPACES = ("std", "cooperative_groups", "cg", "nvcuda", "cub", "cuda", "cute", "cutlass")

# The text was preprocessed by the host compiler: the C library's macros became its builtins
# (INFINITY is `__builtin_inff()`, assert calls `__assert_fail`). nvcc and g++ know them; NVRTC
# (the compiler where no toolkit is installed) gets them here.
FOR_NVRTC = """#if defined(__CUDACC_RTC__) && !defined(__GNUC__)
#define __extension__
#define __builtin_inff() __int_as_float(0x7f800000)
#define __builtin_huge_valf() __int_as_float(0x7f800000)
#define __builtin_nanf(s) __int_as_float(0x7fffffff)
#define __builtin_inf() __longlong_as_double(0x7ff0000000000000LL)
#define __builtin_huge_val() __longlong_as_double(0x7ff0000000000000LL)
#define __builtin_nan(s) __longlong_as_double(0x7ff8000000000000LL)
#define __assert_fail(e, f, l, fn) __trap()
#endif
"""

_IDENTS = ("identifier", "type_identifier", "namespace_identifier")
# Levels of C++ structure below one top-level declaration, after macro expansion. Real code stays
# far below (82 at most in the 1,352 files of the real-world suite, headers included); a
# macro-made 2**16-term expression is 2**16 levels deep, and g++'s front end takes minutes on
# 2**14 (time grows with the square of the length). Checked before any compiler sees the unit.
MAX_DEPTH = 1000
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
MAX_NAMESPACES = source.MAX_BLOCKS  # nested namespace / extern "C" blocks (each a level of the reader's recursion)
_TYPES = ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier")
_DEVICE_SPECS = {"__device__", "__global__", "constexpr", "__constant__", "__managed__", "__shared__", "consteval"}


@dataclass(frozen=True)
class Row:
    text: bytes
    file: str
    line: int  # 1-based, in `file`


@dataclass
class _Item:
    start: int                    # byte offsets in the project text
    end: int
    kind: str                     # directive | include | kernel | function | type | variable | using | other
    defines: frozenset[str] = frozenset()
    uses: frozenset[str] = frozenset()
    attach: frozenset[str] = frozenset()  # kept with any of these names (specializations, members)
    device: bool = False          # device code can use it
    scope: tuple[str, ...] = ()   # enclosing `namespace x {` / `extern "C" {` heads
    header: str = ""              # includes: the directive as written
    label: str = ""               # how a user names it in a message


@dataclass
class Cut:
    source: str
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)     # host items of the user's file, host headers
    headers: list[str] = field(default_factory=list)     # the project's headers read into the unit
    left_out: list[str] = field(default_factory=list)    # declarations left out whose names kept code uses
    found: bool = True                                   # the kernel is in the device pass


_MARKERS = re.compile(r'^# \d+ "[^\n]*$', re.M)


def _marker(line: str) -> tuple[int, str, set[str]] | None:
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
        return too_large(pp, rows, f"{_amount(read.code)} of code in the project's files become more than "
                                   f"{_amount(allowed)} once macros are expanded")

    rows: list[Row] = []
    entered: list[str | None] = []
    file, line, mine = "", 1, False
    text = pp.text
    at = size = 0
    # Only the markers are looked at one by one; the toolkit's long stretches are skipped whole.
    for m in [*_MARKERS.finditer(text), None]:
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
        num, name, flags = _marker(m.group(0))  # type: ignore[misc]
        if "1" in flags and "3" in flags:
            system.add(name)
        if "1" in flags and mine and rows and entered[-1] is None and own(name) \
                and rows[-1].text.lstrip().startswith(b"#include"):
            entered[-1] = name  # the #include just read is of this project file
        file, line, mine = name, num, own(name)
        at = m.end() + 1
    return rows, entered, read


def _amount(n: int) -> str:
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


def header_kind(header: str) -> str:
    if any(header == h or header.endswith("/" + h) for h in IMPLICIT_HEADERS):
        return "implicit"
    if any(header == h or (h.endswith("/") and header.startswith(h)) for h in DEVICE_HEADERS):
        return "device"
    return "host"


# ---- reading the items ---------------------------------------------------------------------

def _text(n: Node | None) -> str:
    return (n.text or b"").decode("utf-8", errors="replace") if n is not None else ""


class TooDeep(AstraError):
    """The project's code nests deeper than any compiler should be asked to read (MAX_DEPTH)."""


class _Deep(Exception):
    def __init__(self, byte: int, what: str):  # where, and what is wrong there
        self.byte, self.what = byte, what


def _idents(node: Node) -> set[str]:
    """The names under `node` but those of its own parameters and local variables where they stand
    for them (a kernel's parameter `C` is not CuTe's `C<N>`: names are all the cut goes by);
    raises _Deep where it nests past MAX_DEPTH."""
    out: set[str] = set()
    plain: set[str] = set()
    local: set[str] = set()
    stack: list[tuple[Node, int, str]] = [(node, 0, "")]
    while stack:
        n, depth, parent = stack.pop()
        if n.type in _IDENTS:
            (plain if n.type == "identifier" and parent not in _NAMING else out).add(_text(n))
        elif depth and n.type in _LOCALS:
            for d in n.children_by_field_name("declarator"):
                name = _declarator_name(d)
                if name is not None and name.type == "identifier":
                    local.add(_text(name))
        if depth >= MAX_DEPTH and n.child_count:
            raise _Deep(n.start_byte, f"the code nests more than {MAX_DEPTH} levels deep once macros are expanded "
                        "(an expression or macro that explodes? compilers take minutes on such code)")
        stack.extend((c, depth + 1, n.type) for c in n.children)
    return out | (plain - local)


# Where a plain identifier is a name of something else than a local: `C<3>{}`, `cute::C`.
_NAMING = ("template_function", "qualified_identifier")
# Declarations of names local to an item (below its top).
_LOCALS = ("parameter_declaration", "optional_parameter_declaration", "declaration")


def _base(name_node: Node | None) -> str:
    """The template's own name of `vec_t<float, N>` (or a plain name)."""
    if name_node is None:
        return ""
    if name_node.type in ("template_type", "template_function"):
        return _text(name_node.child_by_field_name("name"))
    if name_node.type == "qualified_identifier":
        return _base(name_node.child_by_field_name("name"))
    return _text(name_node)


def _specifiers(node: Node) -> set[str]:
    out = set()
    for c in node.children:
        t = _text(c)
        if c.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier", "virtual"):
            out.update(t.split())
        elif c.type.startswith("__") or (not c.is_named and t.startswith("__")):
            out.add(c.type if c.type.startswith("__") else t)
        elif c.type == "launch_bounds":
            out.add("__launch_bounds__")
    return out


def _declarator_name(d: Node | None) -> Node | None:
    while d is not None:
        if d.type in ("identifier", "field_identifier", "type_identifier", "operator_name", "destructor_name",
                      "qualified_identifier", "template_function", "template_type"):
            return d
        nxt = d.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in d.named_children if c.type in (
                "identifier", "qualified_identifier", "function_declarator", "pointer_declarator",
                "reference_declarator", "array_declarator", "init_declarator", "parenthesized_declarator",
                "template_function", "operator_name")), None)
        d = nxt
    return None


def _function_declarator(d: Node | None) -> Node | None:
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator") or next(
            (c for c in d.named_children if c.type.endswith("declarator")), None)
    return d


def _typedef(it: _Item, inner: Node, names: set[str]) -> None:
    """A typedef's item: the names it declares and those of the struct/enum it defines inline."""
    spec = inner.child_by_field_name("type")
    if spec is not None and spec.type in _TYPES:
        names |= _type_names(spec)[0]
    it.kind, it.device, it.defines = "type", True, frozenset(n for n in names if n)
    it.label = next(iter(sorted(it.defines)), it.label)


def _type_names(spec: Node) -> tuple[set[str], set[str]]:
    """(names a struct/class/union/enum specifier defines, names it attaches to): a
    specialization `vec_t<float, N>` defines nothing new and belongs with `vec_t`."""
    defines, attach = set(), set()
    name = spec.child_by_field_name("name")
    if name is not None and name.type == "template_type":
        attach.add(_base(name))
    elif name is not None and name.type == "qualified_identifier":
        attach.add(_base(name))
    elif name is not None:
        defines.add(_text(name))
    if spec.type == "enum_specifier":
        body = spec.child_by_field_name("body")
        for e in body.named_children if body is not None else ():
            if e.type == "enumerator" and e.child_by_field_name("name") is not None:
                defines.add(_text(e.child_by_field_name("name")))
    return defines, attach


class _Reader:
    """Top-level items of the project text, in order."""

    def __init__(self, data: bytes):
        self.data = data
        self.items: list[_Item] = []

    def read(self, nodes: list[Node], scope: tuple[str, ...]) -> None:
        for node in nodes:
            t = node.type
            if t == ";" or t == "expression_statement" and node.child_count == 1 and node.children[0].type == ";":
                # an empty statement is the `;` of the item before it that tree-sitter's recovery
                # from a construct it misreads (`cute::tuple<T...>> &&>`) left outside it; never of
                # an item inside the namespace this `;` follows (`namespace detail {...};`)
                if self.items and self.items[-1].kind not in ("directive", "include") and self.items[-1].scope == scope:
                    self.items[-1].end = node.end_byte  # `struct S {...};` ends at its `;`
                continue
            if t in ("comment", "{", "}"):
                continue
            if t in ("namespace_definition", "linkage_specification") and len(scope) >= MAX_NAMESPACES:
                raise _Deep(node.start_byte, f"more than {MAX_NAMESPACES} nested namespace or extern blocks")
            if t == "namespace_definition":
                body = node.child_by_field_name("body")
                head = self.data[node.start_byte:body.start_byte].decode(errors="replace") if body else ""
                if body is not None:
                    self.read(body.children, scope + (" ".join(head.split()) + " {",))
                continue
            if t == "linkage_specification":
                body = node.child_by_field_name("body")
                lang = _text(node.child_by_field_name("value"))
                if body is not None and body.type == "declaration_list":
                    self.read(body.children, scope + (f"extern {lang} {{",))
                elif body is not None:
                    self.read([body], scope + (f"extern {lang} {{",))
                continue
            self.items.append(self.item(node, scope))

    def item(self, node: Node, scope: tuple[str, ...]) -> _Item:
        t = node.type
        it = _Item(node.start_byte, node.end_byte, "other", scope=scope)
        if t in ("preproc_def", "preproc_function_def"):
            it.kind = "directive"
        elif t == "preproc_call":
            directive = _text(node.child_by_field_name("directive")).strip()
            arg = _text(node.child_by_field_name("argument")).strip()
            it.kind = "directive" if directive in ("#undef", "#pragma") and arg != "once" else "other"
        elif t == "preproc_include":
            it.kind, it.header = "include", _text(node.child_by_field_name("path"))
        elif t == "using_declaration":
            named = node.named_children[-1] if node.named_children else None
            if any(c.type == "namespace" for c in node.children):
                it.kind, it.header = "using", _text(named)
            else:
                it.kind, it.device, it.defines = "type", True, frozenset({_base(named)})
        elif t in ("alias_declaration", "namespace_alias_definition"):
            name = node.child_by_field_name("name") or (node.named_children[0] if node.named_children else None)
            it.kind, it.device, it.defines = "type", True, frozenset({_text(name)})
        else:
            self.declaration(node, it)
        if it.kind not in ("directive", "include"):
            it.uses = frozenset(_idents(node) - it.defines)
        return it

    def declaration(self, node: Node, it: _Item) -> None:
        inner = node
        while inner.type == "template_declaration":
            # an ERROR beside the parameter list is tree-sitter's misreading of a default argument
            # with `>` in it (`bool RegisterSized = sizeof_bits<T>::value >= 32`: CUTLASS's Array)
            nxt = next((c for c in inner.named_children if c.type not in ("template_parameter_list", "comment", "ERROR")),
                       None)
            if nxt is None:
                return
            inner = nxt
        t = inner.type
        it.label = " ".join(_text(inner).split("{")[0].split())[:60]
        if t == "template_instantiation":  # `template __global__ void k<float>(float*);`, `template struct X<int>;`
            target = _declarator_name(inner.child_by_field_name("declarator"))
            spec = next((c for c in inner.named_children if c.type in _TYPES), None)
            it.kind, it.attach = "instantiation", frozenset({_base(target) if target is not None else _base(
                spec.child_by_field_name("name") if spec is not None else None)})
            it.device = True
            return
        if t == "alias_declaration":   # an alias template: `template <typename T> using vec4_t = vec_n_t<T, 4>;`
            name = inner.child_by_field_name("name")
            it.kind, it.device, it.defines = "type", True, frozenset({_text(name)} if name is not None else ())
            it.label = _text(name) or it.label
            return
        if t in _TYPES:
            declared, attach = _type_names(inner)
            it.kind, it.device, it.defines, it.attach = "type", True, frozenset(declared), frozenset(attach)
            it.label = next(iter(declared | attach), it.label)
            return
        if t == "type_definition":
            _typedef(it, inner, {_base(_declarator_name(d)) for d in inner.children_by_field_name("declarator")})
            return
        if t == "declaration" and "typedef" in {_text(inner.child_by_field_name("declarator"))} | {
                _text(e).strip() for e in inner.children if e.type == "ERROR"}:
            # `struct {...} typedef Name;` (DeepSpeed ragged_dtypes.h): tree-sitter reads the keyword as
            # the declarator and the name as an error, or the keyword as an error and the name as the
            # declarator (after a multi-line `struct`); it is a type definition all the same
            names = {_text(c) for e in inner.children if e.type == "ERROR" for c in e.named_children
                     if c.type == "identifier"} | {_base(_declarator_name(d)) for d in
                                                   inner.children_by_field_name("declarator")}
            _typedef(it, inner, names - {"typedef", ""})
            return
        if t not in ("function_definition", "declaration", "field_declaration"):
            return
        specs = _specifiers(inner)
        spec = inner.child_by_field_name("type")
        defines: set[str] = set()
        if spec is not None and spec.type in _TYPES and spec.child_by_field_name("body") is not None:
            defines |= _type_names(spec)[0]   # `struct S {...} s;`
        fdecl = _function_declarator(inner.child_by_field_name("declarator"))
        if fdecl is not None and (t == "function_definition" or inner.child_by_field_name("declarator") == fdecl  # `is`: never (a new Node each call)
                                  or fdecl.parent is not None and fdecl.parent.type in (
                                      "pointer_declarator", "reference_declarator")):
            name = _declarator_name(fdecl.child_by_field_name("declarator"))
            it.label = _text(name) or it.label
            if name is not None and name.type == "qualified_identifier":
                scopes = set()
                q: Node | None = name
                while q is not None and q.type == "qualified_identifier":
                    scopes.add(_base(q.child_by_field_name("scope")))
                    q = q.child_by_field_name("name")
                it.attach = frozenset(s for s in scopes if s)
            base = _base(name)
            if "__global__" in specs:
                it.kind, it.defines = "kernel", frozenset({base})
                return
            it.kind = "function"
            # a declaration alone has no code to leave out: device code may name it where nothing
            # runs (CuTe's `decltype(detail::has_tuple_size((T*)0))`); not an operator's, which
            # nothing names (the host's `operator<<(std::ostream&, half_t)` would come with its type)
            it.device = bool(specs & _DEVICE_SPECS) or t == "declaration"
            if name is not None and name.type == "operator_name" or base.startswith("operator"):
                it.kind = "operator"
                it.device = bool(specs & _DEVICE_SPECS)
            it.defines = frozenset({base} | defines) if base else frozenset(defines)
            return
        names = {_base(_declarator_name(d)) for d in inner.children_by_field_name("declarator")}
        it.kind, it.defines = ("type" if defines and not names - {""} else "variable"), frozenset((names | defines) - {""})
        it.device = bool(defines) or bool(specs & (_DEVICE_SPECS | {"const"}))
        it.label = next(iter(sorted(it.defines)), it.label)


# ---- choosing and writing --------------------------------------------------------------------

def _closure(items: list[_Item], kernel: str, kernel_scope: tuple[str, ...] | None,
             extra: AbstractSet[str] = frozenset()) -> set[int]:
    providers: dict[str, list[int]] = {}
    attached: dict[str, list[int]] = {}
    project_types = {n for it in items if it.kind == "type" for n in it.defines}
    # names only the project's host code defines: a host `template void reduce<int>(...)` is not a
    # part of the device `cg::reduce` a kernel calls (a specialization of a toolkit template is)
    host_only = {n for it in items if not it.device for n in it.defines} - {
        n for it in items if it.device for n in it.defines}
    seeds: list[int] = []
    for i, it in enumerate(items):
        if it.kind == "kernel" or it.kind == "instantiation" and kernel in it.attach:
            if kernel in it.defines | it.attach and (kernel_scope is None or _namespaces(it.scope) == kernel_scope):
                seeds.append(i)
            continue
        if not it.device:
            continue
        if it.kind == "operator":
            mine = it.uses & project_types
            if not mine:
                seeds.append(i)
            for n in mine:
                attached.setdefault(n, []).append(i)
            continue
        for n in it.defines:
            providers.setdefault(n, []).append(i)
        for n in it.attach:
            attached.setdefault(n, []).append(i)
    keep: set[int] = set()
    todo = list(seeds) + [i for n in extra for i in providers.get(n, ())]
    names_done: set[str] = set()
    while todo:
        i = todo.pop()
        if i in keep:
            continue
        keep.add(i)
        for n in items[i].uses | items[i].defines | items[i].attach:
            if n in names_done:
                continue
            names_done.add(n)
            todo.extend(providers.get(n, ()))
            if n not in host_only:
                todo.extend(attached.get(n, ()))
    return keep


def _namespaces(scope: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for head in scope:
        words = head.rstrip("{").split()
        if words and words[0] in ("namespace", "inline"):
            name = words[-1] if words[-1] != "namespace" else ""
            out.extend(name.split("::"))
    return tuple(out)


def _row_of(starts: list[int], byte: int) -> int:
    import bisect
    return bisect.bisect_right(starts, byte) - 1


def _project_header(written: str, includer: str, include_dirs: tuple[str, ...], pp: Preprocessed) -> bool:
    """Whether an `#include` the preprocessor did not enter (its guard was set) names a project
    header: its text is in the unit already, and including it again would define it twice."""
    name = written.strip('<>"')
    dirs = ((os.path.dirname(includer),) if written.startswith('"') else ()) + include_dirs
    roots = tuple(r.rstrip("/") + "/" for r in pp.toolkit_dirs)
    for d in dirs:
        f = os.path.join(d, name)
        if os.path.isfile(f):
            return not os.path.realpath(f).startswith(roots)
    return False


def cut(pp: Preprocessed, kernel: str, kernel_namespaces: tuple[str, ...] | None = None,
        extra_names: AbstractSet[str] = frozenset(), include_dirs: tuple[str, ...] = ()) -> Cut:
    """The unit for `kernel` (its unqualified name; `kernel_namespaces` tells overloads in other
    namespaces apart) from the preprocessed file. `extra_names` are kept too (names in the
    kernel's template arguments: a device function passed as one)."""
    rows, entered, read = project_rows(pp)
    data = b"\n".join(r.text for r in rows)
    starts, pos = [], 0
    for r in rows:
        starts.append(pos)
        pos += len(r.text) + 1
    try:
        with parse_time.reading("the project's code once macros are expanded"):
            # counted by tree-sitter as it builds the tree (no walk): refused before every walk
            tree = source.parser().parse(data, max_nodes=max(FLOOR_NODES, read.allowed_nodes()))
    except parse_time.TooManyNodes as e:
        raise too_large(pp, rows, f"{_amount(read.code)} of code in the project's files become more than "
                                  f"{read.allowed_nodes():,} syntax nodes once macros are expanded") from e
    except parse_time.TooSlowToParse as e:
        if e.offset is not None:   # at the line tree-sitter was stopped at, as the cut's other refusals
            row = rows[_row_of(starts, e.offset)]
            e.message = ("" if row.file == pp.path else f"{os.path.basename(row.file)}:{row.line}: ") + e.message
            e.line = row.line - 1 if row.file == pp.path else None
        raise
    reader = _Reader(data)
    try:
        reader.read(tree.root_node.children, ())
    except _Deep as e:
        row = rows[_row_of(starts, e.byte)]
        own = row.file == pp.path
        raise TooDeep(("" if own else f"{os.path.basename(row.file)}:{row.line}: ") + f"{e.what}: not compiled",
                      line=row.line - 1 if own else None) from None
    items = reader.items
    keep = _closure(items, kernel, kernel_namespaces, extra_names)
    if not any(items[i].kind == "kernel" for i in keep):
        return Cut("", found=False)
    kept_namespaces = {n for i in keep for n in _namespaces(items[i].scope)}
    used = {n for i in keep for n in items[i].uses}
    result = Cut("")
    for i, it in enumerate(items):
        if i not in keep and it.kind in ("function", "operator", "variable", "type") and it.defines & used:
            row = rows[_row_of(starts, it.start)]
            result.left_out.append(f"{it.label} ({os.path.basename(row.file)}:{row.line})")
    out: list[str] = []
    open_: tuple[str, ...] = ()

    def enter(scope: tuple[str, ...]) -> None:
        nonlocal open_
        common = 0
        while common < min(len(open_), len(scope)) and open_[common] == scope[common]:
            common += 1
        out.extend("}\n" for _ in open_[common:])
        out.extend(h + "\n" for h in scope[common:])
        open_ = scope

    for i, it in enumerate(items):
        r0 = _row_of(starts, it.start)
        origin = rows[r0]
        if it.kind == "directive":
            out.append(data[it.start:it.end].decode(errors="replace").rstrip() + "\n")
            continue
        if it.kind == "include":
            if entered[r0] is not None or _project_header(it.header, origin.file, include_dirs, pp):
                continue  # the project's own header: read in place (here, or earlier where it was guarded)
            name = it.header.strip('<>"')
            kind = header_kind(name)
            if kind == "implicit":
                continue
            enter(it.scope)
            line = f'#line {origin.line} "{_quote(origin.file)}"\n{data[it.start:it.end].decode(errors="replace").rstrip()}\n'
            if kind == "host":
                result.dropped.append(f"#include {it.header}")
                # torch's headers are host code to the CPU build too, but their element types and warp
                # helpers are device code's: that build reads those parts (TORCH_DEVICE_HEADER)
                torch = f"#elif defined({TORCH_DEVICE_MACRO})\n#include <{TORCH_DEVICE_HEADER}>\n" \
                    if name.startswith(TORCH_HEADERS) else ""
                line = f"#if defined({HOST_HEADERS_MACRO})\n{line}{torch}#endif\n"
            out.append(line)
            continue
        if it.kind == "using":
            target = it.header.lstrip(":").split("::")[0]
            if target in DEVICE_NAMESPACES or target in kept_namespaces:
                enter(it.scope)
                out.append(_emit(it, rows, starts, data))
            continue
        if i not in keep:
            if origin.file == pp.path and it.kind in ("function", "variable", "other", "kernel") and it.label:
                if it.kind != "kernel":
                    result.dropped.append(it.label)
            continue
        enter(it.scope)
        out.append(_emit(it, rows, starts, data))
        result.kept.append(it.label)
    enter(())
    result.source = FOR_NVRTC + "".join(out)
    result.headers = list(dict.fromkeys(r.file for r in rows if r.file != pp.path))
    return result


def _quote(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def _emit(it: _Item, rows: list[Row], starts: list[int], data: bytes) -> str:
    """The item's text, each line under the `#line` of its origin (the column of its first
    line kept, so a message's column is the user's)."""
    r0, r1 = _row_of(starts, it.start), _row_of(starts, max(it.start, it.end - 1))
    out: list[str] = []
    expect: tuple[str, int] | None = None
    for r in range(r0, r1 + 1):
        lo = it.start - starts[r] if r == r0 else 0
        hi = it.end - starts[r] if r == r1 else len(rows[r].text)
        piece = (b" " * lo + rows[r].text[lo:hi]).decode(errors="replace")
        row = rows[r]
        if expect != (row.file, row.line):
            out.append(f'#line {row.line} "{_quote(row.file)}"\n')
        out.append(piece + "\n")
        expect = (row.file, row.line + 1)
    return "".join(out)
