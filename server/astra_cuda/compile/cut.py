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

The three steps are a pipeline over one text: the preprocessor's lines by origin
(`project_lines`), the C++ declarations they form (`declarations`), and here the choice of
declarations with their writing out.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import AbstractSet

from ..model import parse_time, source
from . import for_nvrtc, project_lines
from .declarations import Deep, Item, Reader, TooDeep
from .devicepp import Preprocessed
from .project_lines import Row, amount, project_rows, too_large
from .torch_ext import TORCH_HEADERS

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
# A library whose names all live in one namespace: its headers are needed only where kept code
# names it. NVRTC refuses CUB's umbrella <cub/cub.cuh> (an #error, and host-only code behind it),
# which vLLM, bitsandbytes and FlashInfer headers include for kernels other than the one checked.
LIBRARY_NAMESPACES = {"cub/": "cub"}
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


@dataclass
class Cut:
    source: str
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)     # host items of the user's file, host headers
    headers: list[str] = field(default_factory=list)     # the project's headers read into the unit
    left_out: list[str] = field(default_factory=list)    # declarations left out whose names kept code uses
    found: bool = True                                   # the kernel is in the device pass
    # for the search's fast path (`fastpath`): every name the project's declarations define, its
    # macros, and the names whose every declaration is kept (a host overload of a device
    # function is not: device code may name it in `decltype`)
    project_names: frozenset[str] = frozenset()
    project_macros: frozenset[str] = frozenset()
    kept_names: frozenset[str] = frozenset()


def header_kind(header: str) -> str:
    if any(header == h or header.endswith("/" + h) for h in IMPLICIT_HEADERS):
        return "implicit"
    if any(header == h or (h.endswith("/") and header.startswith(h)) for h in DEVICE_HEADERS):
        return "device"
    return "host"


def _closure(items: list[Item], kernel: str, kernel_scope: tuple[str, ...] | None,
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
            tree = source.parser().parse(data, max_nodes=max(project_lines.FLOOR_NODES, read.allowed_nodes()))
    except parse_time.TooManyNodes as e:
        raise too_large(pp, rows, f"{amount(read.code)} of code in the project's files become more than "
                                  f"{read.allowed_nodes():,} syntax nodes once macros are expanded") from e
    except parse_time.TooSlowToParse as e:
        if e.offset is not None:   # at the line tree-sitter was stopped at, as the cut's other refusals
            row = rows[_row_of(starts, e.offset)]
            e.message = ("" if row.file == pp.path else f"{os.path.basename(row.file)}:{row.line}: ") + e.message
            e.line = row.line - 1 if row.file == pp.path else None
        raise
    reader = Reader(data)
    try:
        reader.read(tree.root_node.children, ())
    except Deep as e:
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
    # what kept code names, the namespaces of its `using namespace` (kept whenever written) too
    named = used | {it.header.lstrip(":").split("::")[0] for it in items if it.kind == "using"}
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
            unnamed = next((ns for lib, ns in LIBRARY_NAMESPACES.items() if name.startswith(lib)
                            and ns not in named), None)
            if kind == "device" and unnamed is not None:
                # nvcc and the CPU build read it as written; NVRTC, which may refuse it, never needs it
                line = f"#if !{for_nvrtc.RTC}\n{line}#endif\n"
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
        members = for_nvrtc.host_members(reader.nodes[i]) if it.kind == "type" else []
        out.append(_emit_members(it, members, rows, starts, data) if members else _emit(it, rows, starts, data))
        result.kept.append(it.label)
    enter(())
    defined = {n for it in items for n in it.defines}
    macros = {(node.child_by_field_name("name").text or b"").decode()  # type: ignore[union-attr]
              for node in reader.nodes if node.type in ("preproc_def", "preproc_function_def")
              and node.child_by_field_name("name") is not None}
    result.project_names, result.project_macros = frozenset(defined), frozenset(macros)
    result.kept_names = frozenset({n for i in keep for n in items[i].defines}
                                  - {n for i, it in enumerate(items) if i not in keep for n in it.defines})
    result.source = FOR_NVRTC + for_nvrtc.prelude(for_nvrtc.host_library(pp), named, defined) + "".join(out)
    result.headers = list(dict.fromkeys(r.file for r in rows if r.file != pp.path))
    return result


def _quote(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def _emit_members(it: Item, members: list[tuple[int, int, str]], rows: list[Row], starts: list[int],
                  data: bytes) -> str:
    """A type with host-only members (`for_nvrtc.host_members`): each member as written for nvcc and
    the CPU build, its deleted declaration for NVRTC."""
    out, pos = [], it.start
    for start, end, deleted in members:
        if start > pos:
            out.append(_emit_span(pos, start, rows, starts, data))
        r = _row_of(starts, start)
        row, indent = rows[r], " " * (start - starts[r])   # at its own column
        out.append(f'#if {for_nvrtc.RTC}\n#line {row.line} "{_quote(row.file)}"\n{indent}{deleted}\n#else\n'
                   + _emit_span(start, end, rows, starts, data) + "#endif\n")
        pos = end
    if it.end > pos:
        out.append(_emit_span(pos, it.end, rows, starts, data))
    return "".join(out)


def _emit(it: Item, rows: list[Row], starts: list[int], data: bytes) -> str:
    return _emit_span(it.start, it.end, rows, starts, data)


def _emit_span(start: int, end: int, rows: list[Row], starts: list[int], data: bytes) -> str:
    """The text of bytes start..end, each line under the `#line` of its origin (the column of its
    first line kept, so a message's column is the user's)."""
    r0, r1 = _row_of(starts, start), _row_of(starts, max(start, end - 1))
    out: list[str] = []
    expect: tuple[str, int] | None = None
    for r in range(r0, r1 + 1):
        lo = start - starts[r] if r == r0 else 0
        hi = end - starts[r] if r == r1 else len(rows[r].text)
        piece = (b" " * lo + rows[r].text[lo:hi]).decode(errors="replace")
        row = rows[r]
        if expect != (row.file, row.line):
            out.append(f'#line {row.line} "{_quote(row.file)}"\n')
        out.append(piece + "\n")
        expect = (row.file, row.line + 1)
    return "".join(out)
