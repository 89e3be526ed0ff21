"""What the server answers the client: the commands' results and the status notification, one
dataclass per interface of `client/src/contract.ts`, which `answers_ts` writes from these (a field
here is the interface's in snake case, and optional there — `name?:` — when it is `optional()`
here; tests/lsp/test_contract.py fails while contract.ts is not current). The docstrings become
the interfaces' comments.

`to_json()` is what goes over the wire: camelCase keys, an optional field left None left out, a
nested answer as its own JSON, anything else (an LSP `WorkspaceEdit`) as it is for pygls to convert.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any


def camel(name: str) -> str:
    """'has_spec' -> 'hasSpec'."""
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def optional(default: Any = None) -> Any:
    """A field the interface marks `name?:`: left out of the JSON while it is None."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True)
class Answer:
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("optional"):
                continue
            out[camel(f.name)] = _json(value)
        return out


def _json(value: Any) -> Any:
    if isinstance(value, Answer):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


@dataclass(frozen=True)
class KernelEntry(Answer):
    """The kernels command: one kernel of the file, its lines 0-based. Server commands take (uri,
    kernel); `kernels` and `check` take (uri)."""

    name: str
    start_line: int
    end_line: int
    has_spec: bool


@dataclass(frozen=True)
class Optimizing(Answer):
    """A kernel being optimized: the progress message and the best speedup so far (null before one)."""

    kernel: str
    message: str
    best_speedup: float | None


@dataclass(frozen=True)
class GpuSetup(Answer):
    """A GPU is visible but not used: what is wrong and the one command that fixes it."""

    problem: str
    fix: str


@dataclass(frozen=True)
class DocStatus(Answer):
    """The status notification of one document (the status bar, the menus' context keys).
    `summary`: what the checks measured, in the server's words ('not checked', '1 matches reference
    · 1 self-consistent'); `rewrites`: kernels with a finished rewrite to apply; `profilerReports`:
    kernels whose Nsight Compute report was kept; `restricted`: why kernels are not run here (an
    untrusted workspace); `where`: the node (and GPU) of the checks; `cluster`: where kernels run
    when not on this machine."""

    uri: str
    checking: bool
    errors: int
    verified: int
    failing: int
    summary: str          # 'not checked' / '1 matches reference · 1 self-consistent': never '0 verified'
    tooltip: str
    rewrites: list[str]
    profiler_reports: list[str]
    optimizing: list[Optimizing]
    restricted: str | None             # why kernels are not run here (an untrusted workspace)
    gpu_setup: GpuSetup | None         # a GPU is visible but not used: why, and the fix
    where: str | None = optional()     # the node (and GPU) of the checks
    cluster: str | None = optional()   # where kernels run when not on this machine


@dataclass(frozen=True)
class OptimizeAnswer(Answer):
    """The optimize command (and cancelOptimize): started, finished, declined, or — status
    'consent' — what would be sent where, asked once per endpoint before anything is sent."""

    status: str
    kernel: str | None = optional()
    message: str | None = optional()
    speedup: float | None = optional()
    verified_cases: int | None = optional()
    improved: bool | None = optional()
    title: str | None = optional()
    report_path: str | None = optional()
    endpoint: str | None = optional()
    model: str | None = optional()
    from_project: bool | None = optional()
    source: str | None = optional()
    sent: str | None = optional()


@dataclass(frozen=True)
class ProfileAnswer(Answer):
    """The profile command: its one-line summary and how many hot lines it marked."""

    status: str
    kernel: str | None = optional()
    summary: str | None = optional()
    hot_lines: int | None = optional()
    message: str | None = optional()


@dataclass(frozen=True)
class EditAnswer(Answer):
    """The optimizedEdit command: the optimized kernel's edit for the client's diff preview;
    `measured`: its speed was measured on a GPU (else the rewrite is offered only on request)."""

    status: str
    message: str | None = optional()
    edit: Any = optional()           # an LSP WorkspaceEdit
    new_text: str | None = optional()
    title: str | None = optional()
    measured: bool | None = optional()


@dataclass(frozen=True)
class ReportAnswer(Answer):
    """The report command. `html`: a whole page (theme-aware, no scripts; links are command URIs);
    `profilerReport`: the path of the kept Nsight Compute report of the kernel's last profile."""

    status: str
    html: str | None = optional()
    message: str | None = optional()
    profiler_report: str | None = optional()


# interface name in client/src/contract.ts -> its dataclass here
INTERFACES: dict[str, type[Answer]] = {
    "KernelEntry": KernelEntry, "DocStatus": DocStatus, "OptimizeAnswer": OptimizeAnswer,
    "ProfileAnswer": ProfileAnswer, "EditAnswer": EditAnswer, "ReportAnswer": ReportAnswer,
}
