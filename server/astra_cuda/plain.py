"""Text Astra did not write, shown as data: what a kernel printed, what a compiler reported, what
a model replied. Such text reaches the editor's hover, the report page and the terminal inside
Markdown (or rich's markup), where `![x](https://host/?data)` would fetch a remote image,
`[run](command:astra.optimize?...)` would start a command and an escape sequence would drive the
terminal. Wherever Astra embeds such text in Markdown it goes through `md`, in a terminal
through `printable`; links, images and `command:` URIs then come only from Astra's own strings.
"""
from __future__ import annotations

import re

# C0 and C1 controls but tab and newline, DEL, and the bidirectional overrides and isolates
# (which reorder what a reader sees).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# CommonMark lets a backslash escape any ASCII punctuation: escaping all of it leaves no syntax.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def printable(text: str) -> str:
    """`text` with control characters (escape sequences, bidi overrides) made harmless: U+FFFD."""
    return _CONTROLS.sub("\ufffd", text)


def md(text: object) -> str:
    """`text` as literal Markdown: every ASCII punctuation character escaped (no link, image,
    emphasis, HTML or code span can start), line breaks kept, controls replaced."""
    return _PUNCTUATION.sub(r"\\\1", printable(str(text)))
