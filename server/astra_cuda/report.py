"""The report people read: one static HTML page per kernel (the editor's webview, `--report DIR`).

Theme-aware (VS Code's CSS variables, with light fallbacks in a browser), no scripts, no remote
content; charts are inline SVG drawn from measured data only — the verification matrix (sizes ×
value distributions) for every check, and on a GPU the time per size, bandwidth against the
measured copy ceiling and the speedup per round. Markdown (summaries, plans, notes) goes through
markdown-it-py with raw HTML off; what came from the user's code or a model (a kernel's output, a
compiler's message, a plan) is escaped as text (`astra_cuda.plain`), never read as Markdown. Links are `command:` URIs (they work in a webview and under
Remote-SSH, where `file://` links do not). Pure: plain objects in, a string out.
"""
from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from . import redact
from .model.ladder import describe
from .plain import printable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .agents.result import OptimizeResult
    from .gate.verdict import Verdict
    from .profiler.results import Profile

e = html.escape

# VS Code's theme variables; the second value is for a plain browser (the CLI's --report).
CSS = """
body{font-family:var(--vscode-font-family,system-ui,sans-serif);font-size:var(--vscode-font-size,14px);
 line-height:1.45;color:var(--vscode-foreground,#1f1f1f);background:var(--vscode-editor-background,#fff);
 margin:1.2em auto;max-width:62em;padding:0 1em}
h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.6em 0 .5em;
 border-bottom:1px solid var(--vscode-panel-border,#ddd);padding-bottom:.2em}
a{color:var(--vscode-textLink-foreground,#0066bf)}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid var(--vscode-panel-border,#ccc);
 padding:.2em .6em;text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:var(--vscode-editor-font-family,monospace)}
pre{background:var(--vscode-textCodeBlock-background,#f4f4f4);padding:.7em;overflow:auto;font-size:.9em}
.note{color:var(--vscode-descriptionForeground,#666)}
.ok{color:var(--vscode-testing-iconPassed,#2e7d32)}.bad{color:var(--vscode-testing-iconFailed,#c62828)}
.add{color:var(--vscode-gitDecoration-addedResourceForeground,#2e7d32)}
.del{color:var(--vscode-gitDecoration-deletedResourceForeground,#c62828)}
td.pass{background:color-mix(in srgb,var(--vscode-testing-iconPassed,#2e7d32) 28%,transparent)}
td.fail{background:color-mix(in srgb,var(--vscode-testing-iconFailed,#c62828) 40%,transparent)}
svg text{fill:var(--vscode-foreground,#1f1f1f);font-size:12px}
svg .bar{fill:var(--vscode-charts-blue,#1e88e5)}svg .bar2{fill:var(--vscode-charts-orange,#f57c00)}
svg .good{fill:var(--vscode-charts-green,#388e3c)}svg .worse{fill:var(--vscode-charts-red,#d32f2f)}
svg .rule{stroke:var(--vscode-foreground,#333);stroke-dasharray:4 3}
"""


def markdown(text: str) -> str:
    """Markdown as HTML (CommonMark and tables; raw HTML in the text is escaped, not passed on)."""
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def command_link(title: str, command: str, *args: Any) -> str:
    """A link that runs an editor command with JSON arguments."""
    uri = f"command:{command}" + (f"?{quote(json.dumps(list(args)))}" if args else "")
    return f'<a href="{e(uri, quote=True)}">{e(title)}</a>'


# ---- charts (inline SVG, measured values only) --------------------------------------------------

