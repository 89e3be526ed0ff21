"""Where verified work may be written back, after the user kept editing.

An optimization verifies a whole file (`best`) made from the file as it was (`original`). The
rewrite replaces the smallest run of whole lines that covers every difference and the kernel
itself (helpers above the kernel may change too). If the document changed since, the rewrite
is re-anchored where that exact original text now is, when it is there exactly once; otherwise
it is declined. So the code written is always the code that was verified, and nothing the user
typed is lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from astra_cuda.model import textedit
from astra_cuda.lsp.convert import EditorSpan, span_of, text_in

if TYPE_CHECKING:
    from astra_cuda.snapshot import KernelInfo


@dataclass(frozen=True)
class Anchor:
    version: int       # document version the work started from
    span: EditorSpan         # the kernel's range in that version
    kernel_text: str   # the kernel's text in that version


@dataclass(frozen=True)
class Replacement:
    """The edit that applying an optimization's result makes (not an offline `Rewrite`)."""
    version: int   # document version the optimization started from
    span: EditorSpan     # the replaced region in that version
    old: str       # the region's text then
    new: str       # its verified replacement

    def applied(self, text: str) -> bool:
        return self.new != self.old and self.new in text and self.old not in text


@dataclass(frozen=True)
class Placement:
    span: EditorSpan | None
    how: str  # 'unchanged' | 're-anchored' | 'declined'
    reason: str = ""


def find(kernels: Sequence[KernelInfo], name: str) -> KernelInfo | None:
    return next((k for k in kernels if k.name == name), None)


def anchor_for(kernel: KernelInfo, version: int, text: str) -> Anchor:
    span = span_of(kernel.kernel.span)
    return Anchor(version, span, text_in(text, span))


def _span(text: str, start: int, end: int) -> EditorSpan:
    return EditorSpan(*textedit.position(text, start), *textedit.position(text, end))


def rewrite_for(original: str, best: str, kernel_span: EditorSpan, version: int) -> Replacement:
    """The region of `original` to replace by the matching part of `best`."""
    p, s = textedit.common_affixes(original, best)
    start = min(p, textedit.offset(original, kernel_span.start_line, kernel_span.start_col))
    end = max(len(original) - s, textedit.offset(original, kernel_span.end_line, kernel_span.end_col))
    start = textedit.line_start(original, start)        # whole lines: a readable diff
    nl = original.find("\n", end)
    end = len(original) if nl < 0 else nl + 1
    tail = len(original) - end
    return Replacement(version, _span(original, start, end), original[start:end], best[start:len(best) - tail])


def place(rw: Replacement, version: int, text: str) -> Placement:
    if version == rw.version:
        return Placement(rw.span, "unchanged")
    at = text.find(rw.old)
    if at < 0:
        return Placement(None, "declined", "the code this rewrite replaces was edited after the optimization "
                                           "started; run Optimize kernel again to optimize the current version")
    if text.find(rw.old, at + 1) >= 0:
        return Placement(None, "declined", "the code this rewrite replaces now appears more than once; "
                                           "run Optimize kernel again")
    return Placement(_span(text, at, at + len(rw.old)), "re-anchored")
