"""Text positions and edits, in one place: (line, character) <-> offset in a text, the smallest
region in which two versions of a text differ, and byte-range replacement (what splicing a
kernel into a file does: `extract.replace_kernel`, `extract.splice`). Used by the optimize
result's edit (`agents.result`) and by the editor's re-anchoring (`lsp.anchor`, `lsp.convert`). Pure."""
from __future__ import annotations

from typing import Iterable


def offset(text: str, line: int, col: int) -> int:
    """The offset of 0-based (line, character) in `text`, clamped to the text."""
    pos = 0
    for _ in range(line):
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        pos = nl + 1
    return min(pos + col, len(text))


def position(text: str, at: int) -> tuple[int, int]:
    """The 0-based (line, character) of offset `at` in `text`."""
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


def common_affixes(a: str, b: str) -> tuple[int, int]:
    """(prefix, suffix): the lengths of the longest common prefix and then of the longest common
    suffix that does not overlap it, so a[prefix:len(a) - suffix] is all that differs."""
    limit = min(len(a), len(b))
    p = 0
    while p < limit and a[p] == b[p]:
        p += 1
    s = 0
    while s < limit - p and a[-1 - s] == b[-1 - s]:
        s += 1
    return p, s


def line_start(text: str, at: int) -> int:
    """The offset where the line holding `at` starts."""
    return text.rfind("\n", 0, at) + 1


def replace_bytes(text: str, edits: Iterable[tuple[int, int, str]]) -> str | None:
    """`text` with each (start, end, new text) applied: UTF-8 byte offsets, as the parser gives
    them. None where two edits overlap."""
    data = text.encode("utf-8")
    out, pos = [], 0
    for start, end, new in sorted(edits, key=lambda e: e[0]):
        if start < pos:
            return None
        out += [data[pos:start], new.encode("utf-8")]
        pos = end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")
