"""What the editor shows, as pure functions of a document's text and the server's state: code
lenses, the hover report, inlay hints, the code-action list, the status payload. No I/O and no
server here: they are tested without a client (tests/lsp/test_views.py)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from lsprotocol import types

from astra_cuda import contract, standing
from astra_cuda.model import spec_help
from astra_cuda.lsp import anchor as anchoring
from astra_cuda.lsp import answers
from astra_cuda.plain import md, printable
from astra_cuda.lsp.convert import EditorSpan, diagnostic, lsp_diagnostic, lsp_range, span_of, text_in
from astra_cuda.lsp.state import DocState, KernelState, Optimization, verified_cases

if TYPE_CHECKING:
    from collections.abc import Sequence

    from astra_cuda.snapshot import KernelInfo

APPLY_KIND = types.CodeActionKind.RefactorRewrite
OPTIMIZE_KIND = types.CodeActionKind.Refactor
SPEC_KIND = types.CodeActionKind.QuickFix
NO_SPEC = "no-spec"          # the diagnostic the Add spec quick fix answers
GUESS = "spec-guess"         # a line of an inserted spec that inference guessed


def has_spec(k: KernelInfo) -> bool:
    """The kernel has a spec comment (loaded or not: a broken one still counts)."""
    return k.spec is not None or k.kernel.spec is not None


def full_span(k: KernelInfo) -> EditorSpan:
    """The kernel with its spec comment: where its lens sits and what 'in the kernel' means."""
    s = span_of(k.kernel.span)
    c = k.kernel.spec
    if c is not None:
        cs = span_of(c.span)
        if (cs.start_line, cs.start_col) < (s.start_line, s.start_col):
            return EditorSpan(cs.start_line, cs.start_col, s.end_line, s.end_col)
    return s


def kernel_at(kernels: Sequence[KernelInfo], line: int) -> KernelInfo | None:
    return next((k for k in kernels if full_span(k).contains_line(line)), None)


def kernel_standing(k: KernelInfo, st: DocState, why_not_run: str = "") -> standing.Standing:
    """What is known about the kernel's correctness, in measured words (astra_cuda.standing)."""
    ks = st.per_kernel.get(k.name)
    compiled = st.static_done and not any(d.severity == types.DiagnosticSeverity.Error for d in st.static_diags)
    return standing.of_check(ks.verdict if ks else None, has_spec=has_spec(k), spec_ok=k.spec is not None,
                             error=ks.verdict_error if ks else "", compiled=compiled, why_not_run=why_not_run)


def report_command(uri: str, kernel: str) -> str:
    """A command URI that opens the report view (works in hovers and under Remote-SSH)."""
    return f"command:{contract.client_command('showReport')}?{quote(json.dumps([uri, kernel]))}"


def report_page(uri: str, k: KernelInfo, ks: KernelState | None) -> str:
    """The report view's page: the kernel's check, profile and optimization (astra_cuda.report)."""
    from astra_cuda import report
    notes = [] if has_spec(k) else ["No harness spec yet: use the quick fix **Add harness spec**."]
    opt = ks.optimization if ks else None
    if ks is not None and ks.verdict is None and ks.verdict_error:
        notes.append(f"**Check**: could not run — {md(ks.verdict_error)}")
    if opt is not None and opt.status != "done":
        notes.append(f"**Optimization** {opt.status}: {md(opt.message)}")
    return report.kernel_page(k.name, verdict=ks.verdict if ks else None,
                              profile=ks.profile.profile if ks and ks.profile else None,
                              result=opt.result if opt is not None and opt.status == "done" else None,
                              notes=notes, uri=uri, apply_command=contract.client_command("applyOptimized"))


