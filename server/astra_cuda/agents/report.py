"""The HTML reports of optimize runs: one run (`astra optimize --report DIR`) is `astra_cuda.report`'s
page for its kernel; a batch (`astra optimize PATH…`) is one page with the summary table (geomeans
per GPU model, never pooled across models), then each run's sections. Self-contained files."""
from __future__ import annotations

import html
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import report
from .result import OptimizeResult

if TYPE_CHECKING:
    from ..cli.batch import BatchResult


def render(result: OptimizeResult) -> str:
    return report.kernel_page(result.kernel, result=result)


def render_batch(batch: BatchResult) -> str:
    """One page for a batch (`astra_cuda.cli.batch.BatchResult`)."""
    e = html.escape
    ex = batch.executor
    where = (f"Ray ({ex.get('address')}, {ex.get('nodes')} node(s), {ex.get('gpus')} GPU(s))"
             if ex.get("kind") == "ray" else f"this machine ({ex.get('node', '')})")
    body = [f"<p class='note'>{len(batch.rows)} kernel(s) in {batch.seconds:.1f} s on {e(where)}.</p>",
            "<table><tr><th>file</th><th>kernel</th><th>state</th><th>speedup</th><th>verified cases</th>"
            "<th>GPU</th><th>rounds</th><th>s</th></tr>"]
    for i, row in enumerate(batch.rows):
        sp = f"{row.speedup:.3f}×" if row.speedup is not None else ("verified rewrite" if row.improved else "–")
        cls = "ok" if row.improved else "bad" if row.state in ("error", "interrupted") else ""
        body.append(f"<tr><td>{e(row.target.path)}</td><td><a href='#run-{i}'>{e(row.target.kernel)}</a></td>"
                    f"<td class='{cls}'>{e(row.state)}: {e(row.message[:160])}</td><td class='n'>{sp}</td>"
                    f"<td class='n'>{row.cases}</td><td>{e(row.gpu or '–')}</td><td class='n'>{row.rounds}</td>"
                    f"<td class='n'>{row.seconds:.1f}</td></tr>")
    body.append("</table>")
    for gpu, g in batch.geomeans.items():
        body.append(f"<p><b>{g:.3f}× geomean</b> on {e(gpu)}</p>")
    for i, row in enumerate(batch.rows):
        body.append(f"<h2 id='run-{i}'>{e(row.target.kernel)} <span class='note'>({e(row.target.path)})</span></h2>")
        body.append(f"<p class='bad'>{e(row.message)}</p>" if row.result is None else
                    report.optimize_section(row.result))
    return report.page(f"Astra batch {batch.id}", body)


def write_batch(batch: BatchResult, directory: str | Path) -> Path:
    return _page(Path(directory) / f"astra-batch-{batch.id}.html", render_batch(batch))


def write(result: OptimizeResult, directory: str | Path) -> Path:
    return _page(Path(directory) / f"astra-{result.kernel.split('::')[-1]}.html", render(result))


def _page(path: Path, html: str) -> Path:
    """The page, whole or not at all (storage.NoSpace on a full disk: no half page left)."""
    from ..storage import writing
    tmp = path.with_name(f".{path.name}.tmp")
    with writing("the report", path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(html, encoding="utf-8")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return path
