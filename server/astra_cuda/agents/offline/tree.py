"""Tree-sitter helpers for source-to-source rewriting: find nodes, read their text, and apply
byte-range edits. Every rewrite is a list of (start_byte, end_byte, replacement) edits on the
original text; nothing is matched with regular expressions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from tree_sitter import Node

from ...model import source, syntax


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str


def apply_edits(text: str, edits: list[Edit]) -> str:
    data = text.encode("utf-8")
    out = []
    pos = 0
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        if e.start < pos:
            raise ValueError("overlapping edits")
        out.append(data[pos:e.start])
        out.append(e.text.encode("utf-8"))
        pos = e.end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")


txt = syntax.text  # the shared tree-sitter helpers, under the names the transformations use
walk = syntax.walk


def root(text: str) -> Node:
    return source.parser().parse(text.encode("utf-8")).root_node


def _fn_name(fn: Node) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    if d is None:
        return None
    name = d.child_by_field_name("declarator")
    if name is not None and name.type == "qualified_identifier":
        name = name.child_by_field_name("name")
    return txt(name)


def functions(root_node: Node) -> Iterator[Node]:
    """Every function_definition in the file (inside namespaces, templates, extern "C")."""
    for n in walk(root_node):
        if n.type == "function_definition":
            yield n


def is_kernel(fn: Node) -> bool:
    return any(c.type == "__global__" for c in fn.children)


def find_function(root_node: Node, name: str) -> Node | None:
    short = name.split("::")[-1]
    return next((f for f in functions(root_node) if _fn_name(f) == short), None)


def function_name(fn: Node) -> str | None:
    return _fn_name(fn)


def params(fn: Node) -> list[Node]:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    plist = d.child_by_field_name("parameters") if d is not None else None
    return [p for p in plist.named_children if p.type == "parameter_declaration"] if plist is not None else []


def declared_name(decl: Node | None) -> tuple[str | None, bool]:
    """(name, is_pointer) of a parameter/variable declarator."""
    pointer = False
    while decl is not None:
        if decl.type == "identifier":
            return txt(decl), pointer
        if decl.type in ("pointer_declarator", "array_declarator"):
            pointer = True
        if decl.type == "init_declarator":
            decl = decl.child_by_field_name("declarator")
            continue
        decl = decl.child_by_field_name("declarator")
    return None, pointer


def idents(node: Node) -> set[str]:
    return {txt(n) for n in walk(node) if n.type == "identifier"}


def calls(node: Node) -> Iterator[Node]:
    for n in walk(node):
        if n.type == "call_expression":
            yield n


def callee(call: Node) -> str:
    f = call.child_by_field_name("function")
    if f is not None and f.type == "template_function":
        f = f.child_by_field_name("name")
    return txt(f)


def line_indent(text_bytes: bytes, byte: int) -> str:
    start = text_bytes.rfind(b"\n", 0, byte) + 1
    line = text_bytes[start:byte]
    return line[: len(line) - len(line.lstrip())].decode()


def preceded_by_marker(node: Node, marker: str = "astra:") -> bool:
    """True when the statement right before `node` is a comment carrying `marker` (generated code
    is tagged so later rewrites leave it alone)."""
    prev = node.prev_sibling
    return prev is not None and prev.type == "comment" and marker in txt(prev)


def is_lvalue(node: Node) -> bool:
    """The node is written: left of an assignment, operand of ++/--, or its address taken."""
    p = node.parent
    while p is not None and p.type == "parenthesized_expression":
        node, p = p, p.parent
    if p is None:
        return False
    if p.type == "assignment_expression" and p.child_by_field_name("left") == node:
        return True
    if p.type == "update_expression":
        return True
    if p.type == "pointer_expression" and txt(p.child(0)) == "&":
        return True
    return False


def assigned_names(node: Node) -> set[str]:
    """Identifiers assigned or updated anywhere inside `node` (plain variables only)."""
    out = set()
    for n in walk(node):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                out.add(txt(left))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                out.add(txt(arg))
    return out


def declared_names(node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                name, _ = declared_name(d)
                if name:
                    out.add(name)
    return out


def unparenthesized(n: Node) -> Node:
    """The expression inside any parentheses around it (a comment beside it is not it)."""
    while n.type == "parenthesized_expression":
        inner = [c for c in n.named_children if c.type != "comment"]
        if len(inner) != 1:
            break
        n = inner[0]
    return n


def squashed(n: Node | None) -> str:
    """The expression's tokens without spaces (leaves of the tree, so comments drop out)."""
    if n is None:
        return ""
    return "".join(txt(c) for c in walk(n) if c.child_count == 0 and c.type != "comment")
