"""Small readings of a tree-sitter node that the access walk (`access`) asks for: parentheses
stripped, a call's operator, a function's arity and reference parameters, numbers in a text,
and the integer parameters read as segment boundaries (`indptr[b]` and `indptr[b + 1]`).
Separate because they read syntax only, no interval of the walk."""
from __future__ import annotations

import re

from tree_sitter import Node

from . import dtypes, syntax
from .access_values import View


def call_operator(cls: Node | None) -> Node | None:
    """A class's `operator()` definition (None where the class is not read or has none)."""
    body = cls.child_by_field_name("body") if cls is not None and cls.type in ("class_specifier",
                                                                               "struct_specifier") else None
    for m in (body.named_children if body is not None else []):
        m = next((c for c in m.named_children if c.type == "function_definition"), m) \
            if m.type == "template_declaration" else m
        if m.type == "function_definition" and (method_name(m) or "").replace(" ", "") == "operator()":
            return m
    return None


def assigned_only(fn: Node) -> set[int]:
    """Positions of the reference parameters a function only assigns (`dst = static_cast<OutT>(src)`,
    never read): the element passed there is written, not read."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    params = [p for p in (plist.named_children if plist is not None else [])
              if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    body = fn.child_by_field_name("body")
    out = set()
    for i, p in enumerate(params):
        d = p.child_by_field_name("declarator")
        name = next((syntax.text(c) for c in syntax.walk(d) if c.type == "identifier"), None) if d else None
        uses = [n for n in syntax.walk(body) if n.type == "identifier" and syntax.text(n) == name] \
            if name and body is not None else []
        if uses and all(u.parent is not None and u.parent.type == "assignment_expression"
                        and u.parent.child_by_field_name("left") == u
                        and syntax.field(u.parent, "operator").type == "=" for u in uses):
            out.add(i)
    return out


def reference_params(fn: Node) -> set[int]:
    """The positions of a function's non-const reference parameters (`float& dst`): what it is
    passed there it may write."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    params = [p for p in (plist.named_children if plist is not None else [])
              if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    return {i for i, p in enumerate(params) if p.child_by_field_name("declarator") is not None
            and syntax.field(p, "declarator").type == "reference_declarator"
            and not any(c.type == "type_qualifier" and c.text == b"const" for c in p.children)}


def has_method(view: View, name: str, nargs: int) -> bool:
    """Whether the view's class defines a method `name` taking `nargs` arguments."""
    body = view.cls.child_by_field_name("body")
    for m in (body.named_children if body is not None else []):
        m = next((c for c in m.named_children if c.type == "function_definition"), m) \
            if m.type == "template_declaration" else m
        if m.type == "function_definition" and method_name(m) == name and arity(m)[0] <= nargs <= arity(m)[1]:
            return True
    return False


def method_name(fn: Node) -> str | None:
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    return syntax.declarator_name(decl.child_by_field_name("declarator"))[0] if decl is not None else None


