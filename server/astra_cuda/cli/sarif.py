"""SARIF 2.1.0 for CI code scanning (`astra check --format sarif`): one result per defect
(`astra_cuda.cli.findings`), at its place in its file, with a partial fingerprint that survives code
moving above it, the rules with a help link each, and the invocation (command line, exit code,
times). Pure: plain data in, a JSON-ready dict out; tests validate it against the OASIS schema.

Lines and columns in SARIF are 1-based and `endColumn` is exclusive (Astra's findings are 0-based
with an exclusive end, so both move by one).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from urllib.parse import quote

from .. import __version__
from ..contract import DIAGNOSTICS_DOCS
from .findings import Finding, from_diagnostic

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFO_URI = "https://github.com/astra-cuda/astra"
LEVELS = {"error": "error", "warning": "warning", "info": "note", "note": "note"}
FINGERPRINT = "astraDefect/v1"

# What each kind of finding means, for the rule list code scanning shows beside a result; every
# rule links to its section of docs/diagnostics.md, as the editor's diagnostics do.
RULES = {
    "compile": "The kernel does not compile.",
    "parse": "Astra's parser could not read this part of the file.",
    "spec": "The harness spec (the /* @astra ... */ comment) has an error.",
    "unit": "Something about how the kernel's compilation unit was cut (a header not found, ...).",
    "preprocessor": "The preprocessor stopped on this file (a missing header, an #error).",
    "no-spec": "The kernel has no harness spec, so it was not checked.",
    "check": "The kernel failed a check of the verification gate against its reference.",
}


@dataclass(frozen=True)
class Invocation:
    """How Astra was run, for the log's invocation record."""

    arguments: list[str]
    exit_code: int
    working_directory: str
    start: str = ""          # ISO 8601 UTC times ('' : not recorded)
    end: str = ""
    notes: list[str] = field(default_factory=list)   # what the run said besides results

    def to_json(self) -> dict:
        d: dict = {"commandLine": " ".join(_quoted(a) for a in ["astra", *self.arguments]),
                   "arguments": list(self.arguments), "exitCode": self.exit_code,
                   "executionSuccessful": self.exit_code in (0, 1),
                   "workingDirectory": {"uri": PurePath(self.working_directory).as_uri() + "/"}}
        if self.start:
            d["startTimeUtc"] = self.start
        if self.end:
            d["endTimeUtc"] = self.end
        if self.notes:
            d["toolExecutionNotifications"] = [{"level": "note", "message": {"text": n}} for n in self.notes]
        return d


def log(found: list[tuple[str, Finding]] | str, findings: list[Finding] | None = None, *, root: str | None = None,
        invocation: Invocation | None = None) -> dict:
    """The SARIF log of one run: `found` is (path, finding) pairs — or, as before, one path with
    its `findings`. Paths are named relative to `root`, the repository, when given."""
    pairs = [(found, f) for f in findings or []] if isinstance(found, str) else found
    rules: list[str] = []
    results = []
    seen: dict[str, int] = {}
    for path, f in pairs:
        if f.rule not in rules:
            rules.append(f.rule)
        end_line = f.line if f.end_line is None else f.end_line
        end_col = f.col + 1 if f.end_col is None else max(f.end_col, f.col + 1)
        uri = _uri(path, root)
        # Two equal defects of one file (the same kernel twice, say) get distinct fingerprints.
        base = hashlib.sha256(f"{uri}\x1f{f.identity}".encode()).hexdigest()[:32]
        seen[base] = seen.get(base, 0) + 1
        result: dict = {
            "ruleId": f.rule, "ruleIndex": rules.index(f.rule), "level": LEVELS.get(f.level, "note"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": uri, **({"uriBaseId": "SRCROOT"} if root is not None and
                                                    not PurePath(uri).is_absolute() and "://" not in uri else {})},
                "region": {"startLine": f.line + 1, "startColumn": f.col + 1,
                           "endLine": end_line + 1, "endColumn": end_col + 1}}}],
            "partialFingerprints": {FINGERPRINT: f"{base}:{seen[base]}"},
        }
        props = {k: v for k, v in (("kernel", f.kernel), ("seed", f.seed), ("cases", f.cases if f.cases > 1 else None))
                 if v}
        if props:
            result["properties"] = props
        results.append(result)
    run: dict = {
        "tool": {"driver": {
            "name": "Astra", "version": __version__, "semanticVersion": __version__, "informationUri": INFO_URI,
            "rules": [_rule(r) for r in rules],
        }},
        "results": results,
    }
    if root is not None:
        run["originalUriBaseIds"] = {"SRCROOT": {"uri": PurePath(root).as_uri() + "/"}}
    if invocation is not None:
        run["invocations"] = [invocation.to_json()]
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(rule: str) -> dict:
    kind = rule.split("/")[0]
    anchor = "compile" if re.fullmatch(r"[a-z]+-\d+", rule) else rule.replace("/", "-").replace("_", "-")
    text = RULES.get(kind, rule)
    if "/" in rule:
        text = f"{RULES['check'][:-1]}: {rule.split('/', 1)[1]}."
    return {"id": rule, "shortDescription": {"text": text}, "helpUri": f"{DIAGNOSTICS_DOCS}#{anchor}",
            "defaultConfiguration": {"level": "warning" if kind in ("no-spec", "unit") else "error"}}


def _uri(path: str, root: str | None) -> str:
    import os
    p = PurePath(os.path.abspath(path)) if root is not None else PurePath(path)
    if root is not None:
        try:
            p = p.relative_to(root)
        except ValueError:
            pass
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())


def _quoted(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


__all__ = ["Finding", "Invocation", "from_diagnostic", "log", "RULES", "SCHEMA"]
