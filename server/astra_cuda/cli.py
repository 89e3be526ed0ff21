"""`astra` — the command line. Thin: parse arguments, call `astra_cuda.api`, print. Long because every
verb's flags, its JSON and its exit code are kept side by side here, where the contract is read;
the batch's tables are in `batch_view`.

Exit codes: 0 ok, 1 a check failed (or the kernel to optimize or profile does not pass), 2 bad
input or usage, 130 interrupted, 141 the reader of the output went away (`| head`). With
`--json` every outcome is one JSON object on stdout, errors included (`{"error": {...}}`); lines and
columns are 1-based everywhere.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading

from . import __version__, api, plain, redact, sarif
from .contract import DEFAULT_ARCH
from .errors import AstraError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141


class _Parser(argparse.ArgumentParser):
    json_errors = False  # set from the raw arguments: a usage error is JSON too when --json was asked

    def error(self, message: str):  # usage errors exit 2 with a one-line hint, as promised
        self.print_usage(sys.stderr)
        print(f"astra: error: {message}", file=sys.stderr)
        if self.json_errors:
            _emit_json(_error_json(message, kind="usage"))
        raise SystemExit(EXIT_BAD_INPUT)


def _console(stderr: bool = False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _print_markdown(text: str) -> None:
    """Markdown rendered for the terminal (headings, bold, tables), plain when piped."""
    from rich.markdown import Markdown
    _console().print(Markdown(text))


def _emit_json(obj) -> None:
    print(redact.text(json.dumps(obj, indent=2, default=str)))


MAX_ROUNDS = 1000


def _rounds(value: str) -> int:
    """--rounds: a whole number from 1 to MAX_ROUNDS (argparse turns the ValueError into exit 2)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if not 1 <= n <= MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_ROUNDS}, got {n}")
    return n


def _error_json(message: str, *, kind: str = "bad_input", file: str | None = None, line: int | None = None,
                col: int | None = None, diagnostics: list | None = None, exit_code: int = EXIT_BAD_INPUT) -> dict:
    """What `--json` prints when a verb cannot do its work (lines and columns 1-based)."""
    err: dict = {"kind": kind, "message": message}
    if file is not None:
        err["file"] = file
    if line is not None:
        err["line"], err["col"] = line + 1, (col or 0) + 1
    if diagnostics:
        err["diagnostics"] = [d.to_json() for d in diagnostics]
    return {"error": err, "exit_code": exit_code}


# ---- verbs --------------------------------------------------------------------------------

def cmd_kernels(a) -> int:
    infos = api.kernels(api.open_file(a.file))
    if a.json:
        _emit_json({"file": a.file, "kernels": [k.to_json() for k in infos]})
        return EXIT_OK
    from rich.table import Table
    t = Table(title=f"Kernels in {a.file}")
    con = _console()
    if a.wide:
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
        spec = "yes" if k.spec_status == "ok" else ("errors" if k.spec_status == "error" else "none")
        t.add_row(k.kernel.qualified_name, str(k.kernel.span.start_line + 1), params, spec,
                  ", ".join(str(s.span.start_line + 1) for s in k.launches) or "-")
    con.print(t)
    return EXIT_OK


def _project(a):
    """The project context from -I/-D/--std/--compile-commands (then the nearest database)."""
    from . import project
    cli = project.from_flags(a.include or (), a.define or (), a.std, origin="command line")
    return api.project_context(a.file, cli=cli, compile_commands=a.compile_commands)


def cmd_spec(a) -> int:
    proposal = api.infer_spec(api.open_file(a.file, _project(a)), a.kernel)
    if a.json:
        _emit_json({"kernel": a.kernel, "comment": proposal.comment if proposal.valid else None,
                    "notes": proposal.notes, "valid": proposal.valid, "problems": proposal.problems,
                    **({"draft": proposal.comment} if not proposal.valid else {})})
        return EXIT_OK if proposal.valid else EXIT_FAILED
    con = _console(stderr=True)
    if not proposal.valid:   # never proposed: the draft and why, on stderr only
        con.print("[red]No spec proposed: Astra's own validator refuses the draft:[/]")
        for p in proposal.problems:
            con.print(f"  • {p}")
        con.print(proposal.comment, markup=False, highlight=False)
    else:
        sys.stdout.write(proposal.comment)
    if proposal.notes:
        con.print("[yellow]Could not infer everything — check these:[/]")
        for n in proposal.notes:
            con.print(f"  • {n}")
    return EXIT_OK if proposal.valid else EXIT_FAILED


