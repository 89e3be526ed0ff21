"""What the editor shows, as pure functions of the text and the server's state: no client, no
server process, no worker."""
from pathlib import Path

from lsprotocol import types

from astra_cuda import api, contract
from astra_cuda.gate.verdict import CaseInfo, Coverage, Failure, Verdict
from astra_cuda.lsp import analysis, anchor, views
from astra_cuda.lsp.state import DocState, KernelState, Optimization, hover_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PATH = str(EXAMPLES / "silu_and_mul.cu")
TEXT = (EXAMPLES / "silu_and_mul.cu").read_text()
NO_SPEC = TEXT[:TEXT.index("/* @astra")] + TEXT[TEXT.index("*/", TEXT.index("/* @astra")) + 2:]


def kernels(text=TEXT):
    return api.kernels(api.snapshot(text, PATH))


def titles(lenses):
    return [(lens.command.title, lens.command.command) for lens in lenses]


def passed(cases=42):
    return Verdict("silu_and_mul", "cpu", "passed", coverage=Coverage(cases=cases), reference="kernel pinned")


def test_a_kernel_without_spec_gets_one_lens_that_adds_one():
    (k,) = kernels(NO_SPEC)
    assert titles(views.lenses("file:///x.cu", NO_SPEC, [k], DocState())) == [
        ("Astra: add a harness spec", "astra_cuda.lsp.addSpec")]


def test_lenses_follow_the_state_of_check_profile_and_optimization():
    (k,) = kernels()
    st = DocState()
    assert titles(views.lenses("u", TEXT, [k], st)) == [("not checked yet", "astra.checkFile"),
                                                         ("Profile", "astra_cuda.lsp.profile"),
                                                         ("Optimize", "astra.optimizeKernel")]
    st.checking = True
    assert titles(views.lenses("u", TEXT, [k], st))[0] == ("checking…", "astra.showReport")
    st.kernel(k.name).verdict = passed()
    st.kernel(k.name).optimization = Optimization("running", anchor.anchor_for(k, 1, TEXT), TEXT, message="round 1",
                                                  best_speedup=1.25)
    lenses = views.lenses("u", TEXT, [k], st)
    assert titles(lenses)[0] == ("✓ matches the reference on 42 cases (cpu)", "astra.showReport")
    assert titles(lenses)[2] == ("Optimizing… round 1, best 1.25× (cancel)", "astra_cuda.lsp.cancelOptimize")
    spec_line = k.kernel.spec.span.start_line
    assert {lens.range.start.line for lens in lenses} == {spec_line}  # above the kernel and its spec
    assert all(lens.command.arguments == ["u", "silu_and_mul"] for lens in lenses)


def test_a_hover_looks_only_at_the_kernels_of_its_line():
    """The server answers a hover from the snapshot's index by line (built with the snapshot, off
    the loop): each kernel is found on its name's and its spec comment's lines, and nowhere else."""
    text = "".join(f"/* @astra\ngrid = [1]\nblock = [1]\n*/\n__global__ void k{i}(float* x) {{ x[0] = {i}; }}\n\n"
                   for i in range(300))
    ks = kernels(text)
    st = DocState(hover_lines=hover_lines(ks))
    for i in (0, 137, 299):
        k = ks[i]
        name, spec = k.kernel.name_span, k.kernel.spec
        assert spec is not None and st.kernels_on(name.start_line) == [k]
        assert all(st.kernels_on(line) == [k] for line in range(spec.span.start_line, spec.span.end_line + 1))
        h = views.hover("u", st.kernels_on(name.start_line), st,
                        types.Position(line=name.start_line, character=name.start_col + 1))
        assert h is not None and f"`k{i}`" in h.contents.value
    assert st.kernels_on(ks[5].kernel.name_span.start_line + 1) == []   # the blank line after a kernel


