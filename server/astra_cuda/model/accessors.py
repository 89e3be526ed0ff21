"""Tensor accessors passed by value: torch's `PackedTensorAccessor32<T, N, PtrTraits>` (and its
64-bit and generic forms), a data pointer with N sizes and N strides in one object, indexed by
the kernel one dimension at a time (`scores[row][col]`).

Inference reads such a parameter as a buffer of `T` (`as_pointers`: the parameter seen as a
pointer, its written type kept so that it is still known for an accessor) whose extent is
measured per dimension: `access` records `scores[row][col]` as an access of `scores@0` at `row`
and of `scores@1` at `col` (`dim_name`), each fitted to the sizes like a one-dimensional buffer,
and `fold` puts the dimensions back together as the accessor's shape. The spec gives it as a
buffer with `accessor = true` (the gate builds the object, `layout.accessor_probe`). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from . import syntax
from .file_model import Kernel, Param

# torch's accessor classes (at::, torch:: and torch::headeronly:: alike): <T, N, PtrTraits[, index_t]>
NAMES = ("PackedTensorAccessor32", "PackedTensorAccessor64", "PackedTensorAccessor", "GenericPackedTensorAccessor")
SEP = "@"            # `scores@1`: the second dimension of accessor `scores` (no C++ name holds it)
MAX_DIMS = 25        # torch's own limit on a tensor's dimensions


@dataclass(frozen=True)
class AccessorType:
    elem: str    # the element type as written (`scalar_t`, `bool`)
    dims: int    # N


@dataclass(frozen=True)
class Indexed:
    """An accessor parameter indexed in its first dimensions (`scores[row]`, then `[col]`): the
    index of each so far (`access`'s intervals); an access once all `dims` are given."""
    param: str
    dims: int
    indices: tuple[Any, ...] = ()

    def at(self, index: Any) -> "Indexed":
        return replace(self, indices=(*self.indices, index))


@lru_cache(maxsize=256)
def _read(type_text: str) -> tuple[str, str] | None:
    """(element type, N as written) of the accessor a type names, read with tree-sitter."""
    root = syntax.parser().parse(f"{type_text} astra_v;".encode()).root_node
    if root.has_error or not root.named_children or root.named_children[0].type != "declaration":
        return None
    t = root.named_children[0].child_by_field_name("type")
    while t is not None and t.type == "qualified_identifier":
        t = t.child_by_field_name("name")
    if t is None or t.type != "template_type":
        return None
    name, args = t.child_by_field_name("name"), t.child_by_field_name("arguments")
    if name is None or args is None or syntax.text(name) not in NAMES:
        return None
    parts = [c for c in args.named_children if c.type != "comment"]
    return (syntax.text(parts[0]).strip(), syntax.text(parts[1]).strip()) if len(parts) >= 2 else None


def of_type(type_text: str, values: dict[str, Any] | None = None) -> AccessorType | None:
    """The accessor a parameter's type names (`const torch::PackedTensorAccessor32<T, 2,
    torch::RestrictPtrTraits>`); its N a number, or a name `values` gives a number (a template
    parameter of the kernel). None for any other type."""
    got = _read(type_text)
    if got is None:
        return None
    n = got[1]
    v = n if n.isdigit() else str((values or {}).get(n, ""))
    if not v.strip().isdigit() or not 0 < int(v) <= MAX_DIMS:
        return None
    return AccessorType(got[0], int(v))


def of_param(p: Param, values: dict[str, Any] | None = None) -> AccessorType | None:
    """The accessor parameter `p` is (by value, or seen as a pointer by `as_pointers`), or None."""
    if p.is_pointer and "*" in p.type:   # a real pointer (to an accessor, even): not one
        return None
    return of_type(p.type, values)


def dim_name(param: str, d: int) -> str:
    return f"{param}{SEP}{d}"


def as_pointers(kernel: Kernel, values: dict[str, Any] | None = None) -> Kernel:
    """The kernel with each accessor parameter seen as a pointer to its elements (const as the
    accessor is: a const accessor only reads), its type as written kept."""
    params = []
    for p in kernel.params:
        acc = None if p.is_pointer else of_param(p, values)
        params.append(replace(p, base_type=acc.elem, is_pointer=True) if acc is not None else p)
    return replace(kernel, params=tuple(params)) if params != list(kernel.params) else kernel


def pointer_names(kernel: Kernel, values: dict[str, Any] | None = None) -> list[str]:
    """The names whose accesses are measured: each pointer parameter, an accessor's dimensions."""
    out: list[str] = []
    for p in kernel.params:
        acc = of_param(p, values) if p.is_pointer else None
        if acc is not None:
            out += [dim_name(p.name, d) for d in range(acc.dims)]
        elif p.is_pointer:
            out.append(p.name)
    return out


def fold(found: Any, kernel: Kernel, values: dict[str, Any] | None = None) -> None:
    """`roles.InferredShapes` with each accessor's dimensions (`scores@0`, `scores@1`) made one
    entry of the accessor: its shape the dimensions' extents in order (where every one was
    measured), read-only where every dimension is, written or read-modify-write where one is.
    Nothing where no shapes were inferred (None)."""
    if found is None:
        return
    for p in kernel.params:
        acc = of_param(p, values) if p.is_pointer else None
        if acc is None:
            continue
        names = [dim_name(p.name, d) for d in range(acc.dims)]
        dims = [found.shapes.pop(n, None) for n in names]
        if all(d is not None for d in dims):
            found.shapes[p.name] = [" * ".join(d) if len(d) > 1 else d[0] for d in dims]
        for attr in ("inout", "partial", "tables", "boundaries", "aligned", "same_start"):
            s = getattr(found, attr)
            if any(n in s for n in names):
                s.add(p.name)
            s.difference_update(names)
        if all(n in found.read_only for n in names):
            found.read_only.add(p.name)
        found.read_only.difference_update(names)
        for attr in ("vectors", "casts", "congruent"):
            for n in names:
                getattr(found, attr).pop(n, None)
