"""Which launch configuration runs which version of a kernel.

The launch configuration (the spec's `grid`, `block`, `shared_mem`) belongs to a version of the
kernel: a rewrite that packs several rows into one block must be launched differently from the
original. Everything else in the spec (sizes, arguments, tolerances) is what "correct" means and
must not move with a rewrite. A candidate may change the launch only when the file launches the
kernel itself and the rewrite edits that launch site too — otherwise the user's own launch code
would run the new kernel the old way.

Every function takes parsed files (`source.SourceModel`, e.g. a snapshot's model): the file
texts are not parsed again here.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Callable

from . import source
from . import spec_places, syntax
from .candidate import Candidate, own_spec
from .source import SourceModel
from .spec import Spec

PURE_HOST_CALLS = {"min", "max", "std::min", "std::max", "dim3", "ceil_div", "CEIL_DIV", "cdiv", "DIV_UP",
                   "static_cast", "size_t"}


def spec_in(m: SourceModel, kernel: str) -> Spec | None:
    """The loaded spec above `kernel` in the file `m`, or None (no kernel, no spec, or it does not load)."""
    return own_spec(m, kernel)[0]


def reference_spec(spec: Spec, reference: SourceModel, reference_kernel: str,
                   loaded: tuple[Spec | None] | None = None) -> Spec:
    """`spec` launched the way the reference version (e.g. a pinned baseline) launches.
    `loaded`: the reference kernel's own spec (`spec_in`), when the caller has it already."""
    ref = loaded[0] if loaded is not None else spec_in(reference, reference_kernel)
    return spec.with_launch(ref) if ref is not None and ref.launch != spec.launch else spec


def launch(candidate: Candidate, reference: Candidate, reference_spec: Spec) -> tuple[Spec, str]:
    """(the spec that launches `candidate`, '' or why its launch is not acceptable) against the
    version `reference` (read for the same kernel) launched by `reference_spec`: `candidate_spec`
    on what both reads hold, nothing read again."""
    return candidate_spec(reference_spec, reference.model, candidate.model, candidate.kernel,
                          loaded=(candidate.spec, candidate.spec_error), reference_own=(reference.spec,))


def _configs(m: SourceModel, kernel: str) -> list[tuple[str, str, str]]:
    return [(s.grid, s.block, s.shared_mem or "0") for s in m.launches_of(kernel)]


def candidate_spec(ref_spec: Spec, reference: SourceModel, candidate: SourceModel, kernel: str,
                   loaded: tuple[Spec | None, str] | None = None,
                   reference_own: tuple[Spec | None] | None = None) -> tuple[Spec, str]:
    """(the spec that launches the candidate, '' or why the candidate's launch is not acceptable).
    `loaded`: the candidate's own spec as `own_spec` read it, `reference_own`: the reference
    file's spec above `kernel` (`spec_in`), when the caller has them already."""
    cand, error = loaded if loaded is not None else own_spec(candidate, kernel)
    if error:
        return ref_spec, f"the rewrite's harness spec does not load: {error}"
    if cand is None:
        return ref_spec, ""  # no spec of its own: it runs as the reference does
    changed = ref_spec.changed_beyond_launch(cand)
    if changed:
        return ref_spec, (f"the rewrite changed the harness spec's {', '.join(changed)}: only the launch "
                          f"configuration (grid, block, shared_mem) may change with a rewrite, and [sizes] "
                          f"may only gain cases")
    ref_spec = ref_spec.with_cases_of(cand)   # sizes it added: the gate checks them too
    if cand.launch == ref_spec.launch:
        return ref_spec, ""
    # The launch this kernel had before the rewrite (its own spec in the reference file: another
    # reference kernel, an earlier version, keeps its launch in ref_spec and is no guide here).
    own = reference_own[0] if reference_own is not None else spec_in(reference, kernel)
    if own is not None and cand.launch == own.launch:
        return ref_spec.with_launch(cand), ""
    sites = _configs(candidate, kernel)
    if not sites:
        return ref_spec, (f"the rewrite changes the launch configuration, but this file has no launch of "
                          f"`{kernel}` to change with it (launch changes need the launch site in the same file)")
    before = _configs(reference, kernel)
    stale = [s for s in sites if s in before]
    if stale:
        return ref_spec, (f"the rewrite changes the launch configuration in the spec, but a launch site still "
                          f"uses the old one (<<<{', '.join(x for x in stale[0] if x != '0')}>>>)")
    return ref_spec.with_launch(cand), ""


# ---- changing a kernel's launch: the spec and every launch site together ----------------------

def side_effect_free(code: str) -> bool:
    """A launch-configuration argument that may be evaluated more than once (no ++, =, or calls
    other than min/max/dim3/ceil-division helpers)."""
    r = source.parser().parse(f"void f() {{ auto _ = {code}; }}".encode()).root_node
    if r.has_error:
        return False
    stack = [r]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type in ("update_expression", "assignment_expression", "compound_literal_expression",
                      "lambda_expression"):
            return False
        if n.type == "call_expression":
            f = n.child_by_field_name("function")
            if f is not None and f.type == "template_function":
                f = f.child_by_field_name("name")
            if f is None or syntax.text(f) not in PURE_HOST_CALLS:
                return False
    return True


