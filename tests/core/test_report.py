"""The report people read: theme colours from VS Code's variables, a chart for every run (the
verification matrix on the CPU; time per size, share of the copy ceiling and speedup per round on
a GPU), Markdown rendered by a library with raw HTML escaped, and command links only."""
import re

from astra_cuda import report
from astra_cuda.agents.records import Plan, Round
from astra_cuda.agents.result import OptimizeResult
from astra_cuda.evaluation import Check, Evaluation, ProfileSummary, SizeTiming
from astra_cuda.gate.verdict import CaseInfo, Coverage, Failure, Verdict

ORIGINAL = "__global__ void k(float* o) { o[0] = 1.f; }\n"
BEST = "__global__ void k(float* o) { o[0] = 1.0f; }\n"
CELLS = ({"sizes": "n=1", "distribution": "normal", "cases": 2, "failed": 0},
         {"sizes": "n=1", "distribution": "wide", "cases": 2, "failed": 1},
         {"sizes": "n=4096", "distribution": "normal", "cases": 2, "failed": 0})


def result(measured: bool) -> OptimizeResult:
    prof = ProfileSummary((SizeTiming({"n": 4096}, 100.0, 50.0, 0.81), SizeTiming({"n": 8192}, 190.0, 99.0, 0.83)))
    best = Evaluation(Check(True, "passed 12 cases", "", 12, "passed", CELLS), prof if measured else None,
                      speed_note="" if measured else "speed not measured on the CPU backend")
    rd = Round(1, Plan("vectorize", "Vectorize `out` <script>alert(1)</script>", "d"), "h", BEST, "h2", best,
               "adopted", "verified and faster", ["128-bit loads"])
    return OptimizeResult("k", "/w/k.cu", "offline", ORIGINAL, BEST, best, best, [rd], "done")


def test_colours_come_from_the_theme():
    html = report.kernel_page("k", result=result(True))
    assert "var(--vscode-foreground" in html and "var(--vscode-editor-background" in html
    # every literal colour is only a fallback inside var(...)
    assert not re.search(r"(?<![,(])#[0-9a-fA-F]{3,6}\b(?![^()]*\))", report.CSS)


def test_gpu_run_has_time_ceiling_and_round_charts():
    html = report.kernel_page("k", result=result(True), uri="file:///w/k.cu", apply_command="astra.applyOptimized")
    for label in ("time per size", "share of copy ceiling", "speedup per round"):
        assert f'aria-label="{label}"' in html
    assert "1.96 ×" in html                   # round 1 measured speedup (geomean of 2.0 and 1.92)
    assert "command:astra.applyOptimized?" in html and "file://" not in html.replace("file:///w/k.cu", "")


def test_cpu_run_shows_the_verification_matrix():
    html = report.kernel_page("k", result=result(False))
    assert "<table class='matrix'>" in html
    assert html.count("class='n pass'") == 2 and html.count("class='n fail'") == 1
    assert "1/2" in html and "speed not measured" in html


def test_check_matrix_and_failures():
    v = Verdict("k", "cpu", "failed", coverage=Coverage(cases=6, matrix=list(CELLS)),
                failures=[Failure("compare", "out differs", CaseInfo({"n": 1}, "wide", 3))])
    html = report.kernel_page("k", verdict=v)
    assert "✗ differs from the reference (cpu)" in html and "out differs" in html and "<table class='matrix'>" in html


def test_markdown_is_rendered_and_raw_html_escaped():
    html = report.kernel_page("k", result=result(True))
    assert "<code>k</code>" in html                       # `k` in the summary's heading
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "**" not in html


def test_command_links_carry_json_arguments():
    link = report.command_link("Apply", "astra.applyOptimized", "file:///w/k.cu", "k")
    assert link == '<a href="command:astra.applyOptimized?%5B%22file%3A///w/k.cu%22%2C%20%22k%22%5D">Apply</a>'
