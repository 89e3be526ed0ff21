"""Where an optimized kernel may be written back, after the user kept editing.

The rewrite replaces the kernel's range as it was when the optimization started. If the
document changed since, the edit is re-anchored on the kernel's current range only when the
kernel's own text is unchanged; otherwise it is declined, so nothing the user typed is lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from astra.lsp.convert import Span, span_of, text_in


@dataclass(frozen=True)
class Anchor:
    version: int       # document version the work started from
    span: Span         # the kernel's range in that version
    kernel_text: str   # the kernel's text in that version


@dataclass(frozen=True)
class Placement:
    span: Span | None
    how: str  # 'unchanged' | 're-anchored' | 'declined'
    reason: str = ""


def find(kernels: Sequence[Any], name: str) -> Any | None:
    return next((k for k in kernels if k.name == name), None)


def anchor_for(kernel: Any, version: int, text: str) -> Anchor:
    span = span_of(kernel.range)
    return Anchor(version, span, text_in(text, span))


def place(anchor: Anchor, name: str, version: int, text: str, kernels: Sequence[Any]) -> Placement:
    if version == anchor.version:
        return Placement(anchor.span, "unchanged")
    now = find(kernels, name)
    if now is None:
        return Placement(None, "declined", f"kernel `{name}` is no longer in the file")
    span = span_of(now.range)
    if text_in(text, span) != anchor.kernel_text:
        return Placement(None, "declined",
                         f"kernel `{name}` was edited after the optimization started; "
                         "run Optimize kernel again to optimize the current version")
    return Placement(span, "re-anchored")
