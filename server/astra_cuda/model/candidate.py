"""One version of the file an optimization works on, read once where it is made.

A rewrite makes a new whole file text; `Candidate.of` parses it (the tree-sitter tree and the
source model built from it: one parse) and loads the spec above the kernel (one load). The
planner, the coder, the round, the best and the evaluation then read that value instead of the
text again: a transformation walks `tree`, adoption takes `spec` (the launch may have changed
with the rewrite), the caller resolves the launch the worker runs it with (`launch`).
Immutable; may be shared between threads (nothing here mutates the tree).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node, Tree

from . import source
from . import spec as spec_mod
from ..errors import AstraError
from .spec import Spec


@dataclass(frozen=True, eq=False)
class Candidate:
    text: str                                  # the whole file
    kernel: str                                # the kernel being optimized
    model: source.SourceModel = field(repr=False)
    tree: Tree = field(repr=False)             # the text as written, parsed (what transformations walk)
    spec: Spec | None = field(repr=False)      # the file's own spec above the kernel, loaded (None: none, or it
    spec_error: str = ""                       # does not load, and then why)

    @classmethod
    def of(cls, text: str, kernel: str) -> Candidate:
        tree = source.parser().parse(text.encode("utf-8"))
        model, _ = source.parse_with_tree(text, tree=tree)   # parses again only to blank attribute macros
        spec, error = own_spec(model, kernel)
        return cls(text, kernel, model, tree, spec, error)

    @property
    def root(self) -> Node:
        return self.tree.root_node



def own_spec(m: source.SourceModel, kernel: str) -> tuple[Spec | None, str]:
    """(the loaded spec above `kernel` in `m` or None, '' or why it does not load)."""
    k = m.kernel(kernel)
    if k is None or k.spec is None:
        return None, ""
    try:
        return spec_mod.load(k, m), ""
    except spec_mod.SpecErrors as e:
        return None, e.diagnostics[0].message
    except AstraError as e:
        return None, e.message


__all__ = ["Candidate", "own_spec"]
