"""What NVRTC — the compiler of a cut unit where no CUDA toolkit is installed, and the GPU
backend's there — needs of the unit that nvcc gets from the host compiler, and what it refuses
that nvcc compiles. Each part is written under `#if defined(__CUDACC_RTC__)`: nvcc (the cut
check) and the CPU build read the unit exactly as cut.

- The host's C++ standard headers the device pass read: nvcc reads `<type_traits>` and
  `<utility>` through cuda_runtime.h, so a kernel names `std::conditional` with no `#include`
  of its own (DeepSpeed gelu.cu). NVRTC has no host headers; it gets the same headers as CCCL's
  libcu++ gives them (`static`'s stand-ins: `std` names from `cuda::std`), where the kept code
  names `std`.
- The C library's typedefs of arithmetic types the device pass read that kept code names and
  the project does not define (`ushort`, `uint` from <sys/types.h>: FlashInfer math.cuh), except
  those NVRTC's own prelude declares (`<cstdint>`, `<cstddef>`), which may differ in spelling.
- Host-only member functions of the types the kernel uses (FlashInfer's fastdiv: a `__host__`
  constructor beside a `__host__ __device__` one). NVRTC refuses any host function, even one no
  device code calls; nvcc compiles it for the host only. Under NVRTC each becomes a deleted
  declaration: overload resolution sees the same candidates, and device code that calls one is
  still an error (as under nvcc), never another overload. A constructor is declared `explicit`
  too, so a class that had a constructor of its own never becomes an aggregate (C++17 counts a
  deleted constructor out). Copy and move constructors and assignments, destructors, virtual and
  constexpr members are left as written (deleting them would change what the type is — trivially
  copyable, destructible — or break a constant expression): NVRTC refuses those, an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from tree_sitter import Node

from ..model import source
from .devicepp import Preprocessed
from .project_lines import MARKERS, marker
from .nvrtc import STD_HEADERS

RTC = "defined(__CUDACC_RTC__)"
# What NVRTC's own prelude (`static.NVRTC_PRELUDE`: <cstdint>, <cstddef>) declares: never again.
PRELUDE_TYPES = frozenset(
    [f"{u}int{b}_t" for u in ("", "u") for b in (8, 16, 32, 64)]
    + [f"{u}int_{k}{b}_t" for u in ("", "u") for k in ("least", "fast") for b in (8, 16, 32, 64)]
    + ["intptr_t", "uintptr_t", "intmax_t", "uintmax_t", "size_t", "ptrdiff_t", "nullptr_t", "max_align_t"])
_ARITHMETIC = ("primitive_type", "sized_type_specifier")
_EXEC = {"__host__", "__device__", "__global__"}


@dataclass(frozen=True)
class HostLibrary:
    """What the device pass read of the host compiler's own headers."""
    std_headers: tuple[str, ...] = ()                        # of STD_HEADERS
    typedefs: dict[str, str] = field(default_factory=dict)  # C library: name -> `typedef unsigned int uint;`


