"""What the editor shows, as pure functions of the text and the server's state: no client, no
server process, no worker."""
from pathlib import Path

from lsprotocol import types

from astra_cuda import api
from astra_cuda.gate.verdict import CaseInfo, Coverage, Failure, Verdict
from astra_cuda.lsp import analysis, anchor, views
from astra_cuda.lsp.state import DocState, KernelState, Optimization

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
    assert titles(views.lenses("u", TEXT, [k], st)) == [("Profile", "astra_cuda.lsp.profile"),
                                                         ("Optimize", "astra_cuda.lsp.optimize")]
    st.checking = True
    assert titles(views.lenses("u", TEXT, [k], st))[0] == ("checking…", "astra.showReport")
    st.kernel(k.name).verdict = passed()
    st.kernel(k.name).optimization = Optimization("running", anchor.anchor_for(k, 1, TEXT), TEXT, message="round 1",
                                                  best_speedup=1.25)
    lenses = views.lenses("u", TEXT, [k], st)
    assert titles(lenses)[0] == ("✓ verified (cpu, 42 cases)", "astra.showReport")
    assert titles(lenses)[2] == ("Optimizing… round 1, best 1.25× (cancel)", "astra_cuda.lsp.cancelOptimize")
    spec_line = k.kernel.spec.span.start_line
    assert {lens.range.start.line for lens in lenses} == {spec_line}  # above the kernel and its spec
    assert all(lens.command.arguments == ["u", "silu_and_mul"] for lens in lenses)


def test_a_failed_or_unrunnable_check_reads_as_such():
    (k,) = kernels()
    st = DocState()
    st.kernel(k.name).verdict = Verdict("silu_and_mul", "cpu", "unsupported")
    assert titles(views.lenses("u", TEXT, [k], st))[0][0] == "? needs a GPU to verify"
    st.kernel(k.name).verdict, st.kernel(k.name).verdict_error = None, "no backend"
    assert titles(views.lenses("u", TEXT, [k], st))[0][0] == "✗ check could not run"
    assert "could not run — no backend" in views.report_markdown("file:///w/k.cu", k, st.kernel(k.name))


def test_the_hover_report_over_the_kernel_name_only():
    (k,) = kernels()
    st = DocState()
    st.kernel(k.name).verdict = passed()
    name = k.kernel.name_span
    h = views.hover("file:///w/k.cu", [k], st, types.Position(line=name.start_line, character=name.start_col + 1))
    assert h is not None and "✅ verified" in h.contents.value and "Reference: kernel pinned" in h.contents.value
    assert views.hover("file:///w/k.cu", [k], st, types.Position(line=name.start_line + 2, character=0)) is None


def test_code_actions_offer_optimize_and_pin_or_a_spec():
    (k,) = kernels()
    acts = views.code_actions("u", 1, TEXT, k, None, None)
    assert [a.title for a in acts] == ["Optimize kernel `silu_and_mul`", "Pin current version of `silu_and_mul` as "
                                                                           "reference"]
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
    assert (s["verified"], s["failing"], s["errors"]) == (1, 2, 0)
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
    assert "<table class='matrix'>" in page and "Verified" in page and "file://" not in page.replace(
        "file%3A///w/k.cu", "").replace("file:///w/k.cu", "")
    link = views.report_command("file:///w/k.cu", k.name)
    assert link.startswith("command:astra.showReport?") and "file%3A///w/k.cu" in link


def test_the_status_says_why_nothing_runs_and_how_to_use_the_gpu():
    st = DocState()
    s = views.status("u", st, "", "this workspace is not trusted", {"problem": "no CuPy", "fix": "pip install x"})
    assert s["restricted"] == "this workspace is not trusted" and s["gpuSetup"]["fix"] == "pip install x"
    assert views.status("u", st)["restricted"] is None