def bars(rows: Sequence[tuple[str, Sequence[float]]], *, unit: str, legend: Sequence[str] = (),
         rule: tuple[float, str] | None = None, classes: Sequence[str] = ("bar", "bar2"),
         width: int = 640, label: str = "chart") -> str:
    """Horizontal bars: one group per row (label, values), an optional dashed rule (value, text)."""
    if not rows:
        return ""
    label_w, bar_h, gap = 210, 14, 8
    groups = max(len(v) for _, v in rows)
    top = max([v for _, vals in rows for v in vals] + ([rule[0]] if rule else [])) or 1.0
    plot_w = width - label_w - 90
    x = lambda v: label_w + plot_w * v / (top * 1.05)  # noqa: E731
    row_h = groups * bar_h + gap
    height = row_h * len(rows) + (34 if rule or legend else 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{e(label)}">']
    for i, (name, vals) in enumerate(rows):
        y0 = 4 + i * row_h
        out.append(f'<text x="{label_w - 6}" y="{y0 + groups * bar_h / 2 + 4:.1f}" text-anchor="end">{e(name)}</text>')
        for j, v in enumerate(vals):
            y = y0 + j * bar_h
            cls = classes[j % len(classes)]
            out.append(f'<rect class="{cls}" x="{label_w}" y="{y + 1}" width="{max(x(v) - label_w, 1):.1f}" '
                       f'height="{bar_h - 2}"/>')
            out.append(f'<text x="{x(v) + 4:.1f}" y="{y + bar_h - 3}">{v:.3g} {e(unit)}</text>')
    base = 4 + row_h * len(rows)
    if rule:
        out.append(f'<line class="rule" x1="{x(rule[0]):.1f}" y1="2" x2="{x(rule[0]):.1f}" y2="{base}"/>')
        out.append(f'<text x="{x(rule[0]):.1f}" y="{base + 14}" text-anchor="middle">{e(rule[1])}</text>')
    for j, name in enumerate(legend):
        lx = label_w + j * 150
        out.append(f'<rect class="{classes[j % len(classes)]}" x="{lx}" y="{base + 20}" width="10" height="10"/>'
                   f'<text x="{lx + 14}" y="{base + 29}">{e(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def matrix_table(cells: Sequence[dict[str, Any]]) -> str:
    """The verification matrix: sizes down, value distributions across, passed/run in each cell."""
    if not cells:
        return ""
    sizes = list(dict.fromkeys(c["sizes"] for c in cells))
    dists = list(dict.fromkeys(c["distribution"] for c in cells))
    at = {(c["sizes"], c["distribution"]): c for c in cells}
    out = ["<table class='matrix'><tr><th>sizes \\ inputs</th>" + "".join(f"<th>{e(d)}</th>" for d in dists) + "</tr>"]
    for s in sizes:
        row = [f"<tr><td>{e(s)}</td>"]
        for d in dists:
            c = at.get((s, d))
            if c is None:
                row.append("<td class='note'>–</td>")
            else:
                ok = c["cases"] - c["failed"]
                row.append(f"<td class='n {'fail' if c['failed'] else 'pass'}'>{ok}/{c['cases']}</td>")
        out.append("".join(row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


# ---- sections -----------------------------------------------------------------------------------

def check_section(v: Verdict) -> str:
    from . import standing
    cls = "ok" if v.passed else "bad"
    st = standing.of_check(v)
    parts = [f"<h2>Check</h2><p class='{cls}'><b>{e(st.short)}</b></p>",
             markdown(st.detail), f"<p class='note'>{e(v.summary)}</p>"]
    if v.reference:
        parts.append(f"<p class='note'>Reference: {e(v.reference)}</p>")
    if v.coverage.matrix:
        parts.append("<p>Verification matrix (cases passed / run, per size and input distribution):</p>")
        parts.append(matrix_table(v.coverage.matrix))
    if v.failures:  # what a kernel printed or a compiler said: text, never Markdown
        parts.append("<ul>" + "".join(f"<li>{e(printable(f.text()))}</li>" for f in v.failures[:12]) + "</ul>")
    return "\n".join(parts)


def profile_section(p: Profile) -> str:
    parts = ["<h2>Profile</h2>", markdown(p.summary_markdown())]
    timed = [s for s in p.sizes if s.candidate.median_us]
    if timed:
        label = lambda s: s.label + (f" ({s.role})" if s.role else "")  # noqa: E731
        rows = [(label(s), [s.reference.median_us, s.candidate.median_us] if s.reference else [s.candidate.median_us])
                for s in timed]
        parts.append("<p>Time per size (median):</p>")
        parts.append(bars(rows, unit="µs", legend=("reference", "this kernel") if timed[0].reference else (),
                          label="time per size"))
        speed = [(label(s), s.speedup) for s in timed if s.speedup]
        if speed and len(timed) > 1:
            parts.append("<p>Speedup over the reference per size:</p>")
            parts.append(_speedups(speed, "speedup per size"))
        bw = [(label(s), [s.candidate.gbps]) for s in timed if s.candidate.gbps]
        if bw:
            parts.append("<p>Bandwidth against the measured copy ceiling:</p>")
            parts.append(bars(bw, unit="GB/s", rule=(p.ceiling_gbps, f"copy ceiling {p.ceiling_gbps:.0f} GB/s")
                              if p.ceiling_gbps else None, label="bandwidth per size"))
    return "\n".join(parts)


def optimize_section(r: OptimizeResult, uri: str = "", apply_command: str = "") -> str:
    parts = ["<h2>Optimization</h2>", markdown(r.summary_markdown())]
    where = r.best_eval.gpu or r.baseline.gpu
    if where:
        parts.append(f"<p class='note'>Timed on {e(where)} ({e(r.best_eval.node or r.baseline.node)}).</p>")
    if r.measured:
        rows = [(describe(t["sizes"], t["role"]), [t["baseline_us"], t["best_us"]]) for t in r.per_size()]
        parts.append("<p>Time per size, original and best:</p>")
        parts.append(bars(rows, unit="µs", legend=("original", "best"), label="time per size"))
        if len(rows) > 1:
            parts.append("<p>Speedup of the best version per size (every size of the ladder; the headline is the "
                         "bench sizes' geomean):</p>")
            parts.append(_speedups([(label, t["speedup"]) for (label, _), t in zip(rows, r.per_size())],
                                   "speedup per size"))
        shares = [(label, [100 * t["copy_share"]]) for (label, _), t in zip(rows, r.per_size()) if t["copy_share"]]
        if shares:
            parts.append("<p>Best version's bandwidth as a share of the measured copy ceiling:</p>")
            parts.append(bars(shares, unit="%", rule=(100.0, "copy ceiling"), label="share of copy ceiling"))
    rounds = [(printable(f"round {rd.index}: {rd.plan.title if rd.plan else ''}")[:40], rd) for rd in r.rounds]
    measured = [(name, rd.evaluation.speedup) for name, rd in rounds
                if rd.evaluation is not None and rd.evaluation.measured and rd.evaluation.speedup]
    if measured:
        parts.append("<p>Speedup per round (verified candidates, over the original):</p>")
        parts.append(_speedups(measured))
    if not r.measured:
        cells = r.best_eval.check.matrix or r.baseline.check.matrix
        if cells:
            parts.append("<p>Verification matrix of the kept version (cases passed / run):</p>")
            parts.append(matrix_table(cells))
    parts.append("<h3>Rounds</h3><table><tr><th>#</th><th>plan</th><th>outcome</th><th>verdict</th><th>speedup</th><th>s</th></tr>")
    for rd in r.rounds:
        ev = rd.evaluation
        sp = f"{ev.speedup:.3f}×" if ev is not None and ev.measured and ev.speedup else "–"
        cls = "ok" if rd.adopted else "bad" if rd.outcome == "failed" else ""
        parts.append(f"<tr><td>{rd.index}</td><td>{e(printable(rd.plan.title if rd.plan else ''))}<br>"
                     f"<span class='note'>{e(printable('; '.join(rd.changes)))}</span></td><td class='{cls}'>"
                     f"{e(rd.outcome)}</td><td>{e(printable(rd.reason))}</td><td class='n'>{sp}</td>"
                     f"<td class='n'>{rd.seconds:.1f}</td></tr>")
    parts.append("</table>")
    if r.improved:
        if uri and apply_command:
            title = "Preview and apply this version" + ("" if r.measured else " (speed unknown)")
            parts.append("<p>" + command_link(title, apply_command, uri, r.kernel) + "</p>")
        parts.append(f"<h2>Diff</h2><pre>{_diff(r.diff)}</pre>")
    return "\n".join(parts)


def _speedups(rows: Sequence[tuple[str, float]], label: str = "speedup per round") -> str:
    svg = bars([(name, [v]) for name, v in rows], unit="×", rule=(1.0, "1.0× (original)"), label=label)
    # Faster than the original in green, slower in red (one bar per row: colour each by its value).
    for name, v in rows:
        svg = svg.replace('<rect class="bar"', f'<rect class="{"good" if v >= 1.0 else "worse"}"', 1)
    return svg


def _diff(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else \
            "del" if line.startswith("-") and not line.startswith("---") else ""
        out.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return "\n".join(out)


def page(title: str, sections: Sequence[str]) -> str:
    """The whole page, secrets masked (an endpoint's error may have echoed the key)."""
    body = "\n".join(s for s in sections if s)
    return redact.text(f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
                       f"<style>{CSS}</style></head><body>\n<h1>{e(title)}</h1>\n{body}\n</body></html>\n")


def kernel_page(kernel: str, *, verdict: Verdict | None = None, profile: Profile | None = None,
                result: OptimizeResult | None = None, notes: Sequence[str] = (), uri: str = "",
                apply_command: str = "") -> str:
    """Everything known about one kernel: its check, its profile, its optimization."""
    sections = [markdown("\n\n".join(notes)) if notes else ""]
    if verdict is not None:
        sections.append(check_section(verdict))
    if profile is not None:
        sections.append(profile_section(profile))
    if result is not None:
        sections.append(optimize_section(result, uri, apply_command))
    if verdict is None and profile is None and result is None:
        sections.append("<p class='note'>Not checked, profiled or optimized yet: save the file to check it, or run "
                        "<b>Astra: Optimize kernel</b>.</p>")
    return page(f"Astra · {kernel}", sections)