def report_markdown(uri: str, k: KernelInfo, ks: KernelState | None, where: standing.Standing | None = None) -> str:
    """The hover's Markdown. Everything that came from the user's code (what a kernel printed, a
    compiler's message, a model's text) goes in through `plain.md`: only Astra's own strings
    carry links (the report's `command:` URI)."""
    out = [f"### Astra · `{k.name}`"]
    where = where or kernel_standing(k, DocState(per_kernel={k.name: ks} if ks else {}))
    if ks and ks.verdict is not None:
        v = ks.verdict
        out.append(f"**Check: {md(where.short)}** — {md(where.detail)}")
        out.append(md(v.summary))
        if v.reference:
            out.append(f"Reference: {md(v.reference)}")
    elif ks and ks.verdict_error:
        out.append(f"**Check**: could not run — {md(ks.verdict_error)}")
    else:
        out.append(f"**{md(where.short)}** — {where.detail}")
    if ks and ks.profile is not None:
        out.append(f"**Profile**: {md(ks.profile.profile.summary_line())}")
        if ks.profile.profile.per_size_line():
            out.append(f"Per size: {md(ks.profile.profile.per_size_line())}")
    opt = ks.optimization if ks else None
    if opt is not None:
        if opt.status == "done" and opt.result is not None:
            if opt.improved:
                out.append(f"**Rewrite: {md(opt.title())}**")
            out.append(opt.result.summary_markdown())
            out.append(f"[Open the full report]({report_command(uri, k.name)})")
        elif opt.status == "running":
            out.append(f"**Optimizing…** {md(opt.message)}")
        else:
            out.append(f"**Last optimization** {opt.status}: {md(opt.message)}")
    return "\n\n".join(out)


def hover(uri: str, kernels: Sequence[KernelInfo], st: DocState, position: types.Position) -> types.Hover | None:
    """The report, over a kernel's name; what a key means, over a key of its spec comment."""
    for k in kernels:
        doc = spec_help.hover(k.kernel, position.line, position.character)
        if doc is not None:
            text, (l0, c0, l1, c1) = doc
            return types.Hover(contents=types.MarkupContent(types.MarkupKind.Markdown, text),
                               range=lsp_range(EditorSpan(l0, c0, l1, c1)))
    for k in kernels:
        s = span_of(k.kernel.name_span)
        if s.start_line <= position.line <= s.end_line and s.start_col <= position.character <= s.end_col:
            text = report_markdown(uri, k, st.per_kernel.get(k.name), kernel_standing(k, st))
            return types.Hover(contents=types.MarkupContent(types.MarkupKind.Markdown, text),
                               range=lsp_range(s))
    return None


def reading_hover(text: str) -> types.Hover:
    """What a hover says while the document's kernels are still being read (the next one, once
    they are, is the kernel's report or the spec key's help)."""
    lines = text.count("\n") + 1
    return types.Hover(contents=types.MarkupContent(
        types.MarkupKind.Markdown, f"*Astra is reading this file's kernels ({lines:,} lines)… hover again in a moment.*"))


# Optimize starts through the client's command wherever it is offered (lens, light bulb, palette,
# report): the client asks the first-use consent and ends in the same preview-and-apply.
OPTIMIZE = contract.client_command("optimizeKernel")


def _optimize_lens(opt: Optimization | None, text: str) -> tuple[str, str]:
    """(title, client or server command) of the optimization lens."""
    if opt is None or opt.status in ("failed", "cancelled"):
        return f"Optimize{f' (last: {opt.status})' if opt else ''}", OPTIMIZE
    if opt.status == "running":
        best = f", best {opt.best_speedup:.2f}×" if opt.best_speedup else ""
        return f"Optimizing… {opt.message}{best} (cancel)", contract.command("cancelOptimize")
    if opt.rewrite is None:
        return "No better version found (Optimize again)", OPTIMIZE
    if opt.rewrite.applied(text):
        return f"✓ optimized version in place ({opt.title()})", contract.client_command("showReport")
    if opt.rewrite.old not in text:
        return "Optimization result is stale (kernel edited): Optimize again", OPTIMIZE
    if not opt.measured:   # never the default action: the report says so; Apply is a deliberate command
        return f"Rewrite {opt.title()}", contract.client_command("showReport")
    return f"Apply optimized kernel ({opt.title()})", contract.client_command("applyOptimized")


