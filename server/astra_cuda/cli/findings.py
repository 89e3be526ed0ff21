"""What a run found, one finding per defect, in the forms CI reads: compiler-style lines
(`file:line:col: severity: message [code]`, what `$gcc` problem matchers and annotators parse) and
the results of a SARIF log (`astra_cuda.cli.sarif`). Pure: diagnostics and verdicts in, findings out.

A gate failure is one defect however many cases show it: failures of one kernel, check, output
and line are grouped, with the number of cases and the first one's inputs and seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..diagnostics import Diagnostic
    from ..gate.verdict import Failure, Verdict


@dataclass(frozen=True)
class Finding:
    """One defect: `rule` is 'compile', 'spec', …, or 'check/<gate check>'; lines and columns 0-based."""

    rule: str
    level: str          # 'error' | 'warning' | 'info'
    message: str
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None
    kernel: str = ""
    seed: int | None = None      # the gate's input seed: `--seed` replays it
    cases: int = 1               # cases that showed this defect
    key: str = ""                # what names the defect within its rule and kernel ('' : the message)

    @property
    def identity(self) -> str:
        """What stays the same when the same defect is found again (for SARIF fingerprints): not
        the line (code above it moves) nor the numbers of one run (errors, indices, seeds)."""
        return "\x1f".join((self.rule, self.kernel, self.key or self.message))

    def line_text(self, path: str) -> str:
        severity = {"info": "note"}.get(self.level, self.level)
        return f"{path}:{self.line + 1}:{self.col + 1}: {severity}: {self.message} [{self.rule}]"


def from_diagnostic(d: Diagnostic) -> Finding:
    """A `diagnostics.Diagnostic` as a finding."""
    return Finding(d.code or "compile", d.severity, d.message, d.line, d.col, d.end_line, d.end_col)


def from_verdict(v: Verdict, at: tuple[int, int], replay: str = "") -> list[Finding]:
    """A failed verdict's defects: its failures grouped by check, output and line (at that line
    when known, else `at`, the kernel's name). `replay` is the command that reruns it; the seed
    is appended."""
    if v.passed:
        return []
    level = "warning" if v.status == "unsupported" else "error"
    seed = f" (seed {v.nonce}; replay: {replay} --seed {v.nonce})" if replay and v.nonce else \
        (f" (seed {v.nonce})" if v.nonce else "")
    if not v.failures:
        return [Finding("check", level, f"{v.summary}{seed}", at[0], at[1], kernel=v.kernel, seed=v.nonce or None,
                        key=v.status)]
    groups: dict[tuple[str, str | None, int | None], list[Failure]] = {}
    for f in v.failures:
        groups.setdefault((f.check, f.output, f.line), []).append(f)
    out = []
    for (check, _output, line), fs in groups.items():
        first = fs[0]
        more = f"; {len(fs)} cases" if len(fs) > 1 else ""
        where = f" [{first.case.describe()}{more}]" if first.case else (f" [{len(fs)} cases]" if more else "")
        fl, fc = ((line - 1), 0) if line else at
        out.append(Finding(f"check/{check}", level, f"{v.kernel}: {first.message}{where}{seed}", fl, fc,
                           kernel=v.kernel, seed=v.nonce or None, cases=len(fs), key=f"{check}:{_output}"))
    return out
