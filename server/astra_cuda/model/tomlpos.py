"""Where each key and value of a TOML text is: tomlkit keeps every piece of the text as written
(keys, values, whitespace, comments) in document order, so walking its tree while consuming the
text from left to right gives exact positions — the spec's diagnostics, hovers and completions
point at the key or value itself, not at the comment.

Paths are tuples of keys: ("grid",), ("sizes", "n"), ("args", "out", "type"); a table's own path
(("sizes",)) spans its `[sizes]` header. Positions are 0-based (line, column) in the text.
Anything tomlkit cannot read, or a piece not found where expected, leaves the index partial,
never wrong.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Path = tuple[str, ...]


@dataclass(frozen=True)
class Place:
    key: tuple[int, int, int, int]              # (line, col, end_line, end_col) of the key (a table: its header)
    value: tuple[int, int, int, int] | None     # of the value (None for a table)


def _line_col(starts: list[int], offset: int) -> tuple[int, int]:
    lo, hi = 0, len(starts) - 1
    while lo < hi:   # the last line start at or before offset
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo, offset - starts[lo]


class _Walk:
    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.places: dict[Path, Place] = {}

    def span(self, start: int, end: int) -> tuple[int, int, int, int]:
        return (*_line_col(self.starts, start), *_line_col(self.starts, end))

    def skip(self, cursor: int) -> int:
        """Past blanks, separators and comments."""
        text, n = self.text, len(self.text)
        while cursor < n:
            if text[cursor] in " \t\r\n,=":
                cursor += 1
            elif text[cursor] == "#":
                end = text.find("\n", cursor)
                cursor = n if end < 0 else end
            else:
                break
        return cursor

    def find(self, piece: str, cursor: int) -> int:
        """Where `piece` starts after `cursor` and only blanks, separators or comments (else -1:
        the walk lost its way and stops)."""
        if not piece.strip():
            return cursor
        at = self.skip(cursor)
        return at if self.text.startswith(piece.strip(), at) else -1

    def body(self, items: list[Any], cursor: int, path: Path) -> int:
        from tomlkit import items as ti
        for key, item in items:
            if cursor < 0:
                return -1
            if key is None:   # whitespace, a comment, a separator: `find` steps over them
                continue
            if isinstance(item, ti.Table):
                cursor = self.table(key, item, cursor, path)
            elif isinstance(item, ti.AoT):
                return -1   # [[arrays of tables]] are not part of the spec format
            else:
                cursor = self.pair(key, item, cursor, path)
        return cursor

    def table(self, key: Any, table: Any, cursor: int, path: Path) -> int:   # tomlkit's Key and Table
        name = key.as_string().strip()
        sub = (*path, key.key)
        if table.is_super_table():   # [args.out] makes an implicit [args]; so does a dotted key `p.out = …`
            dotted = re.compile(re.escape(name) + r"[ \t]*\.[ \t]*").match(self.text, self.skip(cursor))
            if dotted is not None:
                at = self.skip(cursor)
                self.places.setdefault(sub, Place(self.span(at, at + len(name)), None))
                cursor = dotted.end()
            return self.body(table.value.body, cursor, sub)
        header = re.compile(r"\[\s*" + re.escape(".".join([*path, name]) if path else name) + r"\s*\]")
        m = header.match(self.text, self.skip(cursor))
        if m is None:
            return -1
        self.places[sub] = Place(self.span(m.start(), m.end()), None)
        return self.body(table.value.body, m.end(), sub)

    def pair(self, key: Any, item: Any, cursor: int, path: Path) -> int:
        from tomlkit import items as ti
        name = key.as_string().strip()
        at = self.find(name, cursor)
        if at < 0:
            return -1
        piece = item.as_string()
        value_at = self.find(piece, at + len(name))
        if value_at < 0:
            return -1
        sub = (*path, key.key)
        self.places[sub] = Place(self.span(at, at + len(name)), self.span(value_at, value_at + len(piece)))
        if isinstance(item, ti.InlineTable):
            self.body(item.value.body, value_at + 1, sub)
        elif isinstance(item, ti.Array):
            inner = value_at + 1
            for i, element in enumerate(item):
                text = element.as_string()
                e_at = self.find(text, inner)
                if e_at < 0 or e_at >= value_at + len(piece):
                    break
                self.places[(*sub, str(i))] = Place(self.span(e_at, e_at + len(text)), self.span(e_at, e_at + len(text)))
                inner = e_at + len(text)
        return value_at + len(piece)


def index(text: str) -> dict[Path, Place]:
    """Every key's and value's place in `text` (partial where tomlkit cannot read it)."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError
    try:
        doc = tomlkit.parse(text)
    except (TOMLKitError, ValueError, RecursionError):
        return {}
    walk = _Walk(text)
    walk.body(doc.body, 0, ())
    return walk.places