def host_library(pp: Preprocessed) -> HostLibrary:
    """The host's C++ standard headers of STD_HEADERS the device pass entered, and the global
    typedefs of arithmetic types in the C library's headers it read (system headers outside the
    toolkit's folders and outside a C++ library's `c++/` folder)."""
    roots = tuple(r.rstrip("/") + "/" for r in pp.toolkit_dirs)
    std: list[str] = []
    system: set[str] = set()
    chunks: list[str] = []
    text = pp.text
    file, keep = "", False
    at = 0
    for m in [*MARKERS.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        if keep and end > at:
            chunks.append(text[at:end])
        if m is None:
            break
        mk = marker(m.group(0))
        if mk is None:
            continue
        _, file, flags = mk
        if "1" in flags and "3" in flags:
            system.add(file)
        real = os.path.realpath(file) if file in system else ""
        library = bool(real) and not real.startswith(roots)
        if library and "/c++/" in real and os.path.basename(real) in STD_HEADERS and os.path.basename(real) not in std:
            std.append(os.path.basename(real))
        keep = library and "/c++/" not in real
        at = m.end() + 1
    return HostLibrary(tuple(std), _typedefs("".join(chunks)))


def _typedefs(code: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not code:
        return out
    tree = source.parser().parse(code.encode())
    todo = list(tree.root_node.children)
    while todo:
        n = todo.pop(0)
        if n.type == "linkage_specification":   # `extern "C" {` of __BEGIN_DECLS
            body = n.child_by_field_name("body")
            todo[:0] = list(body.children) if body is not None and body.type == "declaration_list" else (
                [body] if body is not None else [])
            continue
        if n.type != "type_definition" or n.has_error:
            continue
        ty = n.child_by_field_name("type")
        if ty is None or ty.type not in _ARITHMETIC:
            continue
        spelled = " ".join((ty.text or b"").decode().split())
        for d in n.children_by_field_name("declarator"):
            if d.type == "type_identifier":
                name = (d.text or b"").decode()
                out.setdefault(name, f"typedef {spelled} {name};")
    return out


def prelude(lib: HostLibrary, named: set[str], defined: set[str]) -> str:
    """The unit's lines for NVRTC: the standard headers where kept code names `std`, the C
    library's typedefs kept code names (`named`) that the project does not define (`defined`)."""
    lines = [f"#include <{h}>" for h in lib.std_headers if "std" in named]
    lines += [t for n, t in sorted(lib.typedefs.items()) if n in named and n not in defined and n not in PRELUDE_TYPES]
    if not lines:
        return ""
    return (f"// Astra: what nvcc's host headers give this code, for NVRTC\n#if {RTC}\n"
            + "\n".join(lines) + "\n#endif\n")


def host_members(node: Node) -> list[tuple[int, int, str]]:
    """The host-only member functions in a type's definition (nested types too): for each, its
    byte range and the deleted declaration NVRTC reads instead."""
    out: list[tuple[int, int, str]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "compound_statement":
            continue   # a function's body: its local classes are its own
        if n.type == "field_declaration_list" and n.parent is not None:
            cls = _name(n.parent.child_by_field_name("name"))
            for c in n.named_children:
                hit = _host_member(c, cls)
                if hit is not None:
                    out.append(hit)
        stack.extend(n.named_children)
    return sorted(out)


def _name(n: Node | None) -> str:
    while n is not None and n.type in ("template_type", "qualified_identifier"):
        n = n.child_by_field_name("name")
    return (n.text or b"").decode() if n is not None else ""


def _host_member(member: Node, cls: str) -> tuple[int, int, str] | None:
    inner = member
    while inner.type == "template_declaration":
        nxt = next((c for c in inner.named_children if c.type in (
            "function_definition", "declaration", "field_declaration", "template_declaration")), None)
        if nxt is None:
            return None
        inner = nxt
    if inner.type not in ("function_definition", "declaration", "field_declaration") or inner.has_error:
        return None
    words = {(c.text or b"").decode() for c in inner.children if c.type != "function_declarator"}
    words |= {w for c in inner.children if c.type in ("storage_class_specifier", "type_qualifier", "virtual",
                                                      "explicit_function_specifier")
              for w in (c.text or b"").decode().split()}
    space = {c.type for c in inner.children} & _EXEC
    if space not in (set(), {"__host__"}) or words & {"constexpr", "consteval", "virtual", "friend"}:
        return None
    if any(c.type in ("default_method_clause", "delete_method_clause", "pure_virtual_clause") for c in inner.children):
        return None
    decl = inner.child_by_field_name("declarator")
    f = decl
    while f is not None and f.type in ("reference_declarator", "pointer_declarator"):
        f = next((c for c in f.named_children if c.type.endswith("declarator")), None)
    if f is None or f.type != "function_declarator" or decl is None:
        return None
    name = f.child_by_field_name("declarator")
    own = "".join((name.text or b"").decode().split()) if name is not None else ""
    if name is None or name.type == "destructor_name" or own == "operator=":
        return None
    ctor = own == cls
    if ctor and _copies(f, cls):
        return None
    start = member.start_byte
    data = member.text or b""
    head = bytearray(data[:decl.end_byte - start])
    for c in inner.children:
        if c.type == "__host__":
            head[c.start_byte - start:c.end_byte - start] = b" " * (c.end_byte - c.start_byte)
    if ctor and "explicit" not in words:
        at = inner.start_byte - start
        head[at:at] = b"explicit "
    return start, member.end_byte, head.decode(errors="replace").rstrip() + " = delete;"


def _copies(f: Node, cls: str) -> bool:
    """A copy or move constructor: its first parameter a reference to its own class."""
    params = f.child_by_field_name("parameters")
    first = next((p for p in params.named_children if p.type.endswith("parameter_declaration")), None) \
        if params is not None else None
    if first is None:
        return False
    ty = first.child_by_field_name("type")
    d = first.child_by_field_name("declarator")
    return _name(ty) == cls and d is not None and d.type in ("reference_declarator", "abstract_reference_declarator")
