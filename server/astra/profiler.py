"""The profiling agent: how fast is the candidate, against what ceiling, and why.

    p = profiler.profile(reference_unit, candidate_unit, spec, backend)   # inside a worker
    p.summary_line()   # '41.2 µs @ 4096×11008 · 2.9 TB/s · 78% of copy ceiling · 32 regs'
    p.to_json() / Profile.from_json(...)

On the GPU, per bench size: CUDA-event times (warm-up, >=100 launches, L2 flushed, input sets
rotated), the reference timed in the same process, interleaved with the candidate in chunks so
drifting clocks hit both alike; achieved bandwidth from the bytes the spec says must move, as a
share of the measured copy ceiling; FLOP/s when the spec declares flops; registers, spills,
shared memory and theoretical occupancy; a bottleneck class. The buffers the timed launches
wrote are re-validated afterwards (astra.gate.timed) — a candidate that cheats only while
timed is caught. Implausible numbers (faster than the bytes allow, or >10x the reference) are
flagged with an explanation, never silently accepted.

With `ncu=True` and Nsight Compute on the PATH, one launch is profiled in a subprocess for
DRAM/SM throughput, achieved occupancy, warp-stall reasons and per-line counters mapped to the
user's file (`hot_lines`, the data for editor annotations).

On the CPU backend speed is not measured: the profile says so and carries static data only.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import static

# Hopper (H100/H200) per-SM limits, used when no device can be asked.
HOPPER = {"regs_per_sm": 65536, "smem_per_sm": 228 * 1024, "threads_per_sm": 2048, "blocks_per_sm": 32,
          "smem_reserved_per_block": 1024, "max_warps_per_sm": 64}
FLOOR_MARGIN = 0.90        # a time below 90% of the roofline floor is implausible
MAX_PLAUSIBLE_SPEEDUP = 10.0
MEMORY_BOUND_SHARE = 0.50  # of the copy ceiling
LATENCY_SHARE = 0.25
# Ridge point (FLOP per byte) of an H100 SXM for FP32 non-tensor work: ~60 TFLOP/s over ~3 TB/s.
NOMINAL_RIDGE = 20.0
CHUNK = 25                 # timed launches per interleaving chunk


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    gbps: float | None = None
    ceiling_share: float | None = None
    tflops: float | None = None

    @classmethod
    def of(cls, times_us: list[float], nbytes: int, flops: float | None, ceiling: float | None) -> "Timing":
        t = np.asarray(times_us, dtype=np.float64)
        med = float(np.median(t))
        bps = nbytes / (med * 1e-6) if med > 0 else None
        return cls(med, float(np.percentile(t, 10)), float(np.percentile(t, 90)), int(t.size),
                   gbps=bps / 1e9 if bps else None,
                   ceiling_share=(bps / ceiling) if (bps and ceiling) else None,
                   tflops=(flops / (med * 1e-6) / 1e12) if (flops and med > 0) else None)

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
    outputs_checked: str = ""             # what the post-timing re-validation compared
    output_failures: list[str] = field(default_factory=list)


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
    hot_lines: list[tuple[int, float, str]] = field(default_factory=list)  # (0-based line, share, label)
    errors: list[str] = field(default_factory=list)
    path: str = ""

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
    def speedup(self) -> float | None:
        """Geometric mean of the per-size speedups over the reference."""
        vals = [s.speedup for s in self.sizes if s.speedup]
        return float(math.exp(sum(math.log(v) for v in vals) / len(vals))) if vals else None

    def summary_line(self) -> str:
        regs = self.resources.get("registers")
        tail = f" · {regs} regs" if regs is not None else ""
        if not self.measured:
            return f"{self.kernel}: speed not measured ({self.note or self.backend}){tail}"
        if self.errors and not self.sizes:
            return f"{self.kernel}: not profiled: {self.errors[0]}"
        s = max(self.sizes, key=lambda x: x.bytes_moved)
        parts = [f"{_us(s.candidate.median_us)} @ {s.label}"]
        if s.candidate.gbps:
            parts.append(_bw(s.candidate.gbps))
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

    def summary_markdown(self) -> str:
        """A fuller report (Markdown: the editor's hover renders it; readable as plain text)."""
        head = f"**{self.kernel}** — {self.summary_line()}"
        if not self.measured or not self.sizes:
            lines = [head]
            lines += [f"- error: {e}" for e in self.errors]
        else:
            where = f"{self.device or 'GPU'}" + (f", copy ceiling {_bw(self.ceiling_gbps)}" if self.ceiling_gbps else "")
            lines = [head, "", f"_{where}; CUDA events, L2 flushed between launches, medians of "
                               f"{self.sizes[0].candidate.runs} launches_", "",
                     "| sizes | µs (p10–p90) | bandwidth | of ceiling | vs reference | bottleneck |",
                     "|---|---|---|---|---|---|"]
            for s in self.sizes:
                c = s.candidate
                lines.append(f"| {s.label} | {c.median_us:.1f} ({c.p10_us:.1f}–{c.p90_us:.1f}) | "
                             f"{_bw(c.gbps) if c.gbps else '–'} | "
                             f"{f'{100 * c.ceiling_share:.0f}%' if c.ceiling_share is not None else '–'} | "
                             f"{f'{s.speedup:.2f}×' if s.speedup else '–'} | {s.bottleneck} |")
            lines.append("")
            for s in self.sizes:
                for msg in s.output_failures[:2] + s.implausible:
                    lines.append(f"- ⚠ {s.label}: {msg}")
            lines.append(f"- timed outputs: {self.sizes[0].outputs_checked}")
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
            lines.append(f"- Nsight Compute: {self.ncu['error']}")
        if self.hot_lines:
            lines.append("- hot lines: " + ", ".join(f"{ln + 1} ({100 * sh:.0f}%)" for ln, sh, _ in self.hot_lines[:5]))
        return "\n".join(lines)

    def to_json(self) -> dict:
        d = asdict(self)
        d["hot_lines"] = [list(h) for h in self.hot_lines]
        d["summary"] = self.summary_line()
        d["valid"] = self.valid
        return d

    @classmethod
    def from_json(cls, d: dict | str) -> "Profile":
        if isinstance(d, str):
            d = json.loads(d)
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


def _us(x: float) -> str:
    return f"{x:.1f} µs" if x < 10_000 else f"{x / 1000:.2f} ms"


def _bw(gbps: float) -> str:
    return f"{gbps / 1000:.2f} TB/s" if gbps >= 1000 else f"{gbps:.0f} GB/s"


def size_label(sizes: dict[str, int]) -> str:
    return "×".join(str(v) for v in sizes.values())


# ---- occupancy and bottleneck ------------------------------------------------------------

def theoretical_occupancy(threads_per_block: int, registers: int | None, smem_per_block: int,
                          limits: dict | None = None) -> dict:
    """Resident blocks per SM and the warp occupancy they give (the CUDA occupancy calculator's
    rules: registers allocated per warp in units of 256, shared memory plus 1 KiB reserved per
    block)."""
    lim = dict(HOPPER)
    lim.update({k: v for k, v in (limits or {}).items() if v})
    warps = max(1, math.ceil(threads_per_block / 32))
    max_warps = lim["threads_per_sm"] // 32
    by = {"threads": max_warps // warps, "blocks": lim["blocks_per_sm"]}
    if registers:
        per_warp = math.ceil(registers * 32 / 256) * 256
        by["registers"] = (lim["regs_per_sm"] // per_warp) // warps
    per_block = smem_per_block + lim["smem_reserved_per_block"]
    by["shared memory"] = lim["smem_per_sm"] // per_block if per_block else lim["blocks_per_sm"]
    blocks = max(0, min(by.values()))
    limited_by = min(by, key=lambda k: by[k])
    return {"theoretical": round(blocks * warps / max_warps, 3), "blocks_per_sm": blocks,
            "limited_by": limited_by, "warps_per_block": warps}


def classify(t: Timing, nbytes: int, flops: float | None) -> tuple[str, str]:
    share = t.ceiling_share or 0.0
    if share >= MEMORY_BOUND_SHARE:
        return "memory-bound", f"{100 * share:.0f}% of the copy ceiling: the bytes moved set the time"
    ai = flops / nbytes if (flops and nbytes) else None
    if ai is not None and ai >= NOMINAL_RIDGE:
        return "compute-bound", f"{ai:.1f} FLOP/byte is above the ridge (~{NOMINAL_RIDGE:g}) and bandwidth is low"
    if share < LATENCY_SHARE or t.median_us < 10:
        return "latency-bound", (f"only {100 * share:.0f}% of the copy ceiling" +
                                 (f" and {ai:.2f} FLOP/byte" if ai is not None else "") +
                                 ": too little work in flight (parallelism, dependent loads, launch overhead)")
    return "memory-bound", (f"{100 * share:.0f}% of the copy ceiling with low arithmetic intensity: memory "
                            f"traffic dominates but access patterns leave bandwidth unused")


# ---- the agent ---------------------------------------------------------------------------

def _params(unit) -> dict[str, str]:
    from . import source
    k = source.parse(unit.source).kernel(unit.kernel)
    return {p.name: p.type for p in k.params} if k else {}


def _static_resources(unit, arch: str) -> tuple[dict, list[str]]:
    r = static.compile_unit(unit, arch)
    res = r.resources.get(unit.name_expression) or next(iter(r.resources.values()), None)
    errs = [d.message for d in r.diagnostics if d.severity == "error"]
    return (asdict(res) if res else {}), errs


def _compile(backend, unit):
    options = [f"-I{d}" for d in getattr(unit, "include_dirs", ())]
    return backend.compile(unit.source, [unit.name_expression], filename=unit.path, options=options)


def profile(reference_unit, candidate_unit, spec, backend, *, ncu: bool = False, arch: str = "sm_90",
            reps: int = 100, warmup: int = 20, sets: int | None = None, seed: int | None = None,
            reference_spec=None) -> Profile:
    """Profile `candidate_unit` on the spec's bench sizes (see the module docstring). `backend`
    is a Backend instance, or None for static data only. `sets`: input sets rotated by the timing
    loop (default: 2, or 1 where one set is over twice the L2 cache — flushed between launches,
    such data cannot be served from the cache anyway, and each set costs input generation).
    `spec` launches the candidate, `reference_spec` (default `spec`) the reference."""
    kernel = candidate_unit.kernel
    prof = Profile(kernel=kernel, backend=getattr(backend, "name", "static"), measured=False,
                   path=getattr(candidate_unit, "path", ""))
    resources, errs = _static_resources(candidate_unit, arch)
    prof.resources = resources
    cases = spec.bench_cases()
    block = spec.launch_dims(cases[0])[1] if cases else (1, 1, 1)
    smem = (resources.get("shared_static_bytes") or 0) + (spec.launch_dims(cases[0])[2] if cases else 0)
    prof.occupancy = theoretical_occupancy(block[0] * block[1] * block[2], resources.get("registers"), smem)
    if errs:
        prof.errors.append(f"the candidate does not compile: {errs[0]}")
        return prof
    if backend is None or not getattr(backend, "measures_time", False):
        prof.note = ("speed is not measured on the CPU backend (it checks correctness only); "
                     "static resource data from NVRTC for " + arch) if backend is not None else \
                    f"no backend can run kernels here; static resource data from NVRTC for {arch}"
        return prof
    return _profile_gpu(prof, reference_unit, candidate_unit, spec, backend, cases, ncu=ncu, reps=reps,
                        warmup=warmup, sets=sets, seed=seed, rspec=reference_spec or spec)


def _launch_counts(n_sets: int, calls: list[tuple[int, int]]) -> list[int]:
    counts = [0] * n_sets
    for w, r in calls:
        for i in range(w):
            counts[i % n_sets] += 1
        for i in range(r):
            counts[i % n_sets] += 1
    return counts


def _profile_gpu(prof: Profile, reference_unit, candidate_unit, spec, backend, cases, *, ncu: bool, reps: int,
                 warmup: int, sets: int | None, seed: int | None, rspec) -> Profile:
    from . import gate
    from .backends.base import CompileError, LaunchError
    from .gate import checks
    prof.measured = True
    info = backend.device_info() if hasattr(backend, "device_info") else {}
    prof.device = info.get("name")
    try:
        cand = _compile(backend, candidate_unit)
        ref = _compile(backend, reference_unit) if reference_unit is not None else None
    except CompileError as e:
        prof.errors.append(f"does not compile for the GPU: {e}")
        prof.measured = False
        return prof
    live = backend.resources(cand, candidate_unit.name_expression)
    prof.resources.update({k: v for k, v in asdict(live).items() if v is not None and k != "spills_bytes"})
    if info and cases:
        block = spec.launch_dims(cases[0])[1]
        smem = (prof.resources.get("shared_static_bytes") or 0) + spec.launch_dims(cases[0])[2]
        prof.occupancy = theoretical_occupancy(block[0] * block[1] * block[2], prof.resources.get("registers"),
                                               smem, {k: info.get(k) for k in ("regs_per_sm", "smem_per_sm",
                                                                               "threads_per_sm", "blocks_per_sm")})
    ceiling = backend.copy_ceiling() if hasattr(backend, "copy_ceiling") else None
    prof.ceiling_gbps = ceiling / 1e9 if ceiling else None
    params = _params(candidate_unit)
    ctypes = checks.scalar_ctypes(spec, params)
    name_c, name_r = candidate_unit.name_expression, (reference_unit.name_expression if reference_unit else None)
    rng = np.random.default_rng(seed)
    for sizes in cases:
        launch, r_launch = gate.launch_of(spec, sizes), gate.launch_of(rspec, sizes)
        nbytes = spec.bytes_moved(sizes)
        flops = spec.flop_count(sizes)
        s = int(rng.integers(1, 2**31 - 1))
        n_sets = sets or (1 if nbytes > 2 * (info.get("l2_bytes") or 50 << 20) else 2)
        try:
            # Without a reference, the timed outputs must equal the candidate's own first launch.
            expect_from = (ref, name_r) if ref is not None else (cand, name_c)
            cset = gate.prepare_timed(spec, backend, sizes, reference=expect_from, sets=n_sets, seed=s, params=params,
                                      reference_spec=rspec if ref is not None else None)
            # The reference runs on the very same inputs (its own copies: in-place kernels write them).
            rset = [checks.prepare(spec, backend, sizes, t.host, ctypes, t.poison) for t in cset] \
                if ref is not None else None
            # In-place arguments are restored from pristine copies before every launch (outside
            # the timed region): realistic data each time, and what is left is one application,
            # which re-validation compares exactly instead of replaying 100+ compounding launches.
            inout = [a.name for a in spec.args.values() if a.inout]
            c_restore = [[(t.buffers[n], backend.upload(t.host[n])) for n in inout] for t in cset] if inout else None
            r_restore = [[(r.buffers[n], backend.upload(t.host[n])) for n in inout] for r, t in zip(rset, cset)] \
                if inout and rset is not None else None
            c_times, r_times, c_calls, r_calls = [], [], [], []
            done = 0
            while done < reps:
                n = min(CHUNK, reps - done)
                w = warmup if done == 0 else 2
                c_times += backend.time(cand, name_c, launch, [t.args for t in cset], warmup=w, reps=n,
                                        restore=c_restore).times_us
                c_calls.append((w, n))
                if ref is not None:
                    r_times += backend.time(ref, name_r, r_launch, [t.args for t in rset], warmup=w, reps=n,
                                            restore=r_restore).times_us
                    r_calls.append((w, n))
                done += n
        except LaunchError as e:
            prof.errors.append(f"at {size_label(sizes)}: {e}")
            break
        except Exception as e:  # out of device memory and the like: report, never crash the job
            prof.errors.append(f"at {size_label(sizes)}: {e.__class__.__name__}: {e}")
            break
        sp = SizeProfile(sizes=dict(sizes), label=size_label(sizes), bytes_moved=nbytes, flops=flops,
                         candidate=Timing.of(c_times, nbytes, flops, ceiling))
        if ref is not None:
            sp.reference = Timing.of(r_times, nbytes, flops, ceiling)
            sp.speedup = sp.reference.median_us / sp.candidate.median_us
        # Re-validate what the timed launches left behind.
        counts = [1] * n_sets if c_restore else _launch_counts(n_sets, c_calls)
        rv = gate.revalidate_after_timing(spec, backend, cset, launches=counts, reference=expect_from,
                                          params=params, reference_spec=rspec if ref is not None else None)
        sp.outputs_checked = (f"{rv.checked} output array(s) of the timed launches compared with the "
                              f"{'reference' if ref is not None else 'candidate’s own first launch'}")
        if rv.notes:
            sp.outputs_checked += "; " + "; ".join(rv.notes)
        sp.output_failures = [f.message for f in rv.failures]
        if ceiling:
            sp.floor_us = nbytes / ceiling * 1e6
            if sp.candidate.median_us < FLOOR_MARGIN * sp.floor_us:
                sp.implausible.append(
                    f"{_us(sp.candidate.median_us)} is below the roofline floor of {_us(sp.floor_us)} for the "
                    f"{nbytes / 1e6:.1f} MB the spec says must move at the measured copy ceiling "
                    f"({_bw(ceiling / 1e9)}): the kernel cannot have done the work (skipped work, cached "
                    f"results, or a spec that overstates bytes) — flagged for audit")
        if sp.speedup and sp.speedup > MAX_PLAUSIBLE_SPEEDUP:
            sp.implausible.append(f"{sp.speedup:.1f}× faster than the reference is beyond the {MAX_PLAUSIBLE_SPEEDUP:g}× "
                                  f"plausibility limit — flagged for audit, not accepted silently")
        sp.bottleneck, sp.bottleneck_why = classify(sp.candidate, nbytes, flops)
        prof.sizes.append(sp)
        del cset, rset
    if ncu:
        try:
            # The smallest bench size: ncu replays the kernel many times, saving memory each time.
            prof.ncu, prof.hot_lines = run_ncu(candidate_unit, spec, min(cases, key=spec.elements) if cases else None)
        except NcuUnavailable as e:
            prof.ncu = {"error": str(e)}
    return prof


# ---- Nsight Compute ----------------------------------------------------------------------

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


def run_ncu(unit, spec, sizes: dict | None, timeout: float = 240.0) -> tuple[dict, list[tuple[int, float, str]]]:
    """Profile one launch of `unit` at `sizes` under Nsight Compute (a subprocess driving
    `python -m astra.profiler ncu-driver`). Returns (metrics, hot lines)."""
    exe = _ncu_exe()
    if exe is None:
        raise NcuUnavailable("Nsight Compute (ncu) is not on the PATH")
    if sizes is None:
        raise NcuUnavailable("no bench size to profile")
    with tempfile.TemporaryDirectory(prefix="astra-ncu-") as tmp:
        payload = os.path.join(tmp, "job.pkl")
        with open(payload, "wb") as f:
            pickle.dump({"unit": unit, "spec": spec, "sizes": sizes}, f)
        rep = os.path.join(tmp, "report")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([p for p in sys.path if p] +
                                                          [env.get("PYTHONPATH", "")]))
        base = unit.name_expression.split("<")[0].split("::")[-1]
        cmd = [exe, "--target-processes", "all", "--kernel-name", f"regex:{re.escape(base)}", "--launch-count", "1",
               "--import-source", "yes", "-f", "-o", rep]
        for sec in NCU_SECTIONS:
            cmd += ["--section", sec]
        cmd += ["--metrics", ",".join(NCU_METRICS.values()), sys.executable, "-m", "astra.profiler", "ncu-driver",
                payload]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if p.returncode != 0 or not os.path.exists(rep + ".ncu-rep"):
            raise NcuUnavailable(f"ncu failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-400:]}")
        raw = subprocess.run([exe, "-i", rep + ".ncu-rep", "--csv", "--page", "raw"], capture_output=True,
                             text=True, timeout=timeout).stdout
        # Metrics are correlated with source lines only in the 'cuda,sass' view.
        src = subprocess.run([exe, "-i", rep + ".ncu-rep", "--csv", "--page", "source", "--print-source", "cuda,sass"],
                             capture_output=True, text=True, timeout=timeout).stdout
    metrics = parse_ncu_raw(raw)
    hot = parse_ncu_source(src, unit.path)
    metrics["sizes"] = dict(sizes)
    if not hot:  # keep the start of what ncu printed, to see why no line data came back
        metrics["source_page_head"] = src[:600]
    return metrics, hot


def parse_ncu_raw(text: str) -> dict:
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


def _ncu_driver(payload_path: str) -> None:
    """Run once under ncu: compile the unit on the GPU, launch it on fresh inputs."""
    from . import gate
    from .backends.gpu import GpuBackend
    with open(payload_path, "rb") as f:
        job = pickle.load(f)
    unit, spec, sizes = job["unit"], job["spec"], job["sizes"]
    b = GpuBackend()
    mod = _compile(b, unit)
    sets = gate.prepare_timed(spec, b, sizes, reference=None, sets=1, params=_params(unit))
    b.launch(mod, unit.name_expression, gate.launch_of(spec, sizes), sets[0].args)


# ---- worker job --------------------------------------------------------------------------

def profile_job(payload: dict) -> Profile:
    """Worker job: {'backend': 'gpu'|'cpu'|'static', 'reference', 'candidate', 'spec', 'arch', 'ncu'}."""
    name = payload.get("backend", "gpu")
    b = None
    if name != "static":
        from . import jobs
        b = jobs.backend(name, payload.get("arch", "sm_90"))
    return profile(payload.get("reference"), payload["candidate"], payload["spec"], b,
                   ncu=payload.get("ncu", False), arch=payload.get("arch", "sm_90"))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "ncu-driver":
        _ncu_driver(sys.argv[2])
    else:
        print("usage: python -m astra.profiler ncu-driver PAYLOAD.pkl", file=sys.stderr)
        sys.exit(2)