def lens_title(text: str) -> str:
    """A lens title is plain text, but the editor draws `$(name)` in it as an icon: a message
    quoted into it (a model's plan title, a kernel's output) stays text."""
    return printable(text).replace("$(", "\\$(")


def lenses(uri: str, text: str, kernels: Sequence[KernelInfo], st: DocState,
           why_not_run: str = "") -> list[types.CodeLens]:
    """Above each kernel (and its spec): what its check showed, profile, optimization state."""
    out: list[types.CodeLens] = []
    report = contract.client_command("showReport")
    for k in kernels:
        s = full_span(k)
        at = types.Range(start=types.Position(line=s.start_line, character=0),
                         end=types.Position(line=s.start_line, character=0))

        def lens(title: str, command: str, k: KernelInfo = k, at: types.Range = at) -> None:
            out.append(types.CodeLens(range=at, command=types.Command(title=lens_title(title), command=command,
                                                                      arguments=[uri, k.name])))

        if not has_spec(k):
            # Checking, profiling and optimizing all need a spec: offer the one step that helps.
            lens("Astra: add a harness spec", contract.command("addSpec"))
            continue
        ks = st.per_kernel.get(k.name) or KernelState()
        if st.checking and ks.verdict is None and not ks.verdict_error:
            lens("checking…", report)
        else:
            where = kernel_standing(k, st, why_not_run)
            lens(where.short, report if where.level not in ("unknown", "compiled") or k.spec is None
                 else contract.client_command("checkFile"))
        if ks.profiling:
            lens("profiling…", report)
        elif ks.profile is not None:
            lens(ks.profile.profile.summary_line(), contract.command("profile"))
        else:
            lens("Profile", contract.command("profile"))
        lens(*_optimize_lens(ks.optimization, text))
    return out


def inlay_hints(text: str, kernels: Sequence[KernelInfo], st: DocState, shown: types.Range) -> list[types.InlayHint]:
    """The profile's hottest lines (Nsight Compute), while the kernel is as it was profiled."""
    lines = text.splitlines()
    hints = []
    for k in kernels:
        ks = st.per_kernel.get(k.name)
        prof = ks.profile if ks else None
        if prof is None or not prof.profile.hot_lines:
            continue
        span = span_of(k.kernel.span)
        if text_in(text, span) != prof.anchor.kernel_text:
            continue  # the kernel changed since it was profiled: the lines mean nothing now
        shift = span.start_line - prof.anchor.span.start_line
        for line, share, label in prof.profile.hot_lines:
            n = line + shift
            if shown.start.line <= n <= shown.end.line and 0 <= n < len(lines):
                hints.append(types.InlayHint(position=types.Position(line=n, character=len(lines[n].rstrip("\r\n"))),
                                             label=label or f"{share:.0%}", padding_left=True))
    return hints


def _wanted(kind: str, only: Sequence[str] | None) -> bool:
    return not only or any(kind == o or kind.startswith(o + ".") for o in only)


def fixes(uri: str, version: int, diagnostics: Sequence[types.Diagnostic]) -> list[types.CodeAction]:
    """"Change to …" for each diagnostic that says what its range should read (a spec's "did
    you mean")."""
    out = []
    for d in diagnostics:
        fix = d.data.get("fix") if isinstance(d.data, dict) else None
        if not isinstance(fix, str) or not fix:
            continue
        ident = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=ident, edits=[types.TextEdit(range=d.range, new_text=fix)])])
        out.append(types.CodeAction(title=f"Change to {fix}", kind=SPEC_KIND, diagnostics=[d], edit=edit,
                                    is_preferred=True))
    return out


