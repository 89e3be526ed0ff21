"""`astra` — the command line. Thin: parse arguments, call `astra_cuda.api`, print. Long because every
verb's handler is here; its flags are in `arguments`, what it prints in `terminal`, the batch's tables
in `batch_view`.

Exit codes: 0 ok, 1 a check failed (or the kernel to optimize or profile does not pass), 2 bad
input or usage, 130 interrupted, 141 the reader of the output went away (`| head`). With
`--json` every outcome is one JSON object on stdout, errors included (`{"error": {...}}`); lines and
columns are 1-based everywhere.
"""
from __future__ import annotations

import argparse
import sys
import threading

from .. import api, redact
from . import sarif
from ..contract import DEFAULT_ARCH
from ..errors import AstraError
from ..session import Session

from .arguments import Parser, wants_json
from .configuration import apply_config, cmd_config, project_context
from . import arguments
from .terminal import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, console, emit_json,
                       error_json, kernel_table, list_runs, print_markdown, print_profile, print_verdicts,
                       progress_printer, shown)

# ---- verbs --------------------------------------------------------------------------------

def cmd_kernels(a) -> int:
    files = _files(a)
    listed = []
    for path, named in files:
        infos = api.kernels(api.open_file(path), require_some=named)
        if a.kernel:
            infos = [k for k in infos if a.kernel in (k.name, k.kernel.qualified_name)]
        if infos or named:
            listed.append((path, infos))
    if a.json:
        if len(a.file) == 1 and len(files) == 1 and files[0][1]:   # one file: the shape it always had
            emit_json({"file": listed[0][0], "kernels": [k.to_json() for k in listed[0][1]]})
        else:
            emit_json({"files": [{"file": p, "kernels": [k.to_json() for k in ks]} for p, ks in listed]})
        return EXIT_OK
    if a.quiet:
        for path, infos in listed:
            for k in infos:
                at = k.kernel.name_span
                print(f"{path}:{at.start_line + 1}:{at.start_col + 1}: {k.kernel.qualified_name} "
                      f"[{'spec' if k.spec_status == 'ok' else 'no-spec' if k.spec_status == 'none' else 'spec-errors'}]")
        return EXIT_OK
    for path, infos in listed:
        kernel_table(path, infos, a.wide)
    return EXIT_OK



def _files(a) -> list[tuple[str, bool]]:
    """The CUDA files the verb's PATH arguments name (files, folders, globs)."""
    from . import paths
    found = paths.expand(a.file)
    if not found:
        raise AstraError(f"no CUDA source (.cu, .cuh) in {', '.join(a.file)}")
    return found



def cmd_spec(a) -> int:
    proposal = api.infer_spec(api.open_file(a.file, project_context(a)), a.kernel, session=_session(a))
    if a.json:
        emit_json({"kernel": a.kernel, "comment": proposal.comment if proposal.valid else None,
                    "notes": proposal.notes, "valid": proposal.valid, "problems": proposal.problems,
                    **({"draft": proposal.comment} if not proposal.valid else {})})
        return EXIT_OK if proposal.valid else EXIT_FAILED
    con = console(stderr=True)
    if not proposal.valid:   # never proposed: the draft and why, on stderr only
        con.print("[red]No spec proposed (what inference cannot know, or what Astra's own validator refuses):[/]")
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
        emit_json({"kernel": a.kernel, "file": pin.file, "digest": pin.digest})
    else:
        print(f"pinned {a.kernel} ({pin.file} @ {pin.digest[:12]}) as the reference")
    return EXIT_OK


def _arch(a) -> str:
    """--arch, else the architecture of the GPU here, else the default."""
    if a.arch is None:
        a.arch = api.device_arch(DEFAULT_ARCH, _session(a))
    return a.arch


def _gpu_setup(a, out: dict | None = None) -> None:
    """When a GPU is visible but not used (no CuPy, or one built for another CUDA): say so with
    the one command that fixes it — on stderr, and in the JSON output."""
    s = api.gpu_setup(_session(a)) if a.backend == "auto" else None
    if s is None:
        return
    if out is not None:
        out["gpu_setup"] = {"problem": s.reason, "fix": s.fix}
    _gpu_note(s)


