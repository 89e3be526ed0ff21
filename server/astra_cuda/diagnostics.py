"""A diagnostic: something to tell the user at a place in their file.

Lines and columns are 0-based (as in LSP); everything a user reads — the CLI's text, its JSON
(`to_json`) and SARIF — counts them from 1, as compilers do.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
    fix: str = ""   # what the range should read instead (a "did you mean" an editor can apply)

    def to_json(self) -> dict[str, Any]:
        """1-based lines and columns (the end column exclusive, as in the 0-based fields)."""
        d = asdict(self)
        for k in ("line", "col", "end_line", "end_col"):
            d[k] += 1
        return d

    def human(self, path: str = "") -> str:
        where = f"{path}:{self.line + 1}:{self.col + 1}" if path else f"{self.line + 1}:{self.col + 1}"
        return f"{where}: {self.severity}: {self.message}"
