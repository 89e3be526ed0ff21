"""The source model: what is in a `.cu` file, read with tree-sitter-cuda.

`parse(text)` finds every `__global__` kernel (name, template parameters, parameters,
launch bounds, spec comment, exact ranges), every `<<<...>>>` launch site, and the top-level
items (device functions, types, constants, macros, includes) with the identifiers each one
uses — what `astra_cuda.compile.extract` needs to cut a stand-alone compilation unit.

Positions are 0-based lines and character columns (LSP's convention for ASCII text).

The model's parts: its values (`file_model`, whose names this module gives too, as every caller
reads them here), the one pass that builds it (`source_builder`), the launch's dim3 variables
(`dim3`), the file's macros (`macros`) and the parser with the tree helpers every reader shares
(`syntax`: `source.parser()` is its parser).
"""
from __future__ import annotations

from tree_sitter import Tree

from . import parse_time
from .file_model import (SPEC_MARK, ConfigVar, Guard, Item, Kernel, LaunchSite, Param, Positions, SourceModel,
                         Span, SpecComment)
from .macros import MAX_EXPANSION, MAX_MACRO_NESTING, attribute_macros
from .source_builder import DEVICE_NAMESPACES, MAX_BLOCKS, Builder
from .syntax import language, parse_expression, parser

__all__ = ["DEVICE_NAMESPACES", "MAX_BLOCKS", "MAX_EXPANSION", "MAX_MACRO_NESTING", "SPEC_MARK", "ConfigVar", "Guard",
           "Item", "Kernel", "LaunchSite", "Param", "Positions", "SourceModel", "Span", "SpecComment", "language",
           "parse", "parse_expression", "parse_with_tree", "parser", "placed"]


def parse(text: str, path: str | None = None) -> SourceModel:
    """Build the source model of a CUDA source text. Never raises on malformed code: syntax
    problems are listed in `syntax_errors` and the rest of the file is still modelled; only a text
    tree-sitter reads too slowly is refused (`parse_time.TooSlowToParse`, at the line it stopped),
    or one whose tree is larger than Astra walks (`parse_time.TooManyNodes`, before any walk).
    `path` is recorded on the items (for a header read into another file's unit)."""
    return parse_with_tree(text, path)[0]


def parse_with_tree(text: str, path: str | None = None, tree: Tree | None = None,
                    max_tokens: int | None = None) -> tuple[SourceModel, Tree]:
    """The source model and the tree-sitter tree it was built from, for checks that walk the
    tree themselves (one parse for both). `tree`: the text's own parse, when the caller has it;
    `max_tokens`: the text's token bound (`parse_time.Parser.parse`: a file's by default)."""
    data = text.encode("utf-8")
    with parse_time.reading(path or "the file"):   # its parses and its macros' and launches' share one limit
        try:
            tree = tree or parser().parse(data, max_tokens=max_tokens)
        except parse_time.TooSlowToParse as e:
            raise placed(e, data) from None
        masks = attribute_macros(tree.root_node, data) if tree.root_node.has_error else []
        if masks:
            buf = bytearray(data)
            for a, b in masks:
                buf[a:b] = bytes(c if c == 0x0A else 0x20 for c in buf[a:b])
            data = bytes(buf)
            tree = parser().parse(data, max_tokens=max_tokens)
        return Builder(text, path).run(tree.root_node, data), tree


def placed(e: parse_time.TooSlowToParse, data: bytes) -> parse_time.TooSlowToParse:
    """`e`, refusing the file's own parse of `data`, at its line: where tree-sitter was stopped,
    or the file's start for a tree with too many nodes (the whole file)."""
    if isinstance(e, parse_time.TooManyNodes):
        e.line = 0
    else:
        e.line = data.count(b"\n", 0, e.offset) if e.offset is not None else None
    return e
