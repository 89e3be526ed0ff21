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

from .. import __version__, api, plain, redact
from . import sarif
from ..contract import DEFAULT_ARCH
from ..errors import AstraError
from ..progress import ProgressEvent
from ..session import Session

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


def _seed(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if not 1 <= n < 2**31:
        raise argparse.ArgumentTypeError(f"a seed is from 1 to {2**31 - 1}, got {n}")
    return n


def _whole(lo: int, hi: int):
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi}, got {n}")
        return n
    return parse


def _number(lo: float, hi: float):
    def parse(value: str) -> float:
        import math
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not (math.isfinite(x) and lo <= x <= hi):
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}, got {value}")
        return x
    return parse


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
            _emit_json({"file": listed[0][0], "kernels": [k.to_json() for k in listed[0][1]]})
        else:
            _emit_json({"files": [{"file": p, "kernels": [k.to_json() for k in ks]} for p, ks in listed]})
        return EXIT_OK
    if a.quiet:
        for path, infos in listed:
            for k in infos:
                at = k.kernel.name_span
                print(f"{path}:{at.start_line + 1}:{at.start_col + 1}: {k.kernel.qualified_name} "
                      f"[{'spec' if k.spec_status == 'ok' else 'no-spec' if k.spec_status == 'none' else 'spec-errors'}]")
        return EXIT_OK
    for path, infos in listed:
        _kernel_table(path, infos, a.wide)
    return EXIT_OK


def _kernel_table(path: str, infos, wide: bool) -> None:
    from rich.table import Table
    t = Table(title=f"Kernels in {path}")
    con = _console()
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


def _files(a) -> list[tuple[str, bool]]:
    """The CUDA files the verb's PATH arguments name (files, folders, globs)."""
    from . import paths
    found = paths.expand(a.file)
    if not found:
        raise AstraError(f"no CUDA source (.cu, .cuh) in {', '.join(a.file)}")
    return found


def _project(a, path: str | None = None):
    """The project context from -I/-D/--std/--compile-commands (then the project's files)."""
    from ..compile import project
    cli = project.from_flags(a.include or (), a.define or (), a.std, origin="command line",
                              undefines=getattr(a, "undefine", None) or ())
    return api.project_context(path or a.file, cli=cli, compile_commands=a.compile_commands)


# Flags that override a key of the project configuration (astra_cuda.config.KEYS).
_GIVEN = (("backend", "backend"), ("arch", "arch"), ("budgets.rounds", "rounds"), ("budgets.tune", "tune"),
          ("budgets.seconds", "max_seconds"), ("budgets.tokens", "max_tokens"), ("llm.base_url", "base_url"),
          ("llm.model", "model"), ("llm.reasoning_effort", "reasoning_effort"), ("llm.temperature", "temperature"),
          ("llm.max_tokens", "max_output_tokens"), ("llm.timeout", "llm_timeout"))
_ENV = (("llm.model", "ASTRA_MODEL"), ("llm.base_url", "ASTRA_BASE_URL"))


def _effective(a, path: str) -> dict:
    """Every configuration key for `path` with its source: the command line, the environment,
    the project's files, the default."""
    import os

    from .. import config
    given = {key: config.Value(getattr(a, attr), "command line") for key, attr in _GIVEN
             if getattr(a, attr, None) is not None}
    for key, env in _ENV:
        if key not in given and os.environ.get(env):
            given[key] = config.Value(os.environ[env], f"environment ({env})")
    return config.effective(api.project_config(path), given)


def _apply_config(a, path: str) -> dict:
    """Fill the run's options the command line left open from `path`'s project configuration
    (each file of a run may belong to another project)."""
    flags = a.__dict__.setdefault("_flags", {"backend": a.backend, "arch": a.arch})
    a.backend, a.arch = flags["backend"], flags["arch"]
    eff = _effective(a, path)
    a.backend = eff["backend"].value
    if getattr(a, "arch", None) is None and eff["arch"].value:
        a.arch = eff["arch"].value
    return eff