def _gpu_note(s) -> None:
    fix = f": run `{s.fix}`" if s.fix else ""
    print(f"astra: note: {s.reason}{fix} (until then kernels run on the CPU backend: correctness only, "
          f"speed not measured)", file=sys.stderr)


def cmd_check(a) -> int:
    """Every kernel of every file: checked against its spec, under an inferred one (--infer), or
    listed as having no spec. One finding per defect, as compiler lines, JSON or SARIF."""
    import time
    started = _utc(time.time())
    files = _files(a)
    ex = _executor(a)
    run = _CheckRun()
    for path, named in files:
        try:
            _check_file(a, path, named, run)
        except AstraError as e:
            if len(files) == 1 and named:
                raise                    # one file: the error as it always was (JSON error object, exit 2)
            run.error(path, e)
    code = EXIT_BAD_INPUT if run.bad_input else (EXIT_FAILED if run.failed else EXIT_OK)
    if a.format == "sarif":
        from . import sarif
        from .. import workspace
        import os
        inv = sarif.Invocation(sys.argv[1:] if a.argv is None else a.argv, code, os.getcwd(), started,
                               _utc(time.time()), notes=run.notes)
        root = str(workspace.root_for(files[0][0]))
        emit_json(sarif.log(run.findings, root=root, invocation=inv))
    elif a.json:
        out = {"passed": not run.failed and not run.bad_input, "executor": ex,
               "verdicts": run.verdicts, "no_spec": run.no_spec, "errors": run.errors}
        if run.static:
            out.update(backend="static", files=run.static)
            if len(run.static) == 1:
                out.update({k: v for k, v in run.static[0].items() if k != "file"})
        if run.gpu_setup:
            out["gpu_setup"] = run.gpu_setup
        emit_json(out)
    elif not a.quiet and len(files) > 1:
        kinds = f"{run.checked} kernel(s) checked, {len(run.no_spec)} without a spec"
        print(f"{len(files)} file(s): {kinds}; {'FAILED' if run.failed else 'errors' if run.bad_input else 'ok'}")
    return code


class _CheckRun:
    """What `astra check` found over all its files."""

    def __init__(self) -> None:
        self.findings: list[tuple] = []      # (path, findings.Finding)
        self.verdicts: list[dict] = []
        self.no_spec: list[dict] = []
        self.errors: list[dict] = []
        self.static: list[dict] = []
        self.notes: list[str] = []
        self.failed = self.bad_input = False
        self.checked = 0
        self.gpu_setup: dict | None = None

    def add(self, path: str, f, quiet: bool, machine: bool) -> None:
        if f.rule == "no-spec" and f.level == "info":   # not a defect: said in the SARIF invocation's notes
            self.notes.append(f.line_text(path))
        else:
            self.findings.append((path, f))
        if not machine and (not quiet or f.level != "info"):
            print(shown(f.line_text(path)))

    def error(self, path: str, e: AstraError) -> None:
        from .findings import Finding, from_diagnostic
        from ..model.spec import SpecErrors
        self.bad_input = True
        diags = e.diagnostics if isinstance(e, SpecErrors) else []
        self.errors.append({"file": path, "message": e.message,
                            "diagnostics": [d.to_json() for d in diags]})
        for f in [from_diagnostic(d) for d in diags] or [Finding("input", "error", e.message, e.line or 0, e.col or 0)]:
            self.findings.append((path, f))
            print(shown(f.line_text(path)), file=sys.stderr)


