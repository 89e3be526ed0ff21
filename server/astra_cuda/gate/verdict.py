"""The gate's verdict: structured, JSON-serialisable, precise enough to act on.

A `Verdict` says whether a candidate passed, which checks ran, every failure with the case,
output, indices and errors involved, and what was covered (cases, seeds, distributions,
held-out share). `visible_feedback()` is the text the planning/coding agents may see: full
detail for visible cases, only counts for held-out ones (so candidates cannot be tuned to them).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("passed", "failed", "unsupported", "error")


@dataclass
class CaseInfo:
    """Where a failure happened: the sizes, the value distribution and the input seed."""

    sizes: dict[str, int]
    distribution: str
    seed: int
    visible: bool = True
    label: str = ""  # 'spec', 'edge', 'bench', 'distribution', 'stateful', ...

    def describe(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"{sizes} ({self.distribution} inputs, seed {self.seed})"


@dataclass
class Failure:
    check: str
    message: str                     # one precise, human sentence (or a few)
    case: CaseInfo | None = None
    output: str | None = None        # the argument involved
    index: list[int] | None = None   # first bad element (multi-dimensional)
    bad: int | None = None           # bad elements
    total: int | None = None         # elements compared
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    expected: float | None = None    # reference value at `index`
    got: float | None = None         # candidate value at `index`
    line: int | None = None          # 1-based line in the user's file, when known

    @property
    def visible(self) -> bool:
        return self.case is None or self.case.visible

    def text(self) -> str:
        where = f" [{self.case.describe()}]" if self.case else ""
        line = f" (line {self.line})" if self.line else ""
        return f"{self.check}{line}: {self.message}{where}"


@dataclass
class CheckResult:
    name: str
    passed: bool
    details: str = ""
    skipped: bool = False  # did not run (the reason is in details)


@dataclass
class Coverage:
    cases: int = 0                # (sizes, distribution, seed) combinations run
    launches: int = 0             # candidate launches checked
    sizes: int = 0                # distinct size combinations
    seeds: list[int] = field(default_factory=list)
    distributions: list[str] = field(default_factory=list)
    held_out: int = 0             # cases hidden from the agents' feedback
    bench_sizes: str = ""         # how the timed sizes were covered
    notes: list[str] = field(default_factory=list)
    # The verification matrix the report draws: one cell per (sizes, distribution) of the main
    # suite: {"sizes": "n=7, d=128", "distribution": "normal", "cases": 2, "failed": 0}.
    matrix: list[dict[str, Any]] = field(default_factory=list)

    def record(self, sizes: dict[str, int], distribution: str, failed: bool) -> None:
        label = ", ".join(f"{k}={v}" for k, v in sizes.items())
        cell = next((c for c in self.matrix if c["sizes"] == label and c["distribution"] == distribution), None)
        if cell is None:
            cell = {"sizes": label, "distribution": distribution, "cases": 0, "failed": 0}
            self.matrix.append(cell)
        cell["cases"] += 1
        cell["failed"] += int(failed)


@dataclass
class Verdict:
    kernel: str
    backend: str                   # 'cpu' | 'gpu'
    status: str                    # one of STATUSES
    checks: list[CheckResult] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    compared: bool = True          # False when there was no reference to compare against
    nonce: int = 0                 # input seed of this run: check(..., seed=nonce) reproduces it
    seconds: float = 0.0
    log: str = ""                  # compiler log for compile errors
    reference: str = ""            # where the reference came from (set by astra_cuda.api)
    project: str = ""              # the project context it was built with (set by astra_cuda.api)
    ran_on: str = ""               # where it ran: node and GPU (set by astra_cuda.api)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per gate step
    compiler: str = ""             # the compiler that judged it compiles ('nvcc 13.0, flags …' / 'NVRTC …')

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def summary(self) -> str:
        cov = self.coverage
        what = (f"{cov.cases} cases ({cov.sizes} sizes, {len(cov.seeds)} seeds, "
                f"{len(cov.distributions)} distributions) on the {self.backend}")
        if self.status == "passed":
            base = "passed" if self.compared else "self-consistent (no reference to compare with)"
            return f"{self.kernel}: {base}: {len(self.checks)} checks, {what}"
        if self.status == "unsupported":
            return f"{self.kernel}: static checks only — needs a GPU to verify ({self._first_message()})"
        if self.status == "error":
            return f"{self.kernel}: could not check: {self._first_message()}"
        names = sorted({f.check for f in self.failures})
        return f"{self.kernel}: FAILED {', '.join(names)}: {self._first_message()}"

    def _first_message(self) -> str:
        if self.failures:
            f = self.failures[0]
            return f.message + (f" [{f.case.describe()}]" if f.case else "")
        return self.log.splitlines()[0] if self.log else "no details"

    def failed_checks(self) -> list[str]:
        return sorted({f.check for f in self.failures})

    def human(self) -> str:
        lines = [self.summary]
        lines += [f"  {'ok  ' if c.passed else ('skip' if c.skipped else 'FAIL')} {c.name}: {c.details}"
                  for c in self.checks]
        lines += [f"  - {f.text()}" for f in self.failures]
        lines += [f"  warning: {w}" for w in self.warnings]
        lines += [f"  note: {n}" for n in self.coverage.notes]
        if self.compiler:
            lines.append(f"  compiled by: {self.compiler}")
        return "\n".join(lines)

    def visible_feedback(self) -> str:
        """What the planning and coding agents may read: visible failures in full, held-out
        failures only as counts per check."""
        if self.status == "passed":
            return self.summary
        if self.status in ("error", "unsupported"):
            return self.summary + (f"\n{self.log[:4000]}" if self.log else "")
        shown = [f.text() for f in self.failures if f.visible]
        hidden: dict[str, int] = {}
        for f in self.failures:
            if not f.visible:
                hidden[f.check] = hidden.get(f.check, 0) + 1
        lines = [f"{self.kernel}: FAILED ({', '.join(self.failed_checks())})"] + [f"- {s}" for s in shown]
        lines += [f"- {n} held-out case(s) failed the {check} check (details withheld)"
                  for check, n in sorted(hidden.items())]
        lines += [f"warning: {w}" for w in self.warnings]
        if self.log and "compile" in self.failed_checks():
            lines.append("compiler output:\n" + self.log[:4000])
        return "\n".join(lines)

    # ---- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; non-finite floats become the strings 'nan', 'inf', '-inf' (strict JSON)."""
        d: dict[str, Any] = _finite(asdict(self))
        d["passed"] = self.passed
        d["summary"] = self.summary
        return d

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        d = {k: v for k, v in d.items() if k not in ("passed", "summary")}
        failures = [Failure(**{**{k: _float(v) if k in _FLOATS else v for k, v in f.items()},
                                "case": CaseInfo(**f["case"]) if f.get("case") else None})
                    for f in d.pop("failures", [])]
        checks = [CheckResult(**c) for c in d.pop("checks", [])]
        coverage = Coverage(**d.pop("coverage", {}))
        return cls(**d, failures=failures, checks=checks, coverage=coverage)

    @classmethod
    def from_json(cls, text: str) -> "Verdict":
        return cls.from_dict(json.loads(text))


_FLOATS = ("max_abs_err", "max_rel_err", "expected", "got")


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if x != x else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _float(v: Any) -> Any:
    return float(v) if isinstance(v, str) else v
