"""What the profiling agent reports: per-size timings, the whole profile, and its Markdown.

Pure data (no backend, no GPU): `Timing.of(times)` summarises launch times; `Profile` carries the
verdict-like views (`valid`, `speedup`, `summary_line`, `summary_markdown`) and a JSON round trip.
"""
from __future__ import annotations

import dataclasses

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..model.ladder import headline
from ..plain import md


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    gbps: float | None = None
    ceiling_share: float | None = None
    tflops: float | None = None
    step_us: float = 0.0          # the timer's step where the times come in steps (µs-scale kernels), else 0

    @classmethod
    def of(cls, times_us: list[float], nbytes: int, flops: float | None, ceiling: float | None) -> "Timing":
        t = np.asarray(times_us, dtype=np.float64)
        med = float(np.median(t))
        bps = nbytes / (med * 1e-6) if med > 0 else None
        return cls(med, float(np.percentile(t, 10)), float(np.percentile(t, 90)), int(t.size),
                   gbps=bps / 1e9 if bps else None,
                   ceiling_share=(bps / ceiling) if (bps and ceiling) else None,
                   tflops=(flops / (med * 1e-6) / 1e12) if (flops and med > 0) else None,
                   step_us=timer_step(t))

    def at(self, median_us: float) -> "Timing":
        """This timing with its median (and the rates from it) at `median_us`: a reference whose
        times move, compared by its fastest credible time (timing.measure_size)."""
        k = self.median_us / median_us if median_us > 0 else 1.0
        return dataclasses.replace(self, median_us=median_us, gbps=self.gbps * k if self.gbps else self.gbps,
                                   ceiling_share=self.ceiling_share * k if self.ceiling_share else self.ceiling_share,
                                   tflops=self.tflops * k if self.tflops else self.tflops)

    def unrated(self) -> "Timing":
        """This timing without the rates taken from the byte model (GB/s, share of the copy ceiling):
        for a size where the model is refuted (model.model_refuted)."""
        return dataclasses.replace(self, gbps=None, ceiling_share=None)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us else float("nan")


@dataclass
class SizeProfile:
    sizes: dict[str, int]
    label: str
    bytes_moved: int
    flops: float | None
    candidate: Timing
    reference: Timing | None = None
    speedup: float | None = None          # reference median / candidate median
    floor_us: float | None = None         # bytes_moved / copy ceiling
    bottleneck: str = ""
    bottleneck_why: str = ""
    implausible: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)   # flags of a first measurement the second did not repeat
    notes: list[str] = field(default_factory=list)         # what the times say of the model (model.model_refuted)
    outputs_checked: str = ""             # what the checks of the timed launches compared
    output_failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # prepare / launches / expect / checks
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)     # per kernel: the time statistics judged
    role: str = ""                        # on the size ladder: 'decode' | 'bench' | 'prefill' ('' before it)