def cmd_config(a) -> int:
    """The effective configuration for a file (or the current folder) and where each value came from."""
    import os

    from .. import config
    path = a.file or os.path.join(os.getcwd(), "_")
    cfg = api.project_config(path)
    eff = _effective(a, path)
    parts = []
    cli = _project_flags(a)
    if cli is not None and not cli.empty:
        parts.append(cli)
    parts += cfg.contexts(path)
    from ..compile.project import find_compile_commands, from_compile_commands
    from .. import workspace
    db = a.compile_commands or cfg.compile_commands() or find_compile_commands(path, str(workspace.root_for(path)))
    problems = list(cfg.problems)
    if db:
        try:
            parts.append(from_compile_commands(db, path))
        except AstraError as e:
            problems.append(e.message)
    endpoint = eff["llm.base_url"]
    allowed = endpoint.value is None or config.endpoint_allowed(endpoint.source)
    if a.json:
        _emit_json({"file": path if a.file else None, "config_file": str(cfg.file) if cfg.file else None,
                    "values": {k: {"value": v.value, "source": v.source} for k, v in eff.items()},
                    "tolerances": {k: {"atol": t[0], "rtol": t[1]} for k, t in cfg.tolerances.items()},
                    "compile": [c.to_json() for c in parts], "llm_endpoint_allowed": allowed,
                    "problems": problems})
        return EXIT_OK
    print(f"configuration for {path if a.file else os.getcwd()}")
    print(f"  project file: {cfg.file or 'none (astra.toml, or [tool.astra] in pyproject.toml, up to the repository root)'}")
    width = max(len(k) for k in eff)
    for k, v in eff.items():
        shown = "-" if v.value is None or v.value == [] else (", ".join(v.value) if isinstance(v.value, list) else v.value)
        print(f"  {k.ljust(width)}  {_shown(shown)}  ({_shown(v.source)})")
    for dt, (atol, rtol) in cfg.tolerances.items():
        print(f"  tolerances.{dt}: atol {atol if atol is not None else 'default'}, "
              f"rtol {rtol if rtol is not None else 'default'}  ({cfg.file})")
    if endpoint.value is not None and not allowed:
        print(f"  note: the LLM endpoint {endpoint.value} comes from a project file: it is used only with your "
              f"consent (set {config.TRUST_ENV}=1, or give --base-url yourself)")
    print("compile context (earlier parts win; include folders are searched in this order):")
    for c in parts or []:
        print(f"  {_shown(c.describe())}")
        if c.ignored:
            print(f"    ignored: {_shown(', '.join(c.ignored))}")
    if not parts:
        print("  none (no -I/-D, project file, compile_flags.txt, .clangd or compile_commands.json)")
    for p in problems:
        print(f"astra: warning: {_shown(p)}", file=sys.stderr)
    return EXIT_OK


def _project_flags(a):
    from ..compile import project
    if not (getattr(a, "include", None) or getattr(a, "define", None) or getattr(a, "undefine", None)
            or getattr(a, "std", None)):
        return None
    return project.from_flags(a.include or (), a.define or (), a.std, origin="command line",
                              undefines=getattr(a, "undefine", None) or ())


def cmd_spec(a) -> int:
    proposal = api.infer_spec(api.open_file(a.file, _project(a)), a.kernel, session=_session(a))
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
        _emit_json(sarif.log(run.findings, root=root, invocation=inv))
    elif a.json:
        out = {"passed": not run.failed and not run.bad_input, "executor": ex,
               "verdicts": run.verdicts, "no_spec": run.no_spec, "errors": run.errors}
        if run.static:
            out.update(backend="static", files=run.static)
            if len(run.static) == 1:
                out.update({k: v for k, v in run.static[0].items() if k != "file"})
        if run.gpu_setup:
            out["gpu_setup"] = run.gpu_setup
        _emit_json(out)
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
            print(_shown(f.line_text(path)))

    def error(self, path: str, e: AstraError) -> None:
        from .findings import Finding, from_diagnostic
        from ..model.spec import SpecErrors
        self.bad_input = True
        diags = e.diagnostics if isinstance(e, SpecErrors) else []
        self.errors.append({"file": path, "message": e.message,
                            "diagnostics": [d.to_json() for d in diags]})
        for f in [from_diagnostic(d) for d in diags] or [Finding("input", "error", e.message, e.line or 0, e.col or 0)]:
            self.findings.append((path, f))
            print(_shown(f.line_text(path)), file=sys.stderr)