def test_a_failed_or_unrunnable_check_reads_as_such():
    (k,) = kernels()
    st = DocState()
    st.kernel(k.name).verdict = Verdict("silu_and_mul", "cpu", "unsupported")
    assert titles(views.lenses("u", TEXT, [k], st))[0][0] == "compiled only — needs a GPU to run"
    st.kernel(k.name).verdict, st.kernel(k.name).verdict_error = None, "no backend"
    assert titles(views.lenses("u", TEXT, [k], st))[0][0] == "✗ check could not run"
    assert "could not run — no backend" in views.report_markdown("file:///w/k.cu", k, st.kernel(k.name))


def test_the_hover_report_over_the_kernel_name_only():
    (k,) = kernels()
    st = DocState()
    st.kernel(k.name).verdict = passed()
    name = k.kernel.name_span
    h = views.hover("file:///w/k.cu", [k], st, types.Position(line=name.start_line, character=name.start_col + 1))
    assert h is not None and "matches the reference on 42 cases" in h.contents.value
    assert "Reference: kernel pinned" in h.contents.value
    assert views.hover("file:///w/k.cu", [k], st, types.Position(line=name.start_line + 2, character=0)) is None


def test_code_actions_offer_optimize_and_pin_or_a_spec():
    (k,) = kernels()
    acts = views.code_actions("u", 1, TEXT, k, None, None)
    assert [a.title for a in acts] == ["Optimize kernel `silu_and_mul`", "Pin current version of `silu_and_mul` as "
                                                                           "reference"]
    # the light bulb starts Optimize as the lens and the palette do: the client's command, which asks
    # the first-use consent and ends in the same preview-and-apply (the server's own command, run by
    # the editor, would drop a consent answer unseen)
    assert acts[0].command.command == contract.client_command("optimizeKernel") == "astra.optimizeKernel"
    (bare,) = kernels(NO_SPEC)
    acts = views.code_actions("u", 1, NO_SPEC, bare, None, [types.CodeActionKind.QuickFix])
    assert [(a.title, a.data["action"]) for a in acts] == [("Add harness spec for `silu_and_mul`", "spec")]


def test_status_counts_errors_verdicts_and_running_optimizations():
    (k,) = kernels()
    st = DocState()
    st.kernel("a").verdict = passed()
    st.kernel("b").verdict = Verdict("b", "cpu", "failed")
    st.kernel("c").verdict_error = "boom"
    st.kernel("d").optimization = Optimization("running", anchor.anchor_for(k, 1, TEXT), message="m")
    s = views.status("u", st)
    assert (s["verified"], s["failing"], s["errors"]) == (1, 2, 0) and s["summary"] == "2 failing"
    assert s["optimizing"] == [{"kernel": "d", "message": "m", "bestSpeedup": None}]


def test_verdict_failures_land_on_their_lines_and_the_rest_is_counted():
    lines = TEXT.splitlines()
    where = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=1))
    case = CaseInfo({"d": 4}, "normal", 1)
    failures = [Failure("compare", f"wrong {i}", case, line=3) for i in range(7)]
    diags = analysis.verdict_diagnostics([Verdict("silu_and_mul", "cpu", "failed", failures=failures)], lines, where)
    assert len(diags) == analysis.MAX_FAILURES_SHOWN + 1
    assert all(d.range.start.line == 2 for d in diags[:-1]) and "wrong 0" in diags[0].message
    assert "2 more failure(s)" in diags[-1].message and diags[-1].range == where
    unsupported = analysis.verdict_diagnostics([Verdict("silu_and_mul", "cpu", "unsupported")], lines, where)
    assert unsupported[0].severity == types.DiagnosticSeverity.Warning
    assert analysis.verdict_diagnostics([passed()], lines, where) == []


def test_kernel_list_for_the_client():
    (k,) = kernels()
    assert views.kernel_list([k]) == [{"name": "silu_and_mul", "startLine": k.kernel.span.start_line,
                                       "endLine": k.kernel.span.end_line, "hasSpec": True}]
    assert views.kernel_at([k], k.kernel.spec.span.start_line) is k