def cmd_pin(a) -> int:
    pin = api.pin(api.open_file(a.file), a.kernel)
    if a.json:
        _emit_json({"kernel": a.kernel, "file": pin.file, "digest": pin.digest})
    else:
        print(f"pinned {a.kernel} ({pin.file} @ {pin.digest[:12]}) as the reference")
    return EXIT_OK


def _arch(a) -> str:
    """--arch, else the architecture of the GPU here, else the default."""
    if a.arch is None:
        a.arch = api.device_arch(DEFAULT_ARCH)
    return a.arch


def _gpu_setup(a, out: dict | None = None) -> None:
    """When a GPU is visible but not used (no CuPy, or one built for another CUDA): say so with
    the one command that fixes it — on stderr, and in the JSON output."""
    s = api.gpu_setup() if a.backend == "auto" else None
    if s is None:
        return
    if out is not None:
        out["gpu_setup"] = {"problem": s.reason, "fix": s.fix}
    fix = f": run `{s.fix}`" if s.fix else ""
    print(f"astra: note: {s.reason}{fix} (until then kernels run on the CPU backend: correctness only, "
          f"speed not measured)", file=sys.stderr)


def cmd_check(a) -> int:
    context = _project(a)
    snap = api.open_file(a.file, context)
    ex = _executor(a)
    _arch(a)
    if a.backend == "static":
        report = api.static_check(snap, arch=a.arch)
        errors = [d for d in report.diagnostics if d.severity == "error"]
        if a.format == "sarif":
            _emit_sarif(a.file, [sarif.from_diagnostic(d) for d in report.diagnostics])
        elif a.json:
            _emit_json({"backend": "static", "passed": not errors, **report.to_json()})
        else:
            for d in report.diagnostics:
                print(_shown(d.human(a.file)))
            for name, r in report.resources.items():
                print(f"{name}: {r.registers} registers, {r.spills_bytes} bytes spilled, "
                      f"{r.shared_static_bytes} bytes static shared memory, {r.stack_bytes} bytes stack")
            print(f"static checks ({report.compiler or 'nothing compiled'}; {a.arch}): {'FAILED' if errors else 'ok'} — "
                  f"{len(errors)} error(s), {len(report.diagnostics) - len(errors)} other message(s). "
                  f"Correctness not run (static backend).")
            print(f"project: {context.describe()}")
        return EXIT_FAILED if errors else EXIT_OK
    progress = None if a.json else _progress_printer()
    verdicts = api.check(snap, a.kernel, backend=a.backend, arch=a.arch, progress=progress)
    ok = all(v.passed for v in verdicts)
    out = {"passed": ok, "executor": ex, "verdicts": [v.to_dict() for v in verdicts]}
    _gpu_setup(a, out)
    if a.format == "sarif":
        _emit_sarif(a.file, _verdict_findings(snap, verdicts))
    elif a.json:
        _emit_json(out)
    else:
        _print_verdicts(verdicts)
    return EXIT_OK if ok else EXIT_FAILED


def _verdict_findings(snap: api.Snapshot, verdicts) -> list:
    """Each failed verdict as SARIF results: a failure at its line when it has one, else at the
    kernel's name."""
    names = {k.kernel.name: k.kernel.name_span for k in api.kernels(snap)}
    out = []
    for v in verdicts:
        if v.passed:
            continue
        at = names.get(v.kernel)
        line, col = (at.start_line, at.start_col) if at is not None else (0, 0)
        failures = v.failures or [None]
        for f in failures[:20]:
            msg = f"{v.kernel}: " + (f.text() if f is not None else v.summary)
            level = "warning" if v.status == "unsupported" else "error"
            rule = f"check/{f.check}" if f is not None else "check"
            fl = (f.line - 1) if f is not None and f.line else line
            out.append(sarif.Finding(rule, level, msg, fl, col if fl == line else 0))
    return out


def _emit_sarif(path: str, findings: list) -> None:
    from . import workspace
    _emit_json(sarif.log(path, findings, root=str(workspace.root_for(path))))


def cmd_profile(a) -> int:
    ex = _executor(a)
    _arch(a)
    profiles = api.profile(api.open_file(a.file, _project(a)), a.kernel, backend=a.backend, ncu=a.ncu,
                           arch=a.arch)
    failed = [p for p in profiles if p.errors or any(s.output_failures for s in p.sizes) or p.implausible]
    out = {"passed": not failed, "executor": ex, "profiles": [_profile_json(p) for p in profiles]}
    _gpu_setup(a, out)
    if a.json:
        _emit_json(out)
    else:
        for p in profiles:
            _print_profile(p)
    return EXIT_FAILED if failed else EXIT_OK


