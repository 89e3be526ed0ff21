"""Nsight Compute: one launch profiled in a worker that ncu starts, and its CSV pages parsed.

`run_ncu(unit, spec, sizes, backend)` runs the `NcuLaunch` job in a worker of its own started under
`ncu` (`execution.worker.run_alone`: the one worker entry point, `python -m astra_cuda.execution.worker`;
the job compiles the unit on the backend it was given and launches it once on fresh inputs), and
returns DRAM/SM throughput, achieved occupancy, warp-stall reasons, and per-line counters mapped to
the user's file (`hot_lines`, the data for editor annotations). The parsers are pure and tested offline.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

from ..backends.base import Backend
from ..compile.extract import CompileUnit
from ..execution import worker
from ..model.spec import Spec


class NcuUnavailable(Exception):
    pass


NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "WarpStateStats", "SourceCounters", "LaunchStats")
NCU_METRICS = {
    "duration_us": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
}


def _ncu_exe() -> str | None:
    return shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.access(p, os.X_OK)), None)


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


MAX_REPORT_BYTES = 64 << 20   # a report of one launch with its source is a few MB


@dataclass(frozen=True)
class NcuLaunch(worker.Job[None]):
    """The launch Nsight Compute profiles: the unit compiled on a fresh instance of `backend` (the
    class of the backend the profiler was given: no choice is made here) and launched once on fresh
    inputs at `sizes`."""

    unit: CompileUnit
    spec: Spec
    sizes: dict[str, int]
    backend: type[Backend]

    def run(self) -> None:
        from .. import gate
        from ..gate import checks, suite
        b = self.backend()
        mod = b.compile_unit(self.unit)
        host = suite.inputs(self.spec, self.sizes, suite.SPEC_DIST, 1)
        ctypes = checks.arg_types(self.spec, b, checks.Compiled(mod, self.unit.name_expression, "candidate"),
                                  self.unit.param_types)
        run = checks.prepare(self.spec, b, self.sizes, host, ctypes, checks.POISONS[0])
        b.launch(mod, self.unit.name_expression, gate.launch_of(self.spec, self.sizes), run.args)


def run_ncu(unit: CompileUnit, spec: Spec, sizes: dict[str, int] | None, backend: type[Backend],
            timeout: float = 240.0) -> tuple[dict[str, Any], list[tuple[int, float, str]], bytes | None]:
    """Profile one launch of `unit` at `sizes` under Nsight Compute (`NcuLaunch` in a worker that
    ncu starts). Returns (metrics, hot lines, the `.ncu-rep` report's bytes — None when larger than
    MAX_REPORT_BYTES — for the user to open)."""
    exe = _ncu_exe()
    if exe is None:
        raise NcuUnavailable("Nsight Compute (ncu) is not on the PATH")
    if sizes is None:
        raise NcuUnavailable("no bench size to profile")
    with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
        rep, log = os.path.join(tmp, "report"), os.path.join(tmp, "ncu.log")
        base = unit.kernel.split("::")[-1]   # the plain name (an overload's expression is a cast)
        # ncu's own lines go to its log: the worker's replies share the standard output it passes on.
        cmd = [exe, "--target-processes", "all", "--kernel-name", f"regex:{re.escape(base)}", "--launch-count", "1",
               "--import-source", "yes", "-f", "-o", rep, "--log-file", log]
        for sec in NCU_SECTIONS:
            cmd += ["--section", sec]
        cmd += ["--metrics", ",".join(NCU_METRICS.values())]
        try:
            worker.run_alone(NcuLaunch(unit, spec, dict(sizes), backend), prefix=tuple(cmd), timeout=timeout)
        except worker.WorkerError as e:
            raise NcuUnavailable(f"ncu failed: {e}{_tail(log)}") from None
        if not os.path.exists(rep + ".ncu-rep"):
            raise NcuUnavailable(f"ncu wrote no report{_tail(log)}")
        raw = subprocess.run([exe, "-i", rep + ".ncu-rep", "--csv", "--page", "raw"], capture_output=True,
                             text=True, timeout=timeout).stdout
        # Metrics are correlated with source lines only in the 'cuda,sass' view.
        src = subprocess.run([exe, "-i", rep + ".ncu-rep", "--csv", "--page", "source", "--print-source", "cuda,sass"],
                             capture_output=True, text=True, timeout=timeout).stdout
        report = None
        if os.path.getsize(rep + ".ncu-rep") <= MAX_REPORT_BYTES:
            with open(rep + ".ncu-rep", "rb") as f:
                report = f.read()
    metrics = parse_ncu_raw(raw)
    hot = parse_ncu_source(src, unit.path)
    metrics["sizes"] = dict(sizes)
    if not hot:  # keep the start of what ncu printed, to see why no line data came back
        metrics["source_page_head"] = src[:600]
    return metrics, hot, report


def _tail(log: str) -> str:
    """The end of ncu's log, for the message (': …'), or ''."""
    try:
        with open(log, errors="replace") as f:
            text = f.read()[-400:].strip()
    except OSError:
        return ""
    return f": {text}" if text else ""