def arity(fn: Node) -> tuple[int, int]:
    """(required, all) parameters of a function definition."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    ps = [p for p in (plist.named_children if plist is not None else [])
          if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    if len(ps) == 1 and syntax.text(ps[0]).strip() == "void":
        ps = []
    return sum(1 for p in ps if p.type == "parameter_declaration"), len(ps)


def is_condition(n: Node | None) -> bool:
    """A comparison or a logical combination of them (`check && i < n`)."""
    n = unparen(n)
    return n is not None and n.type == "binary_expression" and syntax.field(n, "operator").type in (
        "&&", "||", "<", "<=", ">", ">=", "==", "!=")


def functional_cast(fn: Node | None) -> bool:
    """`int64_t(d)`, `float(x)`: a call whose function is a scalar type, a cast written as a call."""
    return fn is not None and fn.type in ("primitive_type", "type_identifier", "identifier", "qualified_identifier") \
        and dtypes.from_cpp(syntax.text(fn)) is not None


def unparen(n: Node | None) -> Node | None:
    while n is not None and n.type in ("parenthesized_expression", "condition_clause"):
        inner = [c for c in n.named_children if c.type != "comment"]
        if len(inner) != 1:
            return n if n.type != "condition_clause" else (inner[-1] if inner else None)
        n = inner[0]
    return n


def numbers_in(text: str) -> list[int]:
    out, cur = [], ""
    for ch in text + " ":
        if ch.isdigit():
            cur += ch
        elif cur:
            out.append(int(cur))
            cur = ""
    return out


def tile_size(text: str, constants: dict[str, int]) -> int:
    """The width of a cooperative-groups tile from its declaration's text: the first template
    argument of `thread_block_tile<N>` / `tiled_partition<N>`, a number or a name the instance
    fixes (DeepSpeed apply_rotary_pos_half's `tiled_partition<threadsPerHead>(tb)`: 4 lanes a head
    in its <float, 4, 4> instance, not a warp's 32; taken as 32, each head's accesses reached 28
    elements past it and no shape fit them). 32 where neither is known."""
    for m in re.finditer(r"(?:thread_block_tile|tiled_partition)\s*<\s*([^,<>]+?)\s*[,>]", text):
        arg = m.group(1).split("::")[-1]
        if arg.rstrip("uUlL").isdigit():
            return int(arg.rstrip("uUlL"))
        if isinstance(constants.get(arg), int) and constants[arg] > 0:
            return constants[arg]
    return next(iter(numbers_in(text)), 32)


def subscript_of(n: Node | None, arrays: set[str]) -> tuple[str, str] | None:
    """(array, index without blanks) of `a[i]` where `a` is one of `arrays`."""
    if n is None or n.type != "subscript_expression":
        return None
    arr = unparen(n.child_by_field_name("argument"))
    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = next((c for c in idx.named_children if c.type != "comment"), None)
    if arr is None or arr.type != "identifier" or syntax.text(arr) not in arrays or idx is None:
        return None
    return syntax.text(arr), re.sub(r"\s+", "", syntax.text(idx))


def _strided_index(n: Node) -> bool:
    """`a[2 * b]` or `a[2 * b + 1]`: records of several entries (vLLM copy_blocks' (src, dst)
    pairs), whose `+ 1` is the next field of one record, not the next boundary."""
    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = next((c for c in idx.named_children if c.type != "comment"), None)
    idx = unparen(idx)
    if idx is not None and idx.type == "binary_expression" and syntax.field(idx, "operator").type == "+":
        idx = unparen(idx.child_by_field_name("left"))
    if idx is None or idx.type != "binary_expression" or syntax.field(idx, "operator").type != "*":
        return False
    factors = (unparen(idx.child_by_field_name(side)) for side in ("left", "right"))
    return any(f is not None and f.type == "number_literal" and syntax.text(f).rstrip("uUlL").isdigit()
               and int(syntax.text(f).rstrip("uUlL")) > 1 for f in factors)


def boundary_arrays(body: Node, int_params: set[str]) -> set[str]:
    """The integer pointer parameters read both at some index `i` and at `i + 1` (`indptr[b + 1] -
    indptr[b]`): the boundaries of segments, as a CSR `indptr` or `cu_seqlens` holds them — values
    that never decrease, from 0 to the size of what they segment, not indices drawn at random."""
    seen: dict[str, set[str]] = {}
    for n in syntax.walk(body):
        at = subscript_of(n, int_params)
        if at is not None and not _strided_index(n):
            seen.setdefault(at[0], set()).add(at[1])
    return {name for name, indices in seen.items()
            if any(f"{i}+1" in indices or f"({i})+1" in indices or f"1+{i}" in indices for i in indices)}


def through_aliases(aliases: dict[str, str], type_text: str) -> str:
    """A local's type followed through the body's own aliases (`using Wvec = Vec<float, 4>;`,
    `using Ivec = typename Ktraits::Ivec;`), qualifiers dropped, up to four steps."""
    text = type_text
    for _ in range(4):
        text = " ".join(w for w in text.split() if w not in ("const", "typename", "volatile"))
        if text not in aliases:
            break
        text = aliases[text]
    return text