def _check_file(a, path: str, named: bool, run: _CheckRun) -> None:
    from .findings import Finding, from_diagnostic, from_verdict
    machine = a.json
    snap = api.open_file(path, _project(a, path))
    _apply_config(a, path)
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
    progress = None if (machine or a.quiet) else _progress_printer()
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
            _print_verdicts([v], inferred=inferred is not None)
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
        snap = api.open_file(path, _project(a, path))
        _apply_config(a, path)
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
        _emit_json(out)
    else:
        for f, p in profiles:
            if a.quiet and p not in failed:
                continue
            if len(files) > 1:
                print(f"{f}:")
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
    eff = _apply_config(a, a.file)
    llm = _llm(a, eff)
    ex = _executor(a)
    _arch(a)
    cancel = threading.Event()
    progress = None if a.json or a.quiet else _progress_printer()
    budgets = _budgets(a, eff)
    try:
        result = api.optimize(api.open_file(a.file, _project(a)), a.kernel, llm=llm,
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
        _emit_json(out)
    else:
        _print_markdown(redact.text(result.summary_markdown()))
    if result.unsaved:  # a full disk: said, and the best kernel shown whole where it was not kept
        if result.improved and not a.json:
            print(f"\nThe best kernel (verified; not saved):\n\n{result.best_kernel_source}")
        for u in result.unsaved:
            print(f"astra: {a.file}: {_shown(u)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.interrupted:  # the cluster lost the evaluation twice: not a verdict on the kernel
        print(f"astra: {a.file}: {_shown(result.error or '')}; resume with --resume {result.run_id}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.error:  # the original does not compile or does not pass the gate: nothing to optimize
        print(f"astra: {a.file}: {_shown(result.error)}", file=sys.stderr)
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
    eff = _apply_config(a, a.file[0])
    llm = _llm(a, eff)
    _executor(a)
    _arch(a)
    cancel = threading.Event()
    from .batch_view import LiveTable, print_summary
    display = None if a.json else LiveTable(_console(stderr=True))

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
        _emit_json(result.to_json())
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
    from ..lsp.server import main as serve_main
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

    def progress(event: ProgressEvent) -> None:
        msg = event.message or event.step
        rnd = event.round
        best = event.best_speedup
        head = f"[round {rnd}] " if rnd is not None else ""
        tail = f"  (best {best:.2f}×)" if isinstance(best, (int, float)) else ""
        con.print(f"[dim]{head}{_shown(msg, markup=True)}{tail}[/]")
    return progress


def _print_verdicts(verdicts, inferred: bool = False) -> None:
    """Each verdict's summary and where it ran; its defects follow as compiler-style lines."""
    con = _console()
    for v in verdicts:
        mark = "[green]PASS[/]" if v.passed else "[red]FAIL[/]"
        con.print(f"{mark} {_shown(v.summary, markup=True)}" + (" [dim](under an inferred spec)[/]" if inferred else ""),
                  markup=True)
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
                           help="CUDA sources (.cu, .cuh): files, folders (walked) and globs ('src/**/*.cu')" +
                                ("; one file and kernel is one run; several, a folder, or a file with several "
                                 "specs and no --kernel, a batch of every kernel with a spec"
                                 if name == "optimize" else ""))
        else:
            s.add_argument("file", help="the CUDA source file (.cu, .cuh)")
        s.add_argument("--kernel", "-k", required=kernel_required, metavar="NAME",
                       help="the kernel (its name or qualified name)" + ("" if kernel_required else
                                                                          "; default: every kernel"))
        s.add_argument("--json", action="store_true",
                       help="print one JSON object on stdout, errors included")
        s.add_argument("--quiet", "-q", action="store_true",
                       help="print only what is wrong (and the final result), as compiler-style lines")
        s.set_defaults(fn=fn, format="text")
        return s

    kernels_verb = verb("kernels", "list the kernels in files, folders and globs", cmd_kernels, many=True)
    kernels_verb.add_argument("--wide", action="store_true",
                              help="one row per kernel however narrow the terminal (long lines)")
    spec_verb = verb("spec", "print a proposed harness spec for a kernel", cmd_spec, kernel_required=True)
    verb("pin", "pin the kernel's current source as its reference", cmd_pin, kernel_required=True)
    for name, help_, fn in (("check", "check kernels against their reference", cmd_check),
                            ("profile", "time kernels at their size ladder (the bench sizes, decode- and "
                                        "prefill-like points)", cmd_profile),
                            ("optimize", "optimize kernels with the agent team", cmd_optimize)):
        s = verb(name, help_, fn, many=True)
        s.add_argument("--backend", choices=["auto", "gpu", "cpu", "static"], default=None,
                       help="where kernels run: the GPU (CuPy), the CPU backend (correctness only), "
                            "static (compile checks only) or auto, the best available (default: the project's "
                            "`backend`, else auto)")
        s.add_argument("--arch", default=None,
                       help=f"target architecture for static checks (default: the project's `arch`, else the "
                            f"GPU's own, else {DEFAULT_ARCH})")
        s.add_argument("--cluster", metavar="WHERE",
                       help="run kernels on Ray: local (a runtime started here), ray://HOST:PORT, or auto "
                            "(RAY_ADDRESS if set); default: this machine's workers")
    c = sub.choices["check"]
    c.add_argument("--format", choices=["text", "json", "sarif"], default="text",
                   help="output format: text (default: compiler-style lines for what is wrong), json (same as "
                        "--json) or sarif (SARIF 2.1.0 for CI code scanning: one result per defect)")
    c.add_argument("--seed", type=_seed, default=None, metavar="N",
                   help="the gate's input seed: a failure prints its seed, and --seed replays it (default: fresh)")
    c.add_argument("--infer", action="store_true",
                   help="check kernels without a spec under the spec `astra spec` proposes (nothing is written)")
    for s in (spec_verb, *(sub.choices[v] for v in ("check", "profile", "optimize"))):
        s.add_argument("-I", dest="include", action="append", metavar="DIR",
                       help="project include directory (repeatable; searched before compile_commands.json's)")
        s.add_argument("-D", dest="define", action="append", metavar="NAME[=VALUE]", help="define a macro (repeatable)")
        s.add_argument("-U", dest="undefine", action="append", metavar="NAME",
                       help="leave a macro undefined, also one Astra would add (a PyTorch extension's "
                            "__CUDA_NO_HALF_OPERATORS__ …), as a build's -U does (repeatable)")
        s.add_argument("--std", choices=["c++11", "c++14", "c++17", "c++20"], help="C++ standard (default c++17)")
        s.add_argument("--compile-commands", metavar="PATH",
                       help="compile_commands.json to use (default: the nearest one, also under build/)")
    sub.choices["profile"].add_argument("--ncu", action="store_true", help="collect Nsight Compute metrics")
    for v in ("profile", "optimize"):
        sub.choices[v].add_argument(
            "--sizes", choices=["ladder", "bench"], default="ladder",
            help="time at the size ladder: the spec's bench sizes plus decode-like (1 and 32 rows) and "
                 "prefill-like points (default), or at the bench sizes alone")
    o = sub.choices["optimize"]
    o.add_argument("--rounds", type=_rounds, default=None,
                   help="rounds in all (default 5; with --resume: an interrupted run's own total, "
                        "a finished run's rounds, i.e. only report it)")
    o.add_argument("--tune", type=int, default=None, metavar="N",
                   help="parameter points the tuning stage may time after the offline team's rounds "
                        "(default 8; 0: none; needs a GPU)")
    o.add_argument("--fresh", action="store_true",
                   help="search even where .astra/tuning/ remembers this kernel's tuning on this GPU model "
                        "(by default a rerun replays it, verifies and times it again, and stops there)")
    o.add_argument("--llm", choices=["offline", "openai"], default=None,
                   help="offline (default without an endpoint) or an OpenAI-compatible endpoint")
    o.add_argument("--model", metavar="NAME", help="model name at the endpoint (or ASTRA_MODEL, or the project's llm.model)")
    o.add_argument("--base-url", metavar="URL",
                   help="base URL of an OpenAI-compatible endpoint (or ASTRA_BASE_URL; default: OpenAI's); "
                        "the key comes from ASTRA_API_KEY or OPENAI_API_KEY, never from a file")
    o.add_argument("--reasoning-effort", choices=["minimal", "low", "medium", "high"], default=None,
                   help="reasoning effort for reasoning models (then no temperature is sent)")
    o.add_argument("--temperature", type=_number(0, 2), default=None, metavar="T",
                   help="sampling temperature, 0 to 2 (default 0.2)")
    o.add_argument("--max-tokens", dest="max_output_tokens", type=_whole(16, 1 << 20), default=None, metavar="N",
                   help="most tokens one reply may have (default 8192)")
    o.add_argument("--llm-timeout", type=_number(1, 3600), default=None, metavar="S",
                   help="seconds one model call may take (default 120)")
    o.add_argument("--token-budget", dest="max_tokens", type=_whole(1, 10**10), default=None, metavar="N",
                   help="LLM tokens the run may use, as the endpoint reports them (default: the project's "
                        "budgets.tokens, else no limit)")
    o.add_argument("--time-budget", dest="max_seconds", type=_number(1, 7 * 86400), default=None, metavar="S",
                   help="wall-clock seconds for the run: no round starts and no model call runs past it "
                        "(default: the project's budgets.seconds, else no limit)")
    o.add_argument("--candidates", type=int, default=1, metavar="K",
                   help="candidates per round, evaluated at once where the executor has room (default 1)")
    o.add_argument("--write", action="store_true", help="put the best kernel into the file")
    o.add_argument("--report", metavar="DIR", help="write an HTML report to DIR")
    runs = o.add_mutually_exclusive_group()
    runs.add_argument("--resume", metavar="RUN_ID",
                      help="continue a logged run from .astra/runs/ ('last': the newest of this kernel), or "
                           "a batch from .astra/batches/ ('last': the newest batch, when a batch is given)")
    runs.add_argument("--list-runs", action="store_true", help="list the logged runs of this file and exit")
    cfg = sub.add_parser("config", help="print the effective configuration and where each value came from",
                         description="print the effective configuration for a file (default: the current folder) "
                                     "and where each value came from: flags, the environment, astra.toml or "
                                     "[tool.astra] in pyproject.toml, compile_flags.txt, .clangd, compile_commands.json")
    cfg.add_argument("file", nargs="?", metavar="FILE", help="the CUDA source whose configuration to show")
    cfg.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cfg.add_argument("-I", dest="include", action="append", metavar="DIR", help=argparse.SUPPRESS)
    cfg.add_argument("-D", dest="define", action="append", metavar="NAME[=VALUE]", help=argparse.SUPPRESS)
    cfg.add_argument("-U", dest="undefine", action="append", metavar="NAME", help=argparse.SUPPRESS)
    cfg.add_argument("--std", help=argparse.SUPPRESS)
    cfg.add_argument("--compile-commands", metavar="PATH", help=argparse.SUPPRESS)
    cfg.set_defaults(fn=cmd_config, format="text", quiet=False)
    s = sub.add_parser("serve", help="run the language server on stdio (for editors)",
                       description="run the language server on stdio (for editors)")
    s.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(fn=cmd_serve, format="text", quiet=False)
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
            print(f"astra: {_shown(d.human(path))}", file=sys.stderr)
    else:
        where = f"{path}:{e.line + 1}:{(e.col or 0) + 1}: " if e.line is not None and path else ""
        print(f"astra: {where}{_shown(e.message)}", file=sys.stderr)
    if args.json:
        if args.format == "sarif" and diagnostics and path:
            from .. import workspace
            _emit_json(sarif.log([(path, sarif.from_diagnostic(d)) for d in diagnostics],
                                 root=str(workspace.root_for(path))))
        else:
            _emit_json(_error_json(e.message, kind="spec" if diagnostics else "bad_input", file=path, line=e.line,
                                   col=e.col, diagnostics=diagnostics, exit_code=e.exit_code))
    return e.exit_code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
