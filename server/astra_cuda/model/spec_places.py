"""Where each key and value of a spec comment is in the file (`tomlpos`, indexed once), so a
diagnostic lands on the key or value it is about; a spec diagnostic there; and the closest known
word for a misspelt one."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from . import tomlpos
from ..diagnostics import Diagnostic
from .source import Kernel


class Locator:
    """Where each key and value of the comment is (`tomlpos`, indexed once): a diagnostic lands
    on the key or value it is about; what has no place of its own lands on the marker."""

    def __init__(self, kernel: Kernel):
        c = kernel.spec
        assert c is not None
        self.first_line = c.body_first_line
        self.first_col = c.body_first_col
        self.lines = c.body.split("\n")
        self.comment_span = c.span
        self._body = c.body
        self._places: dict[tuple[str, ...], tomlpos.Place] | None = None

    def _pos(self, i: int, col: int) -> tuple[int, int]:
        return self.first_line + i, (self.first_col + col if i == 0 else col)

    def place(self, path: tuple[str, ...], value: bool = False) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) in the file of the key at `path` (its value with
        `value`; a table: its header), else of the comment's start."""
        if self._places is None:
            self._places = tomlpos.index(self._body)
        found = self._places.get(path)
        span = (found.value or found.key) if found is not None and value else (found.key if found else None)
        if span is None:
            s = self.comment_span
            return s.start_line, s.start_col, s.start_line, s.start_col + 2
        line, col = self._pos(span[0], span[1])
        end_line, end_col = self._pos(span[2], span[3])
        return line, col, end_line, end_col

    def key(self, key: str, section: str | None = None) -> tuple[int, int, int]:
        """(line, col, end_col) of `key = ...` inside `[section]` (None = top level)."""
        line, col, end_line, end_col = self.place((key,) if section is None else (section, key))
        return line, col, end_col if end_line == line else col + len(key)

    def at(self, line_in_body: int, col: int) -> tuple[int, int]:
        return self._pos(line_in_body, col)


def diag(line: int, col: int, end_col: int, message: str, *, end_line: int | None = None, fix: str = "") -> Diagnostic:
    end_line = line if end_line is None else end_line
    if end_line == line:
        end_col = max(end_col, col + 1)
    return Diagnostic(line, col, end_line, end_col, "error", message, code="spec", fix=fix)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """The closest known word (difflib), or ''."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else ""
