"""Tree-sitter helpers every reader of CUDA source shares: walking a tree, the nodes of some
types, a node's text. (The parser and the source model are `astra_cuda.model.source`.)"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from tree_sitter import Node


def walk(node: Node) -> Iterator[Node]:
    """`node` and everything below it, in source order (depth first)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def of_type(node: Node, types: Iterable[str]) -> Iterator[Node]:
    """The nodes under `node` (itself included) whose type is one of `types`, in source order."""
    wanted = set(types)
    return (n for n in walk(node) if n.type in wanted)


def text(node: Node | None) -> str:
    """The node's source text ('' for no node); invalid UTF-8 is replaced, never raised."""
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text is not None else ""