def _spec_line(text: str, kernel: source.Kernel, key: str, values: list[str]) -> tuple[int, int, str] | None:
    """(start byte, end byte, new text) replacing the spec's top-level `key = [...]` line (the
    value must be on one line)."""
    line, col, _ = spec_places.Locator(kernel).key(key)
    lines = text.split("\n")
    if line >= len(lines):
        return None
    row = lines[line]
    rest = row[col:]
    if not rest.lstrip().startswith(key) or "]" not in rest or rest.count("[") != rest.count("]"):
        return None
    start = len("\n".join(lines[:line]).encode()) + (1 if line else 0) + len(row[:col].encode())
    end = start + len(rest.encode())
    return start, end, f"{key} = {json.dumps(values)}"


def add_sizes(text: str, kernel: str, case: dict[str, int]) -> str | None:
    """`text` with each value of `case` added to the kernel's spec's [sizes] line of its name (a
    size for the gate to check too, see Spec.with_cases_of); None when a name has no [sizes] line
    of one line."""
    model = source.parse(text)
    k, old = model.kernel(kernel), spec_in(model, kernel)
    if k is None or old is None or set(case) - set(old.sizes):
        return None
    edits = []
    for name, value in case.items():
        if name not in old.sizes or value in old.sizes[name]:
            continue
        line, col, _ = spec_places.Locator(k).key(name, "sizes")
        lines = text.split("\n")
        row = lines[line] if line < len(lines) else ""
        rest = row[col:]
        if not rest.lstrip().startswith(name) or "]" not in rest or rest.count("[") != rest.count("]"):
            return None
        rest = rest[:rest.rindex("]") + 1]    # a comment after the value stays
        start = len("\n".join(lines[:line]).encode()) + (1 if line else 0) + len(row[:col].encode())
        values = sorted(set(old.sizes[name]) | {int(value)})
        edits.append((start, start + len(rest.encode()), f"{name} = {json.dumps(values)}"))
    if not edits:
        return text
    data = text.encode("utf-8")
    for a, b, new in sorted(edits, reverse=True):
        data = data[:a] + new.encode("utf-8") + data[b:]
    out = data.decode("utf-8")
    grown = spec_in(source.parse(out), kernel)
    return out if grown is not None and old.only_adds_cases(grown) and not old.changed_beyond_launch(grown) else None


def _indent(data: bytes, byte: int) -> str:
    start = data.rfind(b"\n", 0, byte) + 1
    line = data[start:byte]
    return line[: len(line) - len(line.lstrip())].decode()


def relaunch(text: str, kernel: str, grid: list[str], block: list[str],
             host: Callable[[source.LaunchSite], tuple[str, str] | None], note: str,
             kernel_edits: Sequence[tuple[int, int, str]] = (), base: Candidate | None = None) -> Candidate | None:
    """`text` with the kernel's spec launching (grid, block) and every launch site of the kernel in
    the file changed to `host(site)` = (grid text, block text), a comment `note` above each, plus
    `kernel_edits` (byte ranges of the kernel's own rewrite), read (the read that checks it). None
    when that cannot be done safely: no spec or launch site, a launch the parser cannot see all
    of, configuration arguments with side effects, or a spec that would change beyond its launch.
    `base`: `text` read already, else it is read here. (It writes a new text, so unlike the
    functions above it reads the one it makes.)"""
    if base is None or base.text != text or base.kernel != kernel:
        base = Candidate.of(text, kernel)
    model, old = base.model, base.spec
    k = model.kernel(kernel)
    sites = model.launches_of(kernel)
    if k is None or old is None or not sites:
        return None
    if not all(side_effect_free(s.grid) and side_effect_free(s.block) for s in sites):
        return None
    edits = list(kernel_edits)
    for key, values in (("grid", grid), ("block", block)):
        e = _spec_line(text, k, key, values)
        if e is None:
            return None
        edits.append(e)
    data = text.encode("utf-8")
    short = kernel.split("::")[-1]
    calls = []
    stack = [base.root]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type == "call_expression" and any(c.type == "kernel_call_syntax" for c in n.children):
            f = n.child_by_field_name("function")
            if f is not None and f.type == "template_function":
                f = f.child_by_field_name("name")
            if f is not None and syntax.text(f).split("::")[-1] == short:
                calls.append(n)
    if len(calls) != len(sites):
        return None
    for call, site in zip(sorted(calls, key=lambda c: c.start_byte), sorted(sites, key=lambda s: (
            s.span.start_line, s.span.start_col))):
        new = host(site)
        if new is None:
            return None
        kcs = next(c for c in call.children if c.type == "kernel_call_syntax")
        cfg = [c for c in kcs.named_children if c.type != "comment"]
        if len(cfg) < 2:
            return None
        edits.append((cfg[0].start_byte, cfg[0].end_byte, new[0]))
        edits.append((cfg[1].start_byte, cfg[1].end_byte, new[1]))
        stmt = call
        while stmt.parent is not None and stmt.type != "expression_statement":
            stmt = stmt.parent
        edits.append((stmt.start_byte, stmt.start_byte, f"// astra: {note}\n{_indent(data, stmt.start_byte)}"))
    out, pos = [], 0
    for s_, e_, t in sorted(edits, key=lambda x: (x[0], x[1])):
        if s_ < pos:
            return None
        out.append(data[pos:s_])
        out.append(t.encode("utf-8"))
        pos = e_
    out.append(data[pos:])
    read = Candidate.of(b"".join(out).decode("utf-8"), kernel)
    check = read.spec
    if check is None or list(check.grid) != grid or list(check.block) != block or old.changed_beyond_launch(check):
        return None
    return read


__all__ = ["spec_in", "launch", "reference_spec", "candidate_spec", "relaunch", "side_effect_free"]