def code_actions(uri: str, version: int, text: str, k: KernelInfo, ks: KernelState | None,
                 only: Sequence[str] | None, diagnostics: Sequence[types.Diagnostic] = ()) -> list[types.CodeAction]:
    """Did-you-mean fixes, apply (resolved lazily, with its edit: preferred only when its speed
    was measured), optimize or cancel, add a spec (answering the no-spec diagnostic) or pin."""
    opt = ks.optimization if ks else None
    actions = fixes(uri, version, diagnostics)
    rw = opt.rewrite if opt is not None and opt.status == "done" else None
    if opt is not None and rw is not None and not rw.applied(text):
        placed = anchoring.place(rw, version, text)
        title = (f"Apply optimized kernel ({opt.title()})" if opt.measured
                 else f"Apply rewrite anyway — {opt.title()}")
        action = types.CodeAction(title=title, kind=APPLY_KIND, is_preferred=opt.measured,
                                  data={"action": "apply", "uri": uri, "kernel": k.name})
        if placed.span is None:
            action.disabled = types.CodeActionDisabled(reason=placed.reason)
        actions.append(action)
    if opt is not None and opt.status == "running":
        actions.append(types.CodeAction(
            title=f"Cancel optimizing `{k.name}` ({opt.message or 'starting'})", kind=OPTIMIZE_KIND,
            command=types.Command(title="Cancel optimization", command=contract.command("cancelOptimize"),
                                  arguments=[uri, k.name])))
    else:
        actions.append(types.CodeAction(
            title=f"Optimize kernel `{k.name}`", kind=OPTIMIZE_KIND,
            command=types.Command(title="Optimize kernel", command=OPTIMIZE,
                                  arguments=[uri, k.name])))
    if not has_spec(k):
        answers = [d for d in diagnostics if d.code == NO_SPEC]
        actions.append(types.CodeAction(title=f"Add harness spec for `{k.name}`", kind=SPEC_KIND,
                                        diagnostics=answers or None, is_preferred=True,
                                        data={"action": "spec", "uri": uri, "kernel": k.name}))
    else:
        actions.append(types.CodeAction(
            title=f"Pin current version of `{k.name}` as reference", kind=OPTIMIZE_KIND,
            command=types.Command(title="Pin as reference", command=contract.command("pin"),
                                  arguments=[uri, k.name])))
    return [a for a in actions if a.kind is not None and _wanted(a.kind, only)]


def status(uri: str, st: DocState, cluster: str = "", restricted: str | None = None,
           gpu_setup: dict[str, str] | None = None, why_not_run: str = "") -> dict[str, Any]:
    """The status notification's payload (client/src/contract.ts: DocStatus). `cluster`: where
    kernels run when not on this machine (e.g. 'Ray ray://gpu-box:10001'); `restricted`: why
    kernels are not run (an untrusted workspace); `gpu_setup`: a GPU is here but not used, why
    and the command that fixes it."""
    verdicts = [ks.verdict for ks in st.per_kernel.values() if ks.verdict is not None]
    running = [(n, ks.optimization) for n, ks in st.per_kernel.items()
               if ks.optimization and ks.optimization.status == "running"]
    levels = [kernel_standing(k, st, why_not_run or (restricted or "")).level for k in st.kernels] or \
        [standing.of_check(v).level for v in verdicts]   # kernels not read yet: what their checks said
    failing = sum(1 for v in verdicts if not v.passed and v.status != "unsupported") + \
        sum(1 for ks in st.per_kernel.values() if ks.verdict_error)
    words, tooltip = standing.summary(levels, failing)
    return answers.DocStatus(
        uri=uri,
        checking=st.checking,
        errors=sum(1 for d in st.static_diags if d.severity == types.DiagnosticSeverity.Error),
        verified=sum(1 for v in verdicts if v.passed),
        failing=failing,
        summary=words,
        tooltip=tooltip,
        rewrites=[n for n, ks in st.per_kernel.items() if ks.optimization and ks.optimization.rewrite],
        profiler_reports=[n for n, ks in st.per_kernel.items()
                          if ks.profile is not None and ks.profile.profile.ncu_report_path],
        optimizing=[answers.Optimizing(n, o.message, o.best_speedup) for n, o in running],
        where=next((v.ran_on for v in verdicts if v.ran_on), ""),
        cluster=cluster,
        restricted=restricted,
        gpu_setup=answers.GpuSetup(gpu_setup["problem"], gpu_setup["fix"]) if gpu_setup else None,
    ).to_json()