def _check_file(a, path: str, named: bool, run: _CheckRun) -> None:
    from .findings import Finding, from_diagnostic, from_verdict
    machine = a.json
    snap = api.open_file(path, project_context(a, path))
    apply_config(a, path)
    # A file without kernels (a header) is an error only when it is all the command was given.
    infos = api.kernels(snap, require_some=named and len(a.file) == 1)
    if a.kernel:
        infos = [k for k in infos if a.kernel in (k.name, k.kernel.qualified_name)]
        if not infos and named and len(a.file) == 1:
            api.kernels(snap)                         # the usual error for a kernel not in the file
            snap.kernel(a.kernel)
    if not infos:
        return
    arch = _arch(a)
    if a.backend == "static":
        report = api.static_check(snap, arch=arch)
        errors = [d for d in report.diagnostics if d.severity == "error"]
        run.failed |= bool(errors)
        for d in report.diagnostics:
            run.add(path, from_diagnostic(d), a.quiet, machine)
        if not machine and not a.quiet:
            for name, r in report.resources.items():
                print(f"{name}: {r.registers} registers, {r.spills_bytes} bytes spilled, "
                      f"{r.shared_static_bytes} bytes static shared memory, {r.stack_bytes} bytes stack")
            print(f"static checks ({report.compiler or 'nothing compiled'}; {arch}): {'FAILED' if errors else 'ok'} — "
                  f"{len(errors)} error(s), {len(report.diagnostics) - len(errors)} other message(s). "
                  f"Correctness not run (static backend).")
            print(f"project: {snap.context.describe() if snap.context else '-'}")
        run.static.append({"file": path, "passed": not errors, **report.to_json()})
        return
    progress = None if (machine or a.quiet) else progress_printer()
    replay = f"astra check {_quote(path)}"
    for k in infos:
        at = (k.kernel.name_span.start_line, k.kernel.name_span.start_col)
        if k.spec_errors:
            raise_spec = len(a.file) == 1 and named and len(infos) == 1
            if raise_spec:
                from ..model.spec import SpecErrors
                raise SpecErrors(list(k.spec_errors))
            run.bad_input = True
            for d in k.spec_errors:
                run.add(path, from_diagnostic(d), a.quiet, machine)
            continue
        target, inferred = snap, None
        if k.spec is None:
            if not a.infer:
                run.no_spec.append({"file": path, "kernel": k.name, "line": at[0] + 1})
                run.add(path, Finding("no-spec", "info", f"{k.name}: no harness spec, not checked (`astra spec "
                                      f"{_quote(path)} --kernel {k.name}` proposes one; `astra check --infer` checks "
                                      f"it under one)", *at, kernel=k.name), a.quiet, machine)
                continue
            try:
                inferred = api.with_inferred_spec(snap, k.name, backend=a.backend, session=_session(a))
            except AstraError as e:
                run.failed = True
                run.add(path, Finding("no-spec", "error", f"{k.name}: no spec, and none could be inferred: "
                                      f"{e.message}", *at, kernel=k.name), a.quiet, machine)
                continue
            target = inferred.snapshot
        (v,) = api.check(target, k.name, backend=a.backend, arch=arch, progress=progress, seed=a.seed,
                         pin_first=inferred is None, session=_session(a))
        run.checked += 1
        d = {"file": path, **v.to_dict()}
        if inferred is not None:
            d["inferred_spec"] = {"comment": inferred.proposal.comment, "notes": inferred.proposal.notes}
        run.verdicts.append(d)
        if not v.passed:
            run.failed = True
        if not machine and not a.quiet:
            print_verdicts([v], inferred=inferred is not None)
        for f in from_verdict(v, at, replay + f" --kernel {k.name}" + (" --infer" if inferred else "")):
            if inferred is not None:
                f = _moved(f, inferred)
            run.add(path, f, a.quiet, machine)
    s = api.gpu_setup(_session(a)) if a.backend == "auto" else None
    if s is not None and run.gpu_setup is None:
        run.gpu_setup = {"problem": s.reason, "fix": s.fix}
        _gpu_note(s)


def _moved(f, inferred):
    import dataclasses
    return dataclasses.replace(f, line=inferred.original_line(f.line),
                               end_line=None if f.end_line is None else inferred.original_line(f.end_line))


def _quote(path: str) -> str:
    import shlex
    return shlex.quote(path)