def test_optimization_state_without_result_has_a_title():
    (k,) = kernels()
    opt = Optimization("failed", anchor.anchor_for(k, 1, TEXT), message="no")
    assert views.optimization_json("silu_and_mul", opt) == {"kernel": "silu_and_mul", "status": "failed",
                                                            "message": "no"}
    assert KernelState().optimization is None


def test_the_report_page_and_its_command_link():
    (k,) = kernels()
    st = DocState()
    v = passed()
    v.coverage.matrix = [{"sizes": "n=1", "distribution": "normal", "cases": 2, "failed": 0}]
    st.kernel(k.name).verdict = v
    page = views.report_page("file:///w/k.cu", k, st.kernel(k.name))
    assert "<table class='matrix'>" in page and "matches the reference on 42 cases" in page and "file://" not in page.replace(
        "file%3A///w/k.cu", "").replace("file:///w/k.cu", "")
    link = views.report_command("file:///w/k.cu", k.name)
    assert link.startswith("command:astra.showReport?") and "file%3A///w/k.cu" in link


def test_the_status_says_why_nothing_runs_and_how_to_use_the_gpu():
    st = DocState()
    s = views.status("u", st, "", "this workspace is not trusted", {"problem": "no CuPy", "fix": "pip install x"})
    assert s["restricted"] == "this workspace is not trusted" and s["gpuSetup"]["fix"] == "pip install x"
    assert views.status("u", st)["restricted"] is None


# ---- every word is a measurement (issue 26) -----------------------------------------------------

def lens0(st, text=TEXT, why=""):
    (k,) = kernels(text)
    return titles(views.lenses("u", text, [k], st, why))[0][0]


def test_the_words_say_only_what_was_measured():
    (k,) = kernels()
    st = DocState()
    assert lens0(st) == "not checked yet" and views.status("u", st)["summary"] == "not checked"
    st.static_done = True   # compiled, nothing ran (an untrusted folder)
    assert lens0(st, why="this workspace is not trusted") == "compiled only — not run"
    assert views.status("u", DocState())["summary"] != "0 verified"
    own = passed(14)
    own.compared = False
    st.kernel(k.name).verdict = own
    assert lens0(st) == "✓ self-consistent on 14 cases (no reference)"
    assert "says nothing about correctness" in views.hover("u", [k], st, types.Position(
        line=k.kernel.name_span.start_line, character=k.kernel.name_span.start_col + 1)).contents.value
    assert views.status("u", st)["summary"] == "1 self-consistent"
    st.kernel(k.name).verdict = passed(14)
    assert lens0(st) == "✓ matches the reference on 14 cases (cpu)"
    assert views.status("u", st)["summary"] == "1 matches reference"


def finished(k, speedup=None, gpu=""):
    from astra_cuda.agents.result import OptimizeResult
    from astra_cuda.evaluation import Check, Evaluation, ProfileSummary, SizeTiming
    check = Check(True, "passed", cases=14)
    prof = ProfileSummary((SizeTiming({"n": 1}, speedup, 1.0),), device=gpu) if speedup else None
    best = TEXT.replace("silu(x) * y", "y * silu(x)")
    ev = Evaluation(check, prof, speed_note="" if prof else "speed is not measured on the CPU backend", gpu=gpu)
    result = OptimizeResult(k.name, PATH, "offline", TEXT, best, ev, ev)
    opt = Optimization("done", anchor.anchor_for(k, 1, TEXT), TEXT, result=result)
    opt.rewrite = anchor.rewrite_for(TEXT, best, opt.anchor.span, 1)
    return opt


