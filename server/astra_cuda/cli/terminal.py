"""What the `astra` command shows: exit codes, JSON objects (errors too, lines and columns
1-based), rich's tables and Markdown, progress lines, verdicts — every text from the user's code, a
compiler or a model masked and stripped of control characters on its way out (`shown`)."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Sequence

from .. import plain, redact
from ..diagnostics import Diagnostic
from ..progress import Progress, ProgressEvent

if TYPE_CHECKING:
    from rich.console import Console

    from ..agents.runlog import RunInfo
    from ..gate import Verdict
    from ..profiler import Profile
    from ..snapshot import KernelInfo

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141


def console(stderr: bool = False) -> Console:
    from rich.console import Console
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def print_markdown(text: str) -> None:
    """Markdown rendered for the terminal (headings, bold, tables), plain when piped."""
    from rich.markdown import Markdown
    console().print(Markdown(text))


def emit_json(obj: object) -> None:
    print(redact.text(json.dumps(obj, indent=2, default=str)))


def error_json(message: str, *, kind: str = "bad_input", file: str | None = None, line: int | None = None,
               col: int | None = None, diagnostics: Sequence[Diagnostic] | None = None,
               exit_code: int = EXIT_BAD_INPUT) -> dict[str, Any]:
    """What `--json` prints when a verb cannot do its work (lines and columns 1-based)."""
    err: dict[str, Any] = {"kind": kind, "message": message}
    if file is not None:
        err["file"] = file
    if line is not None:
        err["line"], err["col"] = line + 1, (col or 0) + 1
    if diagnostics:
        err["diagnostics"] = [d.to_json() for d in diagnostics]
    return {"error": err, "exit_code": exit_code}


def shown(text: object, markup: bool = False) -> str:
    """Text from the user's code, a compiler or a model, for the terminal: secrets masked, no
    control characters (escape sequences would drive the terminal), and with `markup` rich's own
    syntax escaped (`[link=...]` stays text)."""
    from rich.markup import escape
    out = plain.printable(redact.text(str(text)))
    return escape(out) if markup else out


def progress_printer() -> Progress:
    con = console(stderr=True)

    def progress(event: ProgressEvent) -> None:
        msg = event.message or event.step
        rnd = event.round
        best = event.best_speedup
        head = f"[round {rnd}] " if rnd is not None else ""
        tail = f"  (best {best:.2f}×)" if isinstance(best, (int, float)) else ""
        con.print(f"[dim]{head}{shown(msg, markup=True)}{tail}[/]")
    return progress


def print_verdicts(verdicts: Sequence[Verdict], inferred: bool = False) -> None:
    """Each verdict's summary and where it ran; its defects follow as compiler-style lines."""
    con = console()
    for v in verdicts:
        mark = "[green]PASS[/]" if v.passed else "[red]FAIL[/]"
        con.print(f"{mark} {shown(v.summary, markup=True)}" + (" [dim](under an inferred spec)[/]" if inferred else ""),
                  markup=True)
        ref = getattr(v, "reference", None)
        if ref:
            con.print(f"   reference: {shown(ref)}", markup=False)
        if v.ran_on:
            con.print(f"   ran {shown(v.ran_on)}", markup=False)
        if getattr(v, "project", ""):
            con.print(f"   project: {shown(v.project)}", markup=False)
        if v.compiler:
            con.print(f"   compiled by: {shown(v.compiler)}", markup=False)
        for n in v.coverage.notes:
            if n.startswith("project headers") or "not found" in n:
                con.print(f"   note: {shown(n)}", markup=False)
        for w in getattr(v, "warnings", []) or []:
            con.print(f"   ! {shown(w)}", markup=False)


def print_profile(p: Profile) -> None:
    print_markdown(p.summary_markdown())


def kernel_table(path: str, infos: Sequence[KernelInfo], wide: bool) -> None:
    from rich.table import Table
    t = Table(title=f"Kernels in {path}")
    con = console()
    if wide:
        con.width = max(con.width, 400)
    # A kernel's name is never cut (versions of one kernel differ only at the end of it): it gets
    # its whole width when the terminal allows, else it folds onto the next line.
    longest = max((len(k.kernel.qualified_name) for k in infos), default=6)
    t.add_column("kernel", overflow="fold", min_width=max(6, min(longest, con.width - 25)))
    t.add_column("line", no_wrap=True)
    for col in ("parameters", "spec", "launch sites"):
        t.add_column(col, overflow="fold")
    for k in infos:
        params = ", ".join(f"{p['type']} {p['name']}" for p in k.to_json()["params"])
        spec = "yes" if k.spec_status == "ok" else ("errors" if k.spec_status == "error" else "no spec")
        t.add_row(k.kernel.qualified_name, str(k.kernel.span.start_line + 1), params, spec,
                  ", ".join(str(s.span.start_line + 1) for s in k.launches) or "-")
    con.print(t)


def list_runs(runs: Sequence[RunInfo], a: argparse.Namespace) -> int:
    if a.json:
        emit_json([r.to_json() for r in runs])
        return EXIT_OK
    if not runs:
        print(f"no logged optimize runs of {a.file}" + (f" ({a.kernel})" if a.kernel else ""))
        return EXIT_OK
    import time
    rows = [("id", "kernel", "started", "status", "rounds", "best")]
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started)) if r.started else "?"
        rounds = f"{r.rounds_done}/{r.rounds_asked}" if r.rounds_asked is not None else str(r.rounds_done)
        best = f"{r.speedup:.3f}×" if r.speedup is not None else r.note
        status = r.status if r.status != "running" else "unfinished"   # running now, or interrupted
        rows.append((r.id, r.kernel, started, status, rounds, best))
    # Plain aligned columns: an id must never be shortened, it is what --resume takes.
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    print("(continue one with --resume ID, or --resume last for the newest of a kernel)")
    return EXIT_OK
