"""Text Astra did not write, shown as data: what a kernel printed, what a compiler reported, what
a model replied. Such text reaches the editor's hover, the report page and the terminal inside
Markdown (or rich's markup), where `![x](https://host/?data)` would fetch a remote image,
`[run](command:astra.optimize?...)` would start a command and an escape sequence would drive the
terminal. Wherever Astra embeds such text in Markdown it goes through `md` (or `code`, for a piece
of the user's source shown as code), in a terminal through `printable`; links, images and
`command:` URIs then come only from Astra's own strings.
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


def code(text: object) -> str:
    """`text` as one Markdown code span that nothing in it can close: fenced by one backtick more
    than its longest run of backticks (a code span's content is never Markdown), padded with a
    space where it starts or ends with a backtick or a space (CommonMark strips one of each), line
    breaks made spaces, controls replaced. For source text, e.g. a parameter's type, which may
    hold a comment: `float /* `![x](https://host/?d) */ *` closed a plain `...` span early."""
    t = printable(str(text)).replace("\r", " ").replace("\n", " ")
    if not t:
        return ""
    fence = "`" * (max((len(r) for r in re.findall("`+", t)), default=0) + 1)
    pad = " " if t[0] in "` " or t[-1] in "` " else ""
    return f"{fence}{pad}{t}{pad}{fence}"
