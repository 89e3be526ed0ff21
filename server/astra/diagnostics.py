"""A diagnostic: something to tell the user at a place in their file.

Lines and columns are 0-based (as in LSP); the CLI prints them 1-based.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Diagnostic:
    line: int
    col: int
    end_line: int
    end_col: int
    severity: str  # 'error' | 'warning' | 'info'
    message: str
    code: str = ""  # e.g. 'compile', 'spec', 'check', 'race'
    source: str = "astra"

    def to_json(self) -> dict:
        return asdict(self)

    def human(self, path: str = "") -> str:
        where = f"{path}:{self.line + 1}:{self.col + 1}" if path else f"{self.line + 1}:{self.col + 1}"
        return f"{where}: {self.severity}: {self.message}"
