"""The HTML report (`--report DIR`): a per-size speedup chart (inline SVG, no scripts) and the
round history, with the best kernel and its diff. One self-contained file."""
from __future__ import annotations

import html
from pathlib import Path

from .result import OptimizeResult

CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
td.n{text-align:right}pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:12px}
.adopted{color:#176b2c;font-weight:600}.failed{color:#a11}.note{color:#666}
.add{color:#176b2c}.del{color:#a11}"""


def speedup_chart(rows: list[dict], width: int = 640, bar_h: int = 26) -> str:
    """Horizontal bars, one per size, with a line at 1.0×."""
    if not rows:
        return ""
    label_w, pad = 230, 10
    top = max(max(r["speedup"] for r in rows), 1.0) * 1.1
    plot_w = width - label_w - 70
    h = pad * 2 + bar_h * len(rows)
    x = lambda v: label_w + plot_w * v / top  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h + 18}" role="img" '
             f'aria-label="speedup per size">']
    for i, r in enumerate(rows):
        y = pad + i * bar_h
        label = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        colour = "#2f7d4a" if r["speedup"] >= 1.0 else "#b33"
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h * 0.65:.1f}" text-anchor="end" font-size="12">'
                     f'{html.escape(label)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{x(r["speedup"]) - label_w:.1f}" '
                     f'height="{bar_h - 6}" fill="{colour}"/>')
        parts.append(f'<text x="{x(r["speedup"]) + 4:.1f}" y="{y + bar_h * 0.65:.1f}" font-size="12">'
                     f'{r["speedup"]:.2f}×</text>')
    parts.append(f'<line x1="{x(1.0):.1f}" y1="{pad - 4}" x2="{x(1.0):.1f}" y2="{h - pad + 4}" stroke="#333" '
                 f'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{x(1.0):.1f}" y="{h + 12}" text-anchor="middle" font-size="11">1.0× (original)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _diff_html(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else \
            "del" if line.startswith("-") and not line.startswith("---") else ""
        out.append(f'<span class="{cls}">{html.escape(line)}</span>' if cls else html.escape(line))
    return "\n".join(out)


def render(result: OptimizeResult) -> str:
    title = f"Astra: {result.kernel}"
    return _page(title, [f"<h1>{html.escape(title)} <span class='note'>({html.escape(result.mode)})</span></h1>",
                         *_sections(result)])


def _page(title: str, body: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _sections(result: OptimizeResult, level: int = 2) -> list[str]:
    """One run's report below its title: the verdict, per-size table, rounds, diff, best kernel."""
    e = html.escape
    r = result
    h = f"h{level}"
    body: list[str] = []
    if r.error:
        body.append(f"<p class='failed'>Could not optimize: {e(r.error)}</p>")
    elif r.measured:
        body.append(f"<p><b>{r.speedup:.3f}× geomean</b> over the original, verified on "
                    f"{r.best_eval.check.cases} cases.</p>")
        body.append(speedup_chart(r.per_size()))
        body.append("<table><tr><th>sizes</th><th>original µs</th><th>best µs</th><th>speedup</th>"
                    "<th>copy ceiling</th></tr>")
        for t in r.per_size():
            share = f"{t['copy_share']:.0%}" if t["copy_share"] is not None else "–"
            body.append(f"<tr><td>{e(', '.join(f'{k}={v}' for k, v in t['sizes'].items()))}</td>"
                        f"<td class=n>{t['baseline_us']:.2f}</td><td class=n>{t['best_us']:.2f}</td>"
                        f"<td class=n>{t['speedup']:.3f}×</td><td class=n>{share}</td></tr>")
        body.append("</table>")
    else:
        body.append(f"<p>{'A verified rewrite' if r.improved else 'No verified improvement'}; "
                    f"<span class='note'>{e(r.speed_note)}</span></p>")
    where = r.best_eval.gpu or r.baseline.gpu
    if where:
        body.append(f"<p class='note'>Timed on {e(where)} ({e(r.best_eval.node or r.baseline.node)}).</p>")
    body.append(f"<{h}>Rounds</{h}><table><tr><th>#</th><th>plan</th><th>outcome</th><th>verdict</th>"
                "<th>speedup</th><th>s</th></tr>")
    for rd in r.rounds:
        ev = rd.evaluation
        sp = f"{ev.speedup:.3f}×" if ev is not None and ev.measured else "–"
        cls = "adopted" if rd.adopted else "failed" if rd.outcome == "failed" else ""
        body.append(f"<tr><td>{rd.index}</td><td>{e(rd.plan.title if rd.plan else '')}<br>"
                    f"<span class='note'>{e('; '.join(rd.changes))}</span></td>"
                    f"<td class='{cls}'>{e(rd.outcome)}</td><td>{e(rd.reason)}</td><td class=n>{sp}</td>"
                    f"<td class=n>{rd.seconds:.1f}</td></tr>")
    body.append("</table>")
    body.append(f"<p class='note'>Stopped: {e(r.stopped)}. {r.seconds:.1f} s"
                + (f", {r.usage.calls} LLM calls, {r.usage.tokens} tokens" if r.usage.calls else "") + ".</p>")
    if r.improved:
        body.append(f"<{h}>Diff</{h}><pre>{_diff_html(r.diff)}</pre>")
        body.append(f"<{h}>Best kernel</{h}><pre>{e(r.best_kernel_source)}</pre>")
    return body


def render_batch(batch) -> str:
    """One page for a batch (`astra.batch.BatchResult`): the summary table (geomeans per GPU
    model, never pooled across models), then each run's report."""
    e = html.escape
    ex = batch.executor
    where = (f"Ray ({ex.get('address')}, {ex.get('nodes')} node(s), {ex.get('gpus')} GPU(s))"
             if ex.get("kind") == "ray" else f"this machine ({ex.get('node', '')})")
    body = [f"<h1>Astra batch {e(batch.id)}</h1>",
            f"<p class='note'>{len(batch.rows)} kernel(s) in {batch.seconds:.1f} s on {e(where)}.</p>",
            "<table><tr><th>file</th><th>kernel</th><th>state</th><th>speedup</th><th>verified cases</th>"
            "<th>GPU</th><th>rounds</th><th>s</th></tr>"]
    for i, row in enumerate(batch.rows):
        sp = f"{row.speedup:.3f}×" if row.speedup is not None else ("verified rewrite" if row.improved else "–")
        cls = "adopted" if row.improved else "failed" if row.state in ("error", "interrupted") else ""
        body.append(f"<tr><td>{e(row.target.path)}</td><td><a href='#run-{i}'>{e(row.target.kernel)}</a></td>"
                    f"<td class='{cls}'>{e(row.state)}: {e(row.message[:160])}</td><td class=n>{sp}</td>"
                    f"<td class=n>{row.cases}</td><td>{e(row.gpu or '–')}</td><td class=n>{row.rounds}</td>"
                    f"<td class=n>{row.seconds:.1f}</td></tr>")
    body.append("</table>")
    for gpu, g in batch.geomeans.items():
        body.append(f"<p><b>{g:.3f}× geomean</b> on {e(gpu)}</p>")
    for i, row in enumerate(batch.rows):
        body.append(f"<h2 id='run-{i}'>{e(row.target.kernel)} <span class='note'>({e(row.target.path)})</span></h2>")
        if row.result is None:
            body.append(f"<p class='failed'>{e(row.message)}</p>")
        else:
            body += _sections(row.result, level=3)
    return _page(f"Astra batch {batch.id}", body)


def write_batch(batch, directory: str | Path) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"astra-batch-{batch.id}.html"
    path.write_text(render_batch(batch), encoding="utf-8")
    return path


def write(result: OptimizeResult, directory: str | Path) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"astra-{result.kernel.split('::')[-1]}.html"
    path.write_text(render(result), encoding="utf-8")
    return path