def _profile_json(p) -> dict:
    d = p.to_json()
    d["hot_lines"] = [{"line": ln + 1, "share": share, "label": label} for ln, share, label in p.hot_lines]
    return d


def cmd_optimize(a) -> int:
    if _is_batch(a):
        return _optimize_batch(a)
    a.file = a.file[0]
    if a.list_runs:
        return _list_runs(api.runs(api.open_file(a.file), a.kernel), a)
    llm = api.llm_config(mode=a.llm, model=a.model, base_url=a.base_url)
    ex = _executor(a)
    _arch(a)
    cancel = threading.Event()
    progress = None if a.json else _progress_printer()
    try:
        result = api.optimize(api.open_file(a.file, _project(a)), a.kernel, rounds=a.rounds, llm=llm,
                              backend=a.backend, arch=a.arch, progress=progress, cancel=cancel, write=a.write,
                              report=a.report, resume=a.resume, candidates=a.candidates,
                              tune=a.tune)
    except KeyboardInterrupt:
        cancel.set()
        raise
    out = result.to_json()
    out["executor"] = ex
    _gpu_setup(a, out)
    if a.json:
        out["text_edit"] = _edit_json(out.get("text_edit"))
        _emit_json(out)
    else:
        _print_markdown(redact.text(result.summary_markdown()))
    if result.interrupted:  # the cluster lost the evaluation twice: not a verdict on the kernel
        print(f"astra: {a.file}: {_shown(result.error or '')}; resume with --resume {result.run_id}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.error:  # the original does not compile or does not pass the gate: nothing to optimize
        print(f"astra: {a.file}: {_shown(result.error)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _is_batch(a) -> bool:
    """Several paths, a folder, or one file with several kernels with specs and no --kernel."""
    import os
    if len(a.file) != 1 or os.path.isdir(a.file[0]):
        return True
    if a.kernel or a.list_runs:
        return False
    if a.resume and "-batch-" in a.resume:
        return True
    try:
        infos = api.kernels(api.open_file(a.file[0]))
    except AstraError:
        return False  # the single-file path reports it
    return sum(k.spec is not None for k in infos) > 1


def _optimize_batch(a) -> int:
    from . import batch, project
    if a.list_runs:
        raise AstraError("--list-runs takes one file")
    flags = bool(a.include or a.define or a.std or a.compile_commands)
    llm = api.llm_config(mode=a.llm, model=a.model, base_url=a.base_url)
    _executor(a)
    _arch(a)
    cancel = threading.Event()
    from .batch_view import LiveTable, print_summary
    display = None if a.json else LiveTable(_console(stderr=True))

    def context_for(path: str):
        cli = project.from_flags(a.include or (), a.define or (), a.std, origin="command line") if flags else None
        return api.project_context(path, cli=cli, compile_commands=a.compile_commands)
    options = {"rounds": a.rounds, "llm": llm, "backend": a.backend, "arch": a.arch, "candidates": a.candidates}
    try:
        if display is not None:
            display.start()
        result = batch.run(a.file, kernel=a.kernel, resume=a.resume, on_row=display.update if display else None,
                           report=a.report, write=a.write, options=options, context_for=context_for, cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        raise
    finally:
        if display is not None:
            display.stop()
    if a.json:
        _emit_json(result.to_json())
    else:
        print_summary(result)
    return EXIT_OK


def _executor(a) -> dict:
    """Run kernels where --cluster says (this machine's workers without it); its description."""
    return api.use_cluster(getattr(a, "cluster", None))


def _edit_json(edit: dict | None) -> dict | None:
    """The optimize result's edit with 1-based lines and columns (the end exclusive)."""
    if edit is None:
        return None
    (sl, sc), (el, ec) = edit["range"]["start"], edit["range"]["end"]
    return {"start": {"line": sl + 1, "col": sc + 1}, "end": {"line": el + 1, "col": ec + 1},
            "new_text": edit["new_text"]}


def _list_runs(runs, a) -> int:
    if a.json:
        _emit_json([r.to_json() for r in runs])
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


def cmd_serve(a) -> int:
    from .lsp.server import main as serve_main
    serve_main()
    return EXIT_OK


# ---- printing -----------------------------------------------------------------------------

def _shown(text: object, markup: bool = False) -> str:
    """Text from the user's code, a compiler or a model, for the terminal: secrets masked, no
    control characters (escape sequences would drive the terminal), and with `markup` rich's own
    syntax escaped (`[link=...]` stays text)."""
    from rich.markup import escape
    out = plain.printable(redact.text(str(text)))
    return escape(out) if markup else out


def _progress_printer():
    con = _console(stderr=True)

    def progress(event: dict) -> None:
        msg = event.get("message") or event.get("step") or ""
        rnd = event.get("round")
        best = event.get("best_speedup")
        head = f"[round {rnd}] " if rnd is not None else ""
        tail = f"  (best {best:.2f}×)" if isinstance(best, (int, float)) else ""
        con.print(f"[dim]{head}{_shown(msg, markup=True)}{tail}[/]")
    return progress


def _print_verdicts(verdicts, limit: int = 8) -> None:
    con = _console()
    for v in verdicts:
        mark = "[green]PASS[/]" if v.passed else "[red]FAIL[/]"
        con.print(f"{mark} {_shown(v.summary, markup=True)}", markup=True)
        ref = getattr(v, "reference", None)
        if ref:
            con.print(f"   reference: {_shown(ref)}", markup=False)
        if v.ran_on:
            con.print(f"   ran {_shown(v.ran_on)}", markup=False)
        if getattr(v, "project", ""):
            con.print(f"   project: {_shown(v.project)}", markup=False)
        if v.compiler:
            con.print(f"   compiled by: {_shown(v.compiler)}", markup=False)
        for n in v.coverage.notes:
            if n.startswith("project headers") or "not found" in n:
                con.print(f"   note: {_shown(n)}", markup=False)
        failures = list(getattr(v, "failures", []) or [])
        for f in failures[:limit]:
            con.print("   ✗ " + _shown(f.text() if hasattr(f, "text") else f.message), markup=False)
        if len(failures) > limit:
            con.print(f"   … and {len(failures) - limit} more failures (--json for all)", markup=False)
        for w in getattr(v, "warnings", []) or []:
            con.print(f"   ! {_shown(w)}", markup=False)


def _print_profile(p) -> None:
    _print_markdown(p.summary_markdown())


# ---- entry --------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="astra", description="Astra: verified, faster CUDA kernels.",
                epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input or usage. Lines and columns are "
                       "1-based in every output.")
    p.add_argument("--version", action="version", version=f"astra {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser, metavar="VERB")

    def verb(name, help_, fn, kernel_required=False, many=False):
        s = sub.add_parser(name, help=help_, description=help_)
        if many:
            s.add_argument("file", nargs="+", metavar="PATH",
                           help="CUDA source files (.cu, .cuh) and folders: one file and kernel is one run; "
                                "several paths, a folder, or a file with several specs and no --kernel, a batch "
                                "of every kernel with a spec")
        else:
            s.add_argument("file", help="the CUDA source file (.cu, .cuh)")
        s.add_argument("--kernel", "-k", required=kernel_required, metavar="NAME",
                       help="the kernel (its name or qualified name)" + ("" if kernel_required else
                                                                          "; default: every kernel in the file"))
        s.add_argument("--json", action="store_true",
                       help="print one JSON object on stdout, errors included")
        s.set_defaults(fn=fn, format="text")
        return s

    kernels_verb = verb("kernels", "list the kernels in a file", cmd_kernels)
    kernels_verb.add_argument("--wide", action="store_true",
                              help="one row per kernel however narrow the terminal (long lines)")
    spec_verb = verb("spec", "print a proposed harness spec for a kernel", cmd_spec, kernel_required=True)
    verb("pin", "pin the kernel's current source as its reference", cmd_pin, kernel_required=True)
    for name, help_, fn in (("check", "check kernels against their reference", cmd_check),
                            ("profile", "time kernels on their bench sizes", cmd_profile),
                            ("optimize", "optimize kernels with the agent team", cmd_optimize)):
        s = verb(name, help_, fn, many=name == "optimize")
        s.add_argument("--backend", choices=["auto", "gpu", "cpu", "static"], default="auto",
                       help="where kernels run: the GPU (CuPy), the CPU backend (correctness only), "
                            "static (compile checks only) or auto, the best available (default)")
        s.add_argument("--arch", default=None,
                       help=f"target architecture for static checks (default: the GPU's own, else {DEFAULT_ARCH})")
        s.add_argument("--cluster", metavar="WHERE",
                       help="run kernels on Ray: local (a runtime started here), ray://HOST:PORT, or auto "
                            "(RAY_ADDRESS if set); default: this machine's workers")
    sub.choices["check"].add_argument("--format", choices=["text", "json", "sarif"], default="text",
                                      help="output format: text (default), json (same as --json) or sarif "
                                           "(SARIF 2.1.0 for CI code scanning)")
    for s in (spec_verb, *(sub.choices[v] for v in ("check", "profile", "optimize"))):
        s.add_argument("-I", dest="include", action="append", metavar="DIR",
                       help="project include directory (repeatable; searched before compile_commands.json's)")
        s.add_argument("-D", dest="define", action="append", metavar="NAME[=VALUE]", help="define a macro (repeatable)")
        s.add_argument("--std", choices=["c++11", "c++14", "c++17", "c++20"], help="C++ standard (default c++17)")
        s.add_argument("--compile-commands", metavar="PATH",
                       help="compile_commands.json to use (default: the nearest one, also under build/)")
    sub.choices["profile"].add_argument("--ncu", action="store_true", help="collect Nsight Compute metrics")
    o = sub.choices["optimize"]
    o.add_argument("--rounds", type=_rounds, default=None,
                   help="rounds in all (default 5; with --resume: an interrupted run's own total, "
                        "a finished run's rounds, i.e. only report it)")
    o.add_argument("--tune", type=int, default=None, metavar="N",
                   help="parameter points the tuning stage may time after the offline team's rounds "
                        "(default 8; 0: none; needs a GPU)")
    o.add_argument("--llm", choices=["offline", "openai"], default=None,
                   help="offline (default without an endpoint) or an OpenAI-compatible endpoint")
    o.add_argument("--model", metavar="NAME", help="model name at the endpoint (or ASTRA_MODEL)")
    o.add_argument("--base-url", metavar="URL",
                   help="base URL of an OpenAI-compatible endpoint (or ASTRA_BASE_URL; default: OpenAI's); "
                        "the key comes from OPENAI_API_KEY")
    o.add_argument("--candidates", type=int, default=1, metavar="K",
                   help="candidates per round, evaluated at once where the executor has room (default 1)")
    o.add_argument("--write", action="store_true", help="put the best kernel into the file")
    o.add_argument("--report", metavar="DIR", help="write an HTML report to DIR")
    runs = o.add_mutually_exclusive_group()
    runs.add_argument("--resume", metavar="RUN_ID",
                      help="continue a logged run from .astra/runs/ ('last': the newest of this kernel), or "
                           "a batch from .astra/batches/ ('last': the newest batch, when a batch is given)")
    runs.add_argument("--list-runs", action="store_true", help="list the logged runs of this file and exit")
    s = sub.add_parser("serve", help="run the language server on stdio (for editors)",
                       description="run the language server on stdio (for editors)")
    s.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(fn=cmd_serve, format="text")
    return p


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv or any(x in ("--format=json", "--format=sarif") for x in argv) or \
        any(x == "--format" and y in ("json", "sarif") for x, y in zip(argv, argv[1:]))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _Parser.json_errors = _wants_json(argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors (which printed their JSON)
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    args.json = args.json or args.format in ("json", "sarif")
    if not 1 <= getattr(args, "candidates", 1) <= 64:
        return _report_error(args, AstraError("--candidates must be between 1 and 64"))
    try:
        code = _run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`astra ... | head`): no traceback, and no second error when Python
        # flushes stdout at exit.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except ValueError as e:
        if "closed file" not in str(e):
            raise
        return EXIT_OK  # `serve` closes stdout when the client goes away
    return code


def _run(args) -> int:
    try:
        return args.fn(args)
    except AstraError as e:
        return _report_error(args, e)
    except KeyboardInterrupt:
        print("astra: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        api.close_cluster()  # a Ray runtime started here stops with the command


def _report_error(args, e: AstraError) -> int:
    """An error as the user reads it on stderr (every spec problem at its line) and, with --json,
    as a JSON object on stdout."""
    from .spec import SpecErrors
    path = getattr(args, "file", None)
    if isinstance(path, list):  # optimize PATH…
        path = path[0] if len(path) == 1 else None
    diagnostics = e.diagnostics if isinstance(e, SpecErrors) else None
    if diagnostics and path:
        for d in diagnostics:
            print(f"astra: {_shown(d.human(path))}", file=sys.stderr)
    else:
        where = f"{path}:{e.line + 1}:{(e.col or 0) + 1}: " if e.line is not None and path else ""
        print(f"astra: {where}{_shown(e.message)}", file=sys.stderr)
    if args.json:
        if args.format == "sarif" and diagnostics and path:
            _emit_sarif(path, [sarif.from_diagnostic(d) for d in diagnostics])
        else:
            _emit_json(_error_json(e.message, kind="spec" if diagnostics else "bad_input", file=path, line=e.line,
                                   col=e.col, diagnostics=diagnostics, exit_code=e.exit_code))
    return e.exit_code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