def test_a_rewrite_whose_speed_was_not_measured_is_never_the_default_action():
    (k,) = kernels()
    st = DocState()
    st.kernel(k.name).optimization = finished(k)
    lens = titles(views.lenses("u", TEXT, [k], st))[-1]
    assert lens == ("Rewrite verified correct on 14 cases, speed unknown — measure on a GPU", "astra.showReport")
    (apply,) = [a for a in views.code_actions("u", 1, TEXT, k, st.kernel(k.name), None)
                if a.kind == views.APPLY_KIND]
    assert not apply.is_preferred and "speed unknown" in apply.title
    st.kernel(k.name).optimization = finished(k, speedup=1.5, gpu="NVIDIA H100 80GB HBM3")
    lens = titles(views.lenses("u", TEXT, [k], st))[-1]
    assert lens == ("Apply optimized kernel (1.50× faster on NVIDIA H100 80GB HBM3, matches the original on 14 "
                    "cases)", "astra.applyOptimized")
    (apply,) = [a for a in views.code_actions("u", 1, TEXT, k, st.kernel(k.name), None)
                if a.kind == views.APPLY_KIND]
    assert apply.is_preferred
    assert views.status("u", st)["rewrites"] == [k.name]


def test_every_diagnostic_code_links_to_its_section_of_the_docs():
    from astra_cuda.lsp.convert import code_description
    docs = (Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md").read_text()
    for code in ("spec", "no-spec", "spec-guess", "compile", "preprocessor", "ptxas", "parse", "unit", "check",
                 "kernel", "timeout", "astra"):
        assert code_description(code).href.endswith(f"docs/diagnostics.md#{code}") and f"## {code}\n" in docs
    assert code_description("nvrtc-20").href.endswith("#compile")


def test_a_kernel_without_spec_gets_a_diagnostic_the_quick_fix_answers():
    (bare,) = kernels(NO_SPEC)
    (d,) = views.live_diagnostics([bare], DocState(), NO_SPEC)
    assert d.code == views.NO_SPEC and d.severity == types.DiagnosticSeverity.Information
    (act,) = views.code_actions("u", 1, NO_SPEC, bare, None, [types.CodeActionKind.QuickFix], [d])
    assert act.diagnostics == [d] and act.is_preferred


def test_a_spec_typo_is_at_its_key_with_a_fix_to_apply():
    text = TEXT.replace("[sizes]", "[size]")
    (k,) = kernels(text)
    diags = views.live_diagnostics([k], DocState(), text)
    (d,) = [d for d in diags if d.data]
    line = text.split("\n")[d.range.start.line]
    assert line[d.range.start.character:d.range.end.character] == "[size]" and "did you mean 'sizes'" in d.message
    (fix,) = views.fixes("u", 3, [d])
    assert fix.edit.document_changes[0].edits[0].new_text == "[sizes]"


def test_guessed_lines_are_marked_until_edited():
    from astra_cuda.lsp.state import Guessed
    (k,) = kernels()
    line = next(t for t in TEXT.split("\n") if t.startswith("d = [128"))
    st = DocState(guesses=[Guessed(k.name, line, "size `d`: the program itself uses 4096")])
    (d,) = views.live_diagnostics([k], st, TEXT)
    assert d.code == views.GUESS and "program itself uses 4096" in d.message
    edited = TEXT.replace(line, "d = [128, 4096]")
    (k2,) = kernels(edited)
    assert views.live_diagnostics([k2], st, edited) == [] and st.guesses == []


def test_completion_and_hover_inside_the_spec():
    (k,) = kernels()
    lines = TEXT.split("\n")
    row = next(i for i, t in enumerate(lines) if t.startswith("out   ="))
    col = lines[row].index('"half"') + 1
    items = views.completion([k], types.Position(line=row, character=col))
    labels = [c.label for c in items]
    assert "bfloat16" in labels and "float" in labels
    # choosing an item replaces the string's whole text, wherever in it the cursor is
    for at in (col, col + 2, col + 4):
        edit = views.completion([k], types.Position(line=row, character=at))[1].text_edit
        r = edit.range
        assert (r.start.line, r.end.line) == (row, row) and lines[row][r.start.character:r.end.character] == "half"
        assert edit.new_text == "bfloat16"
    key = views.completion([k], types.Position(line=row, character=lines[row].index("shape") + 2))
    r = key[0].text_edit.range
    assert lines[row][r.start.character:r.end.character] == "shape"
    h = views.hover("u", [k], DocState(), types.Position(line=row, character=lines[row].index("shape") + 1))
    assert h is not None and "shape" in h.contents.value and "size expressions" in h.contents.value
