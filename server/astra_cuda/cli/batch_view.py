"""What `astra optimize PATH…` shows: a live table while the batch runs (stderr) and the summary
table after it (stdout)."""
from __future__ import annotations


class LiveTable:
    """A live table on stderr: one line per kernel of the batch."""

    def __init__(self, console):
        self.console = console
        self.rows: dict[tuple[str, str], object] = {}
        self.live = None

    def _table(self):
        from rich.table import Table
        t = Table(title="astra optimize", expand=False)
        for col in ("kernel", "file", "state", "best", "now"):
            t.add_column(col, overflow="fold")
        for row in self.rows.values():
            best = f"{row.speedup:.2f}×" if row.speedup is not None else "–"
            t.add_row(row.target.kernel, row.target.path, row.state, best, row.message[:80])
        return t

    def start(self) -> None:
        from rich.live import Live
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def update(self, row) -> None:
        self.rows[(row.target.path, row.target.kernel)] = row
        if self.live is not None:
            self.live.update(self._table())

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def print_summary(result) -> None:
    # Plain aligned columns (like --list-runs): names and states are never cut.
    rows = [("kernel", "file", "speedup", "cases", "GPU", "rounds", "s", "state")]
    for r in result.rows:
        sp = f"{r.speedup:.3f}×" if r.speedup is not None else ("verified" if r.improved else "–")
        rows.append((r.target.kernel, r.target.path, sp, str(r.cases), r.gpu or "–", str(r.rounds),
                     f"{r.seconds:.1f}", r.state if r.state == "done" else f"{r.state}: {r.message}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    for gpu, g in result.geomeans.items():
        print(f"geomean {g:.3f}× on {gpu}")
    ex = result.executor
    print(f"{len(result.rows)} kernel(s) in {result.seconds:.1f} s on "
          + (f"Ray {ex.get('address')} ({ex.get('nodes')} node(s), {ex.get('gpus')} GPU(s))"
             if ex.get("kind") == "ray" else "this machine")
          + (f"; report: {result.report_path}" if result.report_path else "")
          + f"; resume with --resume {result.id}")