def _utc(t: float) -> str:
    import datetime
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cmd_profile(a) -> int:
    ex = _executor(a)
    files = _files(a)
    profiles, no_spec = [], []
    for path, named in files:
        snap = api.open_file(path, project_context(a, path))
        apply_config(a, path)
        infos = api.kernels(snap, require_some=named)
        if a.kernel:
            infos = [k for k in infos if a.kernel in (k.name, k.kernel.qualified_name)] or \
                ([snap.kernel(a.kernel)] if named and len(files) == 1 else [])
        for k in infos:
            if k.spec is None and not k.spec_errors and not (a.kernel and len(files) == 1):
                no_spec.append({"file": path, "kernel": k.name, "line": k.kernel.name_span.start_line + 1})
                if not a.json and not a.quiet:
                    at = k.kernel.name_span
                    print(f"{path}:{at.start_line + 1}:{at.start_col + 1}: note: {k.name}: no harness spec, "
                          f"not profiled [no-spec]")
                continue
            profiles += [(path, p) for p in api.profile(snap, k.name, backend=a.backend, ncu=a.ncu, arch=_arch(a),
                                                        sizes=a.sizes, session=_session(a))]
    failed = [p for _, p in profiles if p.errors or any(s.output_failures for s in p.sizes) or p.implausible]
    out = {"passed": not failed, "executor": ex, "profiles": [{"file": f, **_profile_json(p)} for f, p in profiles],
           "no_spec": no_spec}
    _gpu_setup(a, out)
    if a.json:
        emit_json(out)
    else:
        for f, p in profiles:
            if a.quiet and p not in failed:
                continue
            if len(files) > 1:
                print(f"{f}:")
            print_profile(p)
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
        return list_runs(api.runs(api.open_file(a.file), a.kernel), a)
    eff = apply_config(a, a.file)
    llm = _llm(a, eff)
    ex = _executor(a)
    _arch(a)
    cancel = threading.Event()
    progress = None if a.json or a.quiet else progress_printer()
    budgets = _budgets(a, eff)
    try:
        result = api.optimize(api.open_file(a.file, project_context(a)), a.kernel, llm=llm,
                              backend=a.backend, arch=a.arch, progress=progress, cancel=cancel, write=a.write,
                              report=a.report, resume=a.resume, candidates=a.candidates, sizes=a.sizes,
                              fresh=a.fresh, session=_session(a),
                              **budgets)
    except KeyboardInterrupt:
        cancel.set()
        raise
    out = result.to_json()
    out["executor"] = ex
    _gpu_setup(a, out)
    if a.json:
        out["text_edit"] = _edit_json(out.get("text_edit"))
        emit_json(out)
    else:
        print_markdown(redact.text(result.summary_markdown()))
    if result.unsaved:  # a full disk: said, and the best kernel shown whole where it was not kept
        if result.improved and not a.json:
            print(f"\nThe best kernel (verified; not saved):\n\n{result.best_kernel_source}")
        for u in result.unsaved:
            print(f"astra: {a.file}: {shown(u)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.interrupted:  # the cluster lost the evaluation twice: not a verdict on the kernel
        print(f"astra: {a.file}: {shown(result.error or '')}; resume with --resume {result.run_id}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.error:  # the original does not compile or does not pass the gate: nothing to optimize
        print(f"astra: {a.file}: {shown(result.error)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _budgets(a, eff: dict) -> dict:
    """rounds, tuning points, seconds and LLM tokens of an optimize run: the flags, else the
    project's [budgets]. A resumed run keeps its own total unless --rounds says otherwise."""
    rounds = a.rounds if a.rounds is not None or a.resume else eff["budgets.rounds"].value
    return {"rounds": rounds, "tune": eff["budgets.tune"].value, "seconds": eff["budgets.seconds"].value,
            "tokens": eff["budgets.tokens"].value}


def _llm(a, eff: dict):
    """The endpoint's configuration from the flags, the environment and the project's [llm];
    an endpoint a project file names is used only with the user's consent."""
    from .. import config
    url = eff["llm.base_url"]
    if url.value is not None and not config.endpoint_allowed(url.source):
        raise AstraError(f"the LLM endpoint {url.value} comes from {url.source}, a project file: Astra sends your "
                         f"kernels and key only where you say. Give --base-url {url.value} yourself, or set "
                         f"{config.TRUST_ENV}=1 for a repository you trust")
    return api.llm_config(mode=a.llm, model=eff["llm.model"].value, base_url=url.value,
                          reasoning_effort=eff["llm.reasoning_effort"].value, temperature=eff["llm.temperature"].value,
                          max_output_tokens=eff["llm.max_tokens"].value, timeout_s=eff["llm.timeout"].value)


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
    from . import batch
    from ..compile import project
    if a.list_runs:
        raise AstraError("--list-runs takes one file")
    flags = bool(a.include or a.define or a.undefine or a.std or a.compile_commands)
    eff = apply_config(a, a.file[0])
    llm = _llm(a, eff)
    _executor(a)
    _arch(a)
    cancel = threading.Event()
    from .batch_view import LiveTable, print_summary
    display = None if a.json else LiveTable(console(stderr=True))

    def context_for(path: str):
        cli = project.from_flags(a.include or (), a.define or (), a.std, origin="command line",
                              undefines=getattr(a, "undefine", None) or ()) if flags else None
        return api.project_context(path, cli=cli, compile_commands=a.compile_commands)
    options = {"llm": llm, "backend": a.backend, "arch": a.arch, "candidates": a.candidates, "sizes": a.sizes,
               "fresh": a.fresh, "session": _session(a),
               **_budgets(a, eff)}
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
        emit_json(result.to_json())
    else:
        print_summary(result)
    return EXIT_OK


def _executor(a) -> dict:
    """The description of the executor of the command's session."""
    return dict(_session(a).executor.describe())


def _session(a) -> Session:
    """The command's session, opened on first use and kept for the command (its backend probe is
    asked once; `_run` closes it): kernels run where --cluster says, this machine's workers
    without it."""
    if getattr(a, "session", None) is None:
        a.session = Session.open(getattr(a, "cluster", None))
    return a.session


def _edit_json(edit: dict | None) -> dict | None:
    """The optimize result's edit with 1-based lines and columns (the end exclusive)."""
    if edit is None:
        return None
    (sl, sc), (el, ec) = edit["range"]["start"], edit["range"]["end"]
    return {"start": {"line": sl + 1, "col": sc + 1}, "end": {"line": el + 1, "col": ec + 1},
            "new_text": edit["new_text"]}



def cmd_serve(a) -> int:
    from ..lsp.server import main as serve_main
    serve_main()
    return EXIT_OK


# ---- entry --------------------------------------------------------------------------------

VERBS: dict[str, arguments.Verb] = {"kernels": cmd_kernels, "spec": cmd_spec, "pin": cmd_pin, "check": cmd_check,
                                    "profile": cmd_profile, "optimize": cmd_optimize, "config": cmd_config,
                                    "serve": cmd_serve}


def build_parser() -> argparse.ArgumentParser:
    return arguments.build_parser(VERBS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    Parser.json_errors = wants_json(argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors (which printed their JSON)
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    args.json = args.json or args.format in ("json", "sarif")
    args.argv = argv
    from .. import gpu_setup
    gpu_setup.use_gpu_env()   # CuPy from the venv the GPU fix created, when Astra runs outside its own
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
    from ..storage import is_full, no_space
    try:
        return args.fn(args)
    except AstraError as e:
        return _report_error(args, e)
    except OSError as e:   # a full disk, a quota, a read-only folder where no writer said which
        if not is_full(e):
            raise
        return _report_error(args, no_space(e, "a file"))
    except KeyboardInterrupt:
        print("astra: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        session = getattr(args, "session", None)
        if session is not None:
            session.close()  # a Ray runtime started here stops with the command


def _report_error(args, e: AstraError) -> int:
    """An error as the user reads it on stderr (every spec problem at its line) and, with --json,
    as a JSON object on stdout."""
    from ..model.spec import SpecErrors
    path = getattr(args, "file", None)
    if isinstance(path, list):  # optimize PATH…
        path = path[0] if len(path) == 1 else None
    diagnostics = e.diagnostics if isinstance(e, SpecErrors) else None
    if diagnostics and path:
        for d in diagnostics:
            print(f"astra: {shown(d.human(path))}", file=sys.stderr)
    else:
        where = f"{path}:{e.line + 1}:{(e.col or 0) + 1}: " if e.line is not None and path else ""
        print(f"astra: {where}{shown(e.message)}", file=sys.stderr)
    if args.json:
        if args.format == "sarif" and diagnostics and path:
            from .. import workspace
            emit_json(sarif.log([(path, sarif.from_diagnostic(d)) for d in diagnostics],
                                 root=str(workspace.root_for(path))))
        else:
            emit_json(error_json(e.message, kind="spec" if diagnostics else "bad_input", file=path, line=e.line,
                                   col=e.col, diagnostics=diagnostics, exit_code=e.exit_code))
    return e.exit_code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
