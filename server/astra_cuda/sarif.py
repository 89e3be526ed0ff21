"""SARIF 2.1.0 for CI code scanning (`astra check --format sarif`): compile and spec diagnostics and
failed checks as results at their places in the file. Pure: plain data in, a JSON-ready dict out.

Lines and columns in SARIF are 1-based and `endColumn` is exclusive (Astra's diagnostics are
0-based with an exclusive end, so both move by one).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from urllib.parse import quote

from . import __version__

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}

# What each kind of finding means, for the rule list code scanning shows beside a result.
RULES = {
    "compile": "The kernel does not compile (NVRTC, device code only).",
    "parse": "Astra's parser could not read this part of the file.",
    "spec": "The harness spec (the /* @astra ... */ comment) has an error.",
    "unit": "Something about how the kernel's compilation unit was cut (a header not found, ...).",
    "check": "The kernel failed a check of the verification gate against its reference.",
}


@dataclass(frozen=True)
class Finding:
    """One result: `rule` is a key of RULES or 'check/<gate check>'; lines and columns 0-based."""

    rule: str
    level: str          # 'error' | 'warning' | 'info'
    message: str
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None


def from_diagnostic(d) -> Finding:
    """A `diagnostics.Diagnostic` as a finding."""
    return Finding(d.code or "compile", d.severity, d.message, d.line, d.col, d.end_line, d.end_col)


def log(path: str, findings: list[Finding], *, root: str | None = None) -> dict:
    """The SARIF log of one run over `path` (named relative to `root`, the repository, when given)."""
    rules: list[str] = []
    results = []
    for f in findings:
        if f.rule not in rules:
            rules.append(f.rule)
        end_line = f.line if f.end_line is None else f.end_line
        end_col = f.col + 1 if f.end_col is None else max(f.end_col, f.col + 1)
        results.append({
            "ruleId": f.rule, "ruleIndex": rules.index(f.rule), "level": LEVELS.get(f.level, "note"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(path, root)},
                "region": {"startLine": f.line + 1, "startColumn": f.col + 1,
                           "endLine": end_line + 1, "endColumn": end_col + 1}}}],
        })
    return {
        "$schema": SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "Astra", "version": __version__, "semanticVersion": __version__,
                "rules": [{"id": r, "shortDescription": {"text": RULES.get(r.split("/")[0], r)}} for r in rules],
            }},
            "results": results,
        }],
    }


def _uri(path: str, root: str | None) -> str:
    p = PurePath(path)
    if root is not None:
        try:
            p = p.relative_to(root)
        except ValueError:
            pass
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())
