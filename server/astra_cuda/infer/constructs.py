"""A struct's field of a class of its own that the project's C++ shows the host building from a
number (issue 25, item 6): the spec's `{ construct = "ns::C(n)" }` (`model/construct`), proposed
where both hold —

- the class `C` has a host constructor of one integer parameter (FlashInfer's
  `uint_fastdiv(uint32_t d)`, which computes a multiplier and a shift from the divisor), and
- the struct's own host constructor initialises the field with one of its integer parameters
  (`paged_kv_t(uint32_t num_heads, uint32_t page_size, …) : page_size(page_size), …`): the host
  builds the field from a size the caller chooses.

The field is then read by the rest of inference as that size (`structs.flatten` gives its split
parameter the constructor's integer type), and `structs.unflatten` writes the size back as the
constructor's argument. The class is named from the global scope (its namespaces), as the
constructor program, appended to the unit, names it. Nothing here computes the object: the
validator runs the proposal, whose constructor program the backend builds and runs. Pure.
"""
from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ..model import dtypes, source, syntax
from ..model.source import Item
from ..model.syntax import declarator_name, specifiers, walk


def _integer(type_text: str) -> bool:
    words = [w for w in type_text.replace("&", " ").split() if w not in ("const", "volatile")]
    dt = dtypes.from_cpp(" ".join(words)) if words else None
    return dt is not None and not dt.is_float and dt.name != "bool"


def _definition(name: str, items: list[Item]) -> tuple[Node | None, str]:
    """(the class body of `name`, its qualified name) where exactly one type item defines it."""
    short = name.replace(" ", "").lstrip(":").split("<")[0].rpartition("::")[2]
    defs = [it for it in items if it.kind == "type" and short in it.defines and "{" in it.text]
    if len(defs) != 1:
        return None, ""
    tree = source.parser().parse(defs[0].text.encode())
    body = next((n for n in walk(tree.root_node) if n.type == "field_declaration_list"), None)
    named = body.parent.child_by_field_name("name") if body is not None and body.parent is not None else None
    if named is None or syntax.text(named) != short:
        return None, ""
    return body, "::".join([*(ns for ns in defs[0].namespaces if ns), short])


def _constructors(body: Node, short: str) -> Iterator[tuple[Node, list[tuple[str, str]]]]:
    """Each constructor written in the class body: (its definition or declaration, its parameters
    as (type, name))."""
    for member in body.named_children:
        if member.type not in ("function_definition", "declaration"):
            continue
        fn = member.child_by_field_name("declarator")
        if fn is None or fn.type != "function_declarator" or declarator_name(fn)[0] != short:
            continue
        plist = fn.child_by_field_name("parameters")
        params: list[tuple[str, str]] = []
        for p in (plist.named_children if plist is not None else []):
            if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
                continue
            ptype = p.child_by_field_name("type")
            pname, _ = declarator_name(p.child_by_field_name("declarator"))
            params.append((syntax.text(ptype) if ptype is not None else "", pname or ""))
        yield member, params


def number_class(type_text: str, items: list[Item]) -> tuple[str, str]:
    """(the qualified name of `type_text`, the integer type its constructor takes) where it is a
    class with a host constructor of one integer parameter (`uint_fastdiv(uint32_t d)`), else ("", "")."""
    body, qualified = _definition(type_text, items)
    if body is None:
        return "", ""
    short = qualified.rpartition("::")[2]
    for member, params in _constructors(body, short):
        spec = specifiers(member)
        if len(params) == 1 and _integer(params[0][0]) and ("__device__" not in spec or "__host__" in spec):
            return qualified, params[0][0].replace("const", "").replace("&", "").strip()
    return "", ""


def field_size(struct_type: str, field: str, items: list[Item]) -> tuple[str, str] | None:
    """(the integer parameter's name, its type) of a host constructor of the struct `struct_type`
    that initialises `field` with that parameter alone (`: page_size(page_size)`), else None."""
    body, qualified = _definition(struct_type, items)
    if body is None:
        return None
    for member, params in _constructors(body, qualified.rpartition("::")[2]):
        if member.type != "function_definition" or "__device__" in specifiers(member) and \
                "__host__" not in specifiers(member):
            continue
        types = {n: t for t, n in params}
        inits = next((c for c in member.named_children if c.type == "field_initializer_list"), None)
        for init in (inits.named_children if inits is not None else []):
            name = next((c for c in init.named_children if c.type == "field_identifier"), None)
            args = next((c for c in init.named_children if c.type in ("argument_list", "initializer_list")), None)
            if name is None or args is None or syntax.text(name) != field or len(args.named_children) != 1:
                continue
            arg = args.named_children[0]
            if arg.type == "identifier" and _integer(types.get(syntax.text(arg), "")):
                return syntax.text(arg), types[syntax.text(arg)]
    return None


def built_fields(struct_type: str, fields: list[tuple[str, str]], items: list[Item]) -> dict[str, tuple[str, str]]:
    """Of a struct's (type, field) members, those the host builds from a size: field -> (the
    class's qualified name, the integer type of the size that builds it)."""
    out: dict[str, tuple[str, str]] = {}
    for t, f in fields:
        if "*" in t:
            continue
        cls, _ = number_class(t, items)
        size = field_size(struct_type, f, items) if cls else None
        if size is not None:
            out[f] = (cls, size[1])
    return out