def optimization_json(name: str, opt: Optimization) -> dict[str, Any]:
    """The optimize command's answer (client/src/contract.ts: OptimizeAnswer)."""
    if opt.result is None:
        return answers.OptimizeAnswer(opt.status, kernel=name, message=opt.message).to_json()
    return answers.OptimizeAnswer(opt.status, kernel=name, message=opt.message, speedup=opt.result.speedup,
                                  verified_cases=verified_cases(opt.result), improved=opt.improved,
                                  title=opt.title(), report_path=opt.result.report_path or "").to_json()


def kernel_list(kernels: Sequence[KernelInfo]) -> list[dict[str, Any]]:
    """The kernels command's answer (client/src/contract.ts: KernelEntry)."""
    return [answers.KernelEntry(k.name, span_of(k.kernel.span).start_line, span_of(k.kernel.span).end_line,
                                has_spec(k)).to_json() for k in kernels]


def live_diagnostics(kernels: Sequence[KernelInfo], st: DocState, text: str) -> list[types.Diagnostic]:
    """What one version of the text says at once, without compiling: each spec's problems at
    their keys (with "did you mean"), a hint on each kernel without a spec (the Add spec quick
    fix answers it), and the lines of an inserted proposal that inference guessed, while they
    read as inserted (an edit of the line clears its note)."""
    lines = text.split("\n")
    out: list[types.Diagnostic] = []
    for k in kernels:
        out.extend(lsp_diagnostic(d, lines) for d in k.spec_errors)
        if not has_spec(k):
            out.append(diagnostic(lsp_range(span_of(k.kernel.name_span)),
                                  f"`{k.name}` has no harness spec, so it is compiled but never run: "
                                  "Add harness spec proposes one", NO_SPEC, types.DiagnosticSeverity.Information))
    kept = []
    for g in st.guesses:
        spec = next((k.kernel.spec for k in kernels if k.name == g.kernel and k.kernel.spec is not None), None)
        if spec is None:
            continue
        span = span_of(spec.span)
        row = next((i for i in range(span.start_line, min(span.end_line + 1, len(lines))) if lines[i] == g.text), None)
        if row is None:
            continue   # edited (or gone): the user has looked at it
        kept.append(g)
        rng = types.Range(start=types.Position(line=row, character=len(g.text) - len(g.text.lstrip())),
                          end=types.Position(line=row, character=len(g.text.rstrip())))
        out.append(diagnostic(rng, f"inferred: {g.note}", GUESS, types.DiagnosticSeverity.Information))
    st.guesses = kept
    return out


def completion(kernels: Sequence[KernelInfo], position: types.Position) -> list[types.CompletionItem]:
    """Completion inside a spec comment (astra_cuda.model.spec_help): keys, tables, element types,
    inits, the kernel's parameter and size names."""
    kinds = {"key": types.CompletionItemKind.Property, "table": types.CompletionItemKind.Module,
             "type": types.CompletionItemKind.TypeParameter, "init": types.CompletionItemKind.EnumMember,
             "size": types.CompletionItemKind.Variable, "param": types.CompletionItemKind.Field,
             "function": types.CompletionItemKind.Function}
    for k in kernels:
        sizes = list(k.spec.sizes) if k.spec is not None else None
        items = spec_help.completions(k.kernel, position.line, position.character, sizes)
        if items:
            return [types.CompletionItem(
                label=c.label, kind=kinds.get(c.kind), detail=c.detail,
                documentation=types.MarkupContent(types.MarkupKind.Markdown, c.doc) if c.doc else None,
                # an edit of the word (or the string's text) under the cursor, not an insertion
                # before it: choosing `bfloat16` inside `"float"` must not give `"bfloat16float"`
                text_edit=types.TextEdit(types.Range(types.Position(position.line, c.replace[0]),
                                                     types.Position(position.line, c.replace[1])),
                                         c.insert or c.label) if c.replace else None,
                insert_text=None if c.replace else c.insert or c.label,
                insert_text_format=types.InsertTextFormat.Snippet if c.insert else types.InsertTextFormat.PlainText,
                sort_text=f"{i:03d}") for i, c in enumerate(items)]
    return []
