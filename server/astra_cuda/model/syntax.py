"""Tree-sitter-cuda as every reader of CUDA source uses it: the parser (within its CPU-time limit,
`parse_time`), one expression parsed alone, walking a tree, the nodes of some types, a node's
text, the names under a node, a definition's specifiers and the name a declarator declares. (The
source model built from a tree is `astra_cuda.model.source`.)"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

import tree_sitter_cuda
from tree_sitter import Language, Node, Query, QueryCursor

from . import parse_time


@lru_cache(maxsize=1)
def language() -> Language:
    return Language(tree_sitter_cuda.language())


def parser() -> parse_time.Parser:
    """tree-sitter-cuda's parser, within its CPU-time limit (`parse_time`: a hostile text is refused)."""
    return parse_time.Parser(language())


@lru_cache(maxsize=512)
def parse_expression(text: str) -> Node | None:
    """One C++ expression as tree-sitter reads it; None unless `text` is exactly one well-formed
    expression (so a launch's `a < b ? a : b` can be read by its structure)."""
    code = f"void __astra_expr() {{ ({text}); }}".encode("utf-8")
    root = parser().parse(code).root_node
    if root.has_error:
        return None
    body = root.named_children[0].child_by_field_name("body") if root.named_children else None
    stmts = [c for c in body.named_children if c.type != "comment"] if body is not None else []
    if len(stmts) != 1 or stmts[0].type != "expression_statement" or not stmts[0].named_children:
        return None
    wrapped = stmts[0].named_children[0]
    prefix = len("void __astra_expr() { (")
    if wrapped.type != "parenthesized_expression" or wrapped.start_byte != prefix - 1 \
            or wrapped.end_byte != prefix + len(text.encode("utf-8")) + 1:
        return None
    inner = [c for c in wrapped.named_children if c.type != "comment"]
    return inner[0] if len(inner) == 1 else None


def walk(node: Node) -> Iterator[Node]:
    """`node` and everything below it, in source order (depth first)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


@lru_cache(maxsize=64)
def _query(types: tuple[str, ...]) -> Query:
    return Query(language(), "[" + " ".join(f"({t})" for t in types) + "] @n")


# Bytes of text one query call covers: tree-sitter's query runs in C holding the GIL (~0.15 s of
# CPU per MiB of dense code), so a large tree is queried a window at a time and the language
# server's loop gets the GIL back between windows (~10 ms each).
QUERY_WINDOW = 64 << 10


def _captured(types: tuple[str, ...], node: Node) -> list[Node]:
    """The nodes of `types` under `node` (itself included), in no particular order."""
    cursor = QueryCursor(_query(types))
    if node.end_byte - node.start_byte <= QUERY_WINDOW:
        return cursor.captures(node).get("n", [])
    seen: dict[int, Node] = {}
    for at in range(node.start_byte, node.end_byte, QUERY_WINDOW):
        cursor.set_byte_range(at, min(at + QUERY_WINDOW, node.end_byte))
        for n in cursor.captures(node).get("n", []):   # a node across two windows comes twice
            seen.setdefault(n.id, n)
    return list(seen.values())


def nodes_of(node: Node, types: Iterable[str]) -> list[Node]:
    """The nodes under `node` (itself included) whose type is one of `types` (named types), in
    source order (an enclosing node before what it encloses). Found by a tree-sitter query, in C:
    a walk in Python costs a few microseconds for every node of the tree (a file of 800,000 tokens
    has ~2.4 million), this one only for the nodes it returns."""
    return sorted(_captured(tuple(sorted(set(types))), node), key=lambda n: (n.start_byte, -n.end_byte))


def of_type(node: Node, types: Iterable[str]) -> Iterator[Node]:
    """The nodes under `node` (itself included) whose type is one of `types`, in source order."""
    wanted = set(types)
    return (n for n in walk(node) if n.type in wanted)


def field(node: Node, name: str) -> Node:
    """A child the grammar always gives this node (a binary expression's `operator`): typed as
    present, and an AttributeError where a broken tree lacks it, as reading it unchecked was."""
    child = node.child_by_field_name(name)
    if child is None:
        raise AttributeError(f"{node.type} has no {name!r}")
    return child


def text(node: Node | None) -> str:
    """The node's source text ('' for no node); invalid UTF-8 is replaced, never raised."""
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text is not None else ""


IDENT_TYPES = {"identifier", "type_identifier", "namespace_identifier"}
WORD = re.compile(r"[A-Za-z_]\w*")  # lexing an opaque macro body; C++ structure comes from the tree


def identifiers(node: Node, data: bytes | None = None) -> set[str]:
    """The names under `node`, those in an opaque macro body too (lexed: it has no tree). Found by
    a query (`nodes_of`): a walk of every node in Python made this a third of a large file's model.
    `data`: the bytes the tree was parsed from, to slice names from (a node's own text is read back
    through the parse's source, a Python call per node)."""
    found = _captured((*sorted(IDENT_TYPES), "preproc_arg"), node)

    def of(n: Node) -> str:
        return data[n.start_byte:n.end_byte].decode("utf-8", errors="replace") if data is not None else text(n)
    out = {of(n) for n in found if n.type != "preproc_arg"}
    for n in found:
        if n.type == "preproc_arg":
            out.update(WORD.findall(of(n)))
    return out


def specifiers(fn: Node) -> set[str]:
    """CUDA execution-space and storage specifiers written on a definition/declaration."""
    out: set[str] = set()
    for c in fn.children:
        t = text(c)
        if c.type in ("__global__", "__device__", "__host__", "__forceinline__", "__noinline__"):
            out.add(c.type)
        elif c.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier",
                        "attribute_declaration", "ms_declspec_modifier"):
            out.update(t.split())
        elif not c.is_named and t.startswith("__") and t.endswith("__"):
            out.add(t)
    return out


def declarator_name(decl: Node | None) -> tuple[str | None, Node | None]:
    """The declared name (and its node) inside a possibly nested declarator."""
    while decl is not None:
        if decl.type in ("identifier", "field_identifier", "type_identifier", "operator_name",
                         "destructor_name"):
            return text(decl), decl
        if decl.type == "qualified_identifier":
            name = decl.child_by_field_name("name")
            return text(decl), name
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            for c in decl.named_children:
                if c.type in ("identifier", "qualified_identifier", "field_identifier",
                              "function_declarator", "pointer_declarator", "reference_declarator",
                              "array_declarator", "init_declarator"):
                    nxt = c
                    break
        decl = nxt
    return None, None


def function_declarator(decl: Node | None) -> Node | None:
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    return decl