@dataclass
class Profile:
    kernel: str
    backend: str
    measured: bool
    device: str | None = None
    note: str = ""
    resources: dict[str, Any] = field(default_factory=dict)   # registers, spills_bytes, ...
    occupancy: dict[str, Any] = field(default_factory=dict)   # theoretical, limited_by, blocks_per_sm
    ceiling_gbps: float | None = None
    sizes: list[SizeProfile] = field(default_factory=list)
    ncu: dict[str, Any] | None = None
    ran_on: str = ""                      # where it was measured: node and GPU (set by astra_cuda.api)
    hot_lines: list[tuple[int, float, str]] = field(default_factory=list)  # (0-based line, share, label)
    errors: list[str] = field(default_factory=list)
    path: str = ""
    # Nsight Compute's own report of the profiled launch: its bytes cross back from the worker
    # (which may be on another node); `astra_cuda.api` writes them into `.astra/profiles/`.
    ncu_report: bytes | None = field(default=None, repr=False)
    ncu_report_path: str = ""

    # ---- verdict-like views -----------------------------------------------------------------
    @property
    def implausible(self) -> bool:
        return any(s.implausible for s in self.sizes)

    @property
    def valid(self) -> bool:
        """Measured, outputs of the timed launches correct, nothing implausible, no errors."""
        return self.measured and not self.errors and bool(self.sizes) and \
            not any(s.output_failures for s in self.sizes) and not self.implausible

    @property
    def bench_sizes(self) -> list[SizeProfile]:
        """The sizes the headline numbers come from: the spec's bench sizes (the ladder's other
        rungs are reported beside them, never averaged in)."""
        return [self.sizes[i] for i in headline([s.role for s in self.sizes])]

    @property
    def speedup(self) -> float | None:
        """Geometric mean of the per-size speedups over the reference, at the bench sizes."""
        vals = [s.speedup for s in self.bench_sizes if s.speedup]
        return float(math.exp(sum(math.log(v) for v in vals) / len(vals))) if vals else None

    def summary_line(self) -> str:
        regs = self.resources.get("registers")
        tail = f" · {regs} regs" if regs is not None else ""
        if not self.measured:
            return f"{self.kernel}: speed not measured ({self.note or self.backend}){tail}"
        if self.errors and not self.sizes:
            return f"{self.kernel}: not profiled: {self.errors[0]}"
        s = max(self.bench_sizes, key=lambda x: x.bytes_moved)
        parts = [f"{fmt_us(s.candidate.median_us)} @ {s.label}"]
        if s.candidate.gbps:
            parts.append(fmt_bw(s.candidate.gbps))
        if s.candidate.ceiling_share is not None:
            parts.append(f"{100 * s.candidate.ceiling_share:.0f}% of copy ceiling")
        if s.candidate.tflops:
            parts.append(f"{s.candidate.tflops:.1f} TFLOP/s")
        if s.speedup:
            parts.append(f"{s.speedup:.2f}× vs reference")
        line = " · ".join(parts) + tail
        if s.output_failures:
            line += " · OUTPUTS OF TIMED RUNS WRONG"
        elif s.implausible:
            line += " · IMPLAUSIBLE (flagged)"
        return line

    def per_size_line(self) -> str:
        """Each timed size with its speedup and share of the copy ceiling, on one line ('' when
        fewer than two sizes were timed): what a hover shows of the ladder."""
        if not self.measured or len(self.sizes) < 2:
            return ""
        out = []
        for s in self.sizes:
            c = s.candidate
            bits = [f"{s.speedup:.2f}×" if s.speedup else fmt_us(c.median_us)]
            if c.ceiling_share is not None:
                bits.append(f"{100 * c.ceiling_share:.0f}% of ceiling")
            out.append(f"{s.label}{f' ({s.role})' if s.role else ''}: {', '.join(bits)}")
        return " · ".join(out)

    def summary_markdown(self) -> str:
        """A fuller report (Markdown: the editor's hover renders it; readable as plain text)."""
        head = f"**{md(self.kernel)}** — {md(self.summary_line())}"
        if not self.measured or not self.sizes:
            lines = [head]
            lines += [f"- error: {md(e)}" for e in self.errors]
        else:
            where = md(f"{self.device or 'GPU'}") + (f", copy ceiling {fmt_bw(self.ceiling_gbps)}" if self.ceiling_gbps else "")
            lines = [head, "", f"_{where}; CUDA events, L2 flushed between launches, medians of "
                               f"{self.sizes[0].candidate.runs} launches_", "",
                     "| sizes | µs (p10–p90) | bandwidth | of ceiling | vs reference | bottleneck |",
                     "|---|---|---|---|---|---|"]
            for s in self.sizes:
                c = s.candidate
                lines.append(f"| {md(s.label)}{f' ({s.role})' if s.role else ''} | "
                             f"{c.median_us:.1f} ({c.p10_us:.1f}–{c.p90_us:.1f}) | "
                             f"{fmt_bw(c.gbps) if c.gbps else '–'} | "
                             f"{f'{100 * c.ceiling_share:.0f}%' if c.ceiling_share is not None else '–'} | "
                             f"{f'{s.speedup:.2f}×' if s.speedup else '–'} | {s.bottleneck} |")
            lines.append("")
            for s in self.sizes:
                for msg in s.output_failures[:2] + s.implausible:
                    lines.append(f"- ⚠ {md(s.label)}: {md(msg)}")
                lines += [f"- {md(s.label)}: {md(msg)}" for msg in s.notes]
            lines.append(f"- timed outputs: {md(self.sizes[0].outputs_checked)}")
        r, o = self.resources, self.occupancy
        if r:
            lines.append(f"- {r.get('registers', '?')} registers, {r.get('spills_bytes', '?')} B spills, "
                         f"{r.get('shared_static_bytes', '?')} B static shared memory, {r.get('stack_bytes', '?')} B stack")
        if o:
            lines.append(f"- theoretical occupancy {100 * o.get('theoretical', 0):.0f}% "
                         f"({o.get('blocks_per_sm')} blocks/SM, limited by {o.get('limited_by')})")
        if self.ncu and "error" not in self.ncu:
            n = self.ncu
            stalls = ", ".join(f"{x['reason']} {100 * x['share']:.0f}%" for x in n.get("stalls", [])[:3])
            lines.append(f"- Nsight Compute: DRAM {n.get('dram_pct', 0):.0f}%, SM {n.get('sm_pct', 0):.0f}%, "
                         f"achieved occupancy {n.get('achieved_occupancy_pct', 0):.0f}%" +
                         (f"; top stalls: {stalls}" if stalls else ""))
        elif self.ncu:
            lines.append(f"- Nsight Compute: {md(self.ncu['error'])}")
        if self.hot_lines:
            lines.append("- hot lines: " + ", ".join(f"{ln + 1} ({100 * sh:.0f}%)" for ln, sh, _ in self.hot_lines[:5]))
        if self.ncu_report_path:
            lines.append(f"- Nsight Compute report: {md(self.ncu_report_path)} (open it with `ncu-ui`)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("ncu_report", None)   # kept as a file (ncu_report_path), never inlined
        d["hot_lines"] = [list(h) for h in self.hot_lines]
        d["summary"] = self.summary_line()
        d["valid"] = self.valid
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> "Profile":
        d: dict[str, Any] = json.loads(data) if isinstance(data, str) else data
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        sizes = []
        for s in d.get("sizes", []):
            s = dict(s)
            s["candidate"] = Timing(**s["candidate"])
            s["reference"] = Timing(**s["reference"]) if s.get("reference") else None
            sizes.append(SizeProfile(**s))
        d["sizes"] = sizes
        d["hot_lines"] = [tuple(h) for h in d.get("hot_lines", [])]
        return cls(**d)


def timer_step(t: np.ndarray) -> float:
    """The step the times come in, when they come in steps: CUDA events resolve about half a
    microsecond, so a kernel of a few µs shows few distinct times, and its median can move by a
    whole step between two kernels that differ by less. 0 where the times are continuous."""
    values = np.unique(np.round(t, 6))
    if t.size < 8 or values.size > t.size // 4 or values.size < 2:
        return 0.0
    return float(np.min(np.diff(values)))


def fmt_us(x: float) -> str:
    return f"{x:.1f} µs" if x < 10_000 else f"{x / 1000:.2f} ms"


def fmt_bw(gbps: float) -> str:
    return f"{gbps / 1000:.2f} TB/s" if gbps >= 1000 else f"{gbps:.0f} GB/s"


def size_label(sizes: dict[str, int]) -> str:
    return "×".join(str(v) for v in sizes.values())


