"""The spec's `instantiate`: a template argument list of types and integer constants only (it
ends up in generated C++), checked with tree-sitter and written in canonical form."""
from __future__ import annotations

import re
from collections.abc import Iterator

from tree_sitter import Node

from . import exprs, source


def split_template_args(instantiate: str) -> list[str]:
    """'<__half, 4>' -> ['__half', '4'] (commas inside nested <> or () are kept)."""
    s = instantiate.strip()
    if s.startswith("<") and s.endswith(">"):
        s = s[1:-1]
    return exprs.split_top_level(s)


# What a template argument may be made of: types (also qualified, templated, pointers, const)
# and integer or boolean constants (also named ones). Never an expression that calls, takes an
# address or branches: the arguments end up in generated C++. A `template_function` is how
# tree-sitter reads a template-id it cannot tell from a type (CuTe's `cute::C<8>` inside
# another argument list): a name with arguments, as safe as the `identifier` it stands for.
_TEMPLATE_ARG_NODES = frozenset({
    "template_argument_list", "type_descriptor", "primitive_type", "type_identifier",
    "namespace_identifier", "qualified_identifier", "template_type", "template_function", "sized_type_specifier",
    "type_qualifier", "abstract_pointer_declarator", "number_literal", "true", "false", "identifier",
    "<", ">", ",", "::", "*", "const", "volatile", "unsigned", "signed", "long", "short", "int", "char",
})
# CuTe's layouts spell long types: CUTLASS's sgemm_1 tutorial instantiates its kernel with 756
# characters of `cute::Layout<cute::tuple<cute::C<128>, …>>`; the spec comment's own bound
# (MAX_SPEC_CHARS) still holds the whole comment.
MAX_INSTANTIATE_CHARS = 2048


def parse_template_args(instantiate: str) -> str:
    """The spec's `instantiate`, checked to be a template argument list of types and integer
    constants (parsed with tree-sitter), in canonical form '<A, B>'. ValueError otherwise."""
    text = instantiate.strip()
    if len(text) > MAX_INSTANTIATE_CHARS:
        raise ValueError(f"`instantiate` is too long (at most {MAX_INSTANTIATE_CHARS} characters)")
    if not text.startswith("<"):
        text = f"<{text}>"
    args = _argument_list(text, 0)
    if not args:
        raise ValueError("`instantiate` gives no template argument")
    return "<" + ", ".join(args) + ">"


# `name<…>`, a template-id whose arguments are read one by one where the list as a whole is
# misread (the name: a plain or qualified identifier)
_TEMPLATE_ID = re.compile(r"((?:::)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)\s*<(.*)>", re.S)
_MAX_NESTING = 32


def _argument_list(text: str, depth: int) -> list[str]:
    """The arguments of the list `<…>` in canonical form, each checked; ValueError otherwise.
    Where tree-sitter misreads the list as a whole (CuTe's `T<int, L<t<C<1>, C<6>>>>`: its GLR
    parse of `<` after a type is ambiguous), each argument is read alone, and a template-id's own
    list the same way."""
    args = _parsed_list(text)
    if args is not None:
        return args
    if depth >= _MAX_NESTING or not (text.startswith("<") and text.endswith(">")):
        raise ValueError(f"`instantiate` must be template arguments only, e.g. \"<__half, 4>\" (got {text!r})")
    return [_argument(a.strip(), depth + 1, text) for a in split_template_args(text)]


def _argument(arg: str, depth: int, whole: str) -> str:
    one = _parsed_list(f"<{arg}>")
    if one is not None and len(one) == 1:
        return one[0]
    m = _TEMPLATE_ID.fullmatch(arg)
    if m is None:
        raise ValueError(f"`instantiate` must be template arguments only, e.g. \"<__half, 4>\" (got {whole!r})")
    return " ".join(m.group(1).split()) + "<" + ", ".join(_argument_list(f"<{m.group(2)}>", depth)) + ">"


def _parsed_list(text: str) -> list[str] | None:
    """The arguments of `<…>` as tree-sitter reads it as a type alias's template-id (there an argument
    is a type where it can be one: as an expression, `S<C<128>, C<8>>`'s second argument parses as
    `C < 8`); None where it misreads it; ValueError for an argument of what `instantiate` never takes."""
    code = f"using astra_probe_ = astra_probe{text};".encode()
    tree = source.parser().parse(code)
    decls = tree.root_node.children
    lists = [n for n in _nodes(tree.root_node) if n.type == "template_argument_list"]
    outer = lists[0] if lists else None
    holder = outer.parent if outer is not None else None
    if (tree.root_node.has_error or len(decls) != 1 or decls[0].type != "alias_declaration"
            or outer is None or _text(outer) != text or holder is None or holder.type != "template_type"
            or holder.parent is None or holder.parent.parent != decls[0]):
        return None
    args = []
    for child in outer.named_children:
        for n in _nodes(child):
            if n.type not in _TEMPLATE_ARG_NODES:
                raise ValueError(f"`instantiate` takes types and integer constants only; "
                                 f"{_text(n)!r} is not one")
        args.append(" ".join(_text(child).split()))
    return args


def _text(n: Node) -> str:
    return (n.text or b"").decode()


def _nodes(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)
