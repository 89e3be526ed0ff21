"""Conversions between the core's 0-based spans and LSP types, and text slicing by span.

The core reports columns in characters; LSP counts UTF-16 code units. They agree for the
ASCII that CUDA sources are in practice; non-BMP characters would shift columns on their line.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from lsprotocol import types

import re

from astra_cuda import contract
from astra_cuda.model import textedit

if TYPE_CHECKING:
    from astra_cuda.model import source
    from astra_cuda.diagnostics import Diagnostic

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


class EditorSpan(NamedTuple):
    """A range as the editor counts it: lines and characters of one document version (the core's
    `source.Span` also carries byte offsets into the parsed text)."""
    start_line: int
    start_col: int
    end_line: int
    end_col: int

    def contains_line(self, line: int) -> bool:
        return self.start_line <= line <= self.end_line


def span_of(r: source.Span) -> EditorSpan:
    """The editor's span of a range in the core's source model (characters, 0-based)."""
    return EditorSpan(r.start_line, r.start_col, r.end_line, r.end_col)


def lsp_range(s: EditorSpan) -> types.Range:
    return types.Range(start=types.Position(line=s.start_line, character=s.start_col),
                       end=types.Position(line=s.end_line, character=s.end_col))


def line_range(line: int, lines: list[str]) -> types.Range:
    """The non-blank part of one line (a whole-line squiggle looks wrong on indentation)."""
    text = lines[line] if 0 <= line < len(lines) else ""
    start = len(text) - len(text.lstrip())
    return types.Range(start=types.Position(line=line, character=start),
                       end=types.Position(line=line, character=max(len(text.rstrip()), start + 1)))


def text_in(text: str, s: EditorSpan) -> str:
    return text[textedit.offset(text, s.start_line, s.start_col):textedit.offset(text, s.end_line, s.end_col)]


def code_description(code: str | None) -> types.CodeDescription | None:
    """The link behind a diagnostic's code: its section of docs/diagnostics.md (a compiler's
    numbered message, `nvrtc-20`, links to `compile`)."""
    if not code:
        return None
    anchor = "compile" if re.fullmatch(r"[a-z]+-\d+", code) else code
    return types.CodeDescription(href=f"{contract.DIAGNOSTICS_DOCS}#{anchor}")


def diagnostic(rng: types.Range, message: str, code: str, severity: types.DiagnosticSeverity, *,
               source: str = "astra", fix: str = "") -> types.Diagnostic:
    """An LSP diagnostic with its code's documentation link; `fix`: what the range should read
    (the quick fix "Change to …")."""
    return types.Diagnostic(range=rng, message=message, severity=severity, code=code or None, source=source,
                            code_description=code_description(code), data={"fix": fix} if fix else None)


def lsp_diagnostic(d: Diagnostic, lines: list[str] | None = None) -> types.Diagnostic:
    """An `astra_cuda.diagnostics.Diagnostic` as an LSP diagnostic."""
    rng = types.Range(start=types.Position(line=d.line, character=d.col),
                      end=types.Position(line=d.end_line, character=d.end_col))
    if (d.end_line, d.end_col) <= (d.line, d.col) and lines is not None:
        rng = line_range(d.line, lines)  # a point diagnostic: underline its line
    return diagnostic(rng, d.message, d.code, _SEVERITY.get(d.severity, types.DiagnosticSeverity.Error),
                      source=d.source or "astra", fix=d.fix)