def parse_ncu_raw(text: str) -> dict[str, Any]:
    """The `--page raw --csv` table: header row, units row, one row per profiled launch."""
    rows = list(csv.reader(io.StringIO(text[text.find('"ID"'):] if '"ID"' in text else text)))
    if len(rows) < 3:
        return {"error": "no ncu data", "raw_head": text[:400]}
    head, values = rows[0], rows[-1]
    col = {h: i for i, h in enumerate(head)}
    out: dict[str, Any] = {}
    for key, metric in NCU_METRICS.items():
        if metric in col:
            out[key] = _num(values[col[metric]])
    if out.get("duration_us") is not None:
        unit = rows[1][col[NCU_METRICS["duration_us"]]] if len(rows) > 2 else "ns"
        scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3}.get(unit, 1e-3)
        out["duration_us"] = out["duration_us"] * scale
    # Warp-stall reasons: ncu versions name them differently; take the family with most data
    # (e.g. smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio).
    families: dict[str, dict[str, float]] = {}
    for h, i in col.items():
        m = re.fullmatch(r"(smsp__\w*?)issue_stalled_(\w+?)(_per_\w+)?(\.\w+)?", h)
        if m and i < len(values) and "not_issued" not in h:
            v = _num(values[i])
            if v:
                families.setdefault(m.group(1) + (m.group(3) or "") + (m.group(4) or ""), {})[m.group(2)] = v
    stalls = max(families.values(), key=len) if families else {}
    total = sum(stalls.values())
    out["stalls"] = [{"reason": k, "share": round(v / total, 3)} for k, v in
                     sorted(stalls.items(), key=lambda kv: -kv[1])[:6]] if total else []
    return out


def parse_ncu_source(text: str, user_path: str, top: int = 8) -> list[tuple[int, float, str]]:
    """The `--page source --print-source cuda,sass --csv` view: a 'File Path' row, then under a
    header ('Line No', 'Source', 'Address', 'Source', 'Warp Stall Sampling (All Samples)', ...)
    one row per CUDA source line (SASS rows below it have no line number). Lines of the user's
    file only; returns (0-based line, share of warp-stall samples, label)."""
    samples: dict[int, float] = {}
    file_ok, line_col, val_col = True, None, None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        key = row[0].strip()
        if key in ("File Path", "File Name", "File"):
            name = row[1] if len(row) > 1 else ""
            file_ok = os.path.basename(name) == os.path.basename(user_path)
            continue
        if key in ("Line No", "Line", "#"):
            header = [h.strip() for h in row]
            line_col = 0
            val_col = next((header.index(h) for h in ("Warp Stall Sampling (All Samples)",
                                                       "Warp Stall Sampling (All Cycles)", "# Samples",
                                                       "Instructions Executed") if h in header), None)
            continue
        if not file_ok or line_col is None or val_col is None or val_col >= len(row):
            continue
        line, v = _num(row[line_col]), _num(row[val_col])
        if line and v:
            samples[int(line) - 1] = samples.get(int(line) - 1, 0.0) + v
    total = sum(samples.values())
    if not total:
        return []
    ranked = sorted(samples.items(), key=lambda kv: -kv[1])[:top]
    return [(line, round(v / total, 3), f"{100 * v / total:.0f}% of warp stall samples") for line, v in ranked]
