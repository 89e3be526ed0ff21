"""The spec's `instantiate`: a template argument list of types and integer constants only (it
ends up in generated C++), checked with tree-sitter and written in canonical form."""
from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from . import exprs, source, syntax


def split_template_args(instantiate: str) -> list[str]:
    """'<__half, 4>' -> ['__half', '4'] (commas inside nested <> or () are kept)."""
    s = instantiate.strip()
    if s.startswith("<") and s.endswith(">"):
        s = s[1:-1]
    return exprs.split_top_level(s)


# What a template argument may be made of: types (also qualified, templated, pointers, const)
# and integer or boolean constants (also named ones). Never an expression that calls, takes an
# address or branches: the arguments end up in generated C++.
_TEMPLATE_ARG_NODES = frozenset({
    "template_argument_list", "type_descriptor", "primitive_type", "type_identifier",
    "namespace_identifier", "qualified_identifier", "template_type", "sized_type_specifier",
    "type_qualifier", "abstract_pointer_declarator", "number_literal", "true", "false", "identifier",
    "<", ">", ",", "::", "*", "const", "volatile", "unsigned", "signed", "long", "short", "int", "char",
})
MAX_INSTANTIATE_CHARS = 300


def parse_template_args(instantiate: str) -> str:
    """The spec's `instantiate`, checked to be a template argument list of types and integer
    constants (parsed with tree-sitter), in canonical form '<A, B>'. ValueError otherwise."""
    text = instantiate.strip()
    if len(text) > MAX_INSTANTIATE_CHARS:
        raise ValueError(f"`instantiate` is too long (at most {MAX_INSTANTIATE_CHARS} characters)")
    if not text.startswith("<"):
        text = f"<{text}>"
    code = f"void* astra_probe_ = &astra_probe{text};".encode()
    tree = source.parser().parse(code)
    decls = tree.root_node.children
    lists = [n for n in _nodes(tree.root_node) if n.type == "template_argument_list"]
    outer = lists[0] if lists else None
    if (tree.root_node.has_error or len(decls) != 1 or outer is None
            or syntax.text(outer) != text or outer.parent is None or outer.parent.type != "template_function"):
        raise ValueError(f"`instantiate` must be template arguments only, e.g. \"<__half, 4>\" (got {text!r})")
    args = []
    for child in outer.named_children:
        for n in _nodes(child):
            if n.type not in _TEMPLATE_ARG_NODES:
                raise ValueError(f"`instantiate` takes types and integer constants only; "
                                 f"{syntax.text(n)!r} is not one")
        args.append(" ".join(syntax.text(child).split()))
    if not args:
        raise ValueError("`instantiate` gives no template argument")
    return "<" + ", ".join(args) + ">"


def _nodes(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)
