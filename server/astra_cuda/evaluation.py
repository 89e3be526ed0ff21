"""What the agents learn about a candidate: the Evaluation, and the `evaluate` protocol — the
contract between the worker side (`astra_cuda.execution.evaluator`, which builds Evaluations from the gate and
the profiler) and the agents (`astra_cuda.agents`, which only read them). Pure data: no imports from
either side.

The orchestrator never runs kernels itself. Whoever drives it (`astra_cuda.api`) injects
`evaluate(file_text) -> Evaluation`, built from the gate (testing agent) and the profiler
(profiling agent), or one given the candidate read (`OnCandidates`). A candidate is always a whole
file text in which the kernel was rewritten.

`Check.feedback` is the only failure text the planning and coding agents see (held-out cases
stay hidden inside the gate). `Evaluation.profile` is None where speed is not measured (the CPU
backend); then `speed_note` says why.
"""
from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal, Protocol

from .errors import AstraError
from .model.candidate import Candidate

# Where a candidate's check stopped: before the gate ran it ('static': screening, the cut, the launch
# rule; 'compile'), the gate's own outcome ('check' a check failed, 'passed', and the verdict statuses
# 'failed', 'unsupported', 'error'), or the place that evaluated it was lost ('infrastructure').
Stage = Literal["static", "compile", "check", "passed", "failed", "unsupported", "error", "infrastructure"]


@dataclass(frozen=True)
class Check:
    """The gate's verdict, as the agents see it."""

    passed: bool
    summary: str                 # one line: 'passed 42 cases on cpu' / 'compile error' / ...
    feedback: str = ""           # failure details the agents may see (compiler log, failing case)
    cases: int = 0               # cases verified (0 when it did not get that far)
    stage: Stage = "check"       # where it stopped
    matrix: tuple[dict[str, Any], ...] = ()  # the verification matrix (gate.verdict.Coverage.matrix), for reports

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SizeTiming:
    sizes: dict[str, int]
    baseline_us: float
    candidate_us: float
    copy_share: float | None = None   # achieved bandwidth / measured copy ceiling, 0..1
    role: str = ""                    # on the size ladder: 'decode' | 'bench' | 'prefill' ('' before it)
    step_us: float = 0.0              # the timer's step at this size, where its times come in steps (else 0)

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.candidate_us if self.candidate_us > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


@dataclass(frozen=True)
class ProfileSummary:
    """The profiler's findings for one candidate, timed side by side with the baseline."""

    sizes: tuple[SizeTiming, ...]
    bottleneck: str | None = None      # 'memory' | 'compute' | 'latency'
    registers: int | None = None
    occupancy: float | None = None     # theoretical, 0..1
    device: str = ""                   # e.g. 'NVIDIA H100 80GB HBM3'
    notes: str = ""                    # anything else worth telling the planner (Nsight metrics...)

    @property
    def bench(self) -> tuple[SizeTiming, ...]:
        """The spec's bench sizes: the headline numbers come from these; the ladder's decode and
        prefill points are judged one by one (`slowest_against`), never averaged in."""
        roles = [t.role for t in self.sizes]
        return tuple(self.sizes[i] for i in range(len(roles)) if roles[i] in ("", "bench")) or self.sizes

    @property
    def geomean_speedup(self) -> float:
        vals = [t.speedup for t in self.bench if t.speedup > 0 and math.isfinite(t.speedup)]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    @property
    def best_copy_share(self) -> float | None:
        shares = [t.copy_share for t in self.bench if t.copy_share is not None]
        return max(shares) if shares else None

    def slowest_against(self, other: "ProfileSummary | None" = None) -> tuple[SizeTiming, float] | None:
        """The size where this version fares worst, and its ratio there (below 1: slower): against
        the original it was timed beside, or against `other` at the sizes both were timed at. A
        difference within one step of the timer (µs-scale sizes) counts as none."""
        worst: tuple[SizeTiming, float] | None = None
        theirs = {_key(t): t for t in other.sizes} if other is not None else {}
        for t in self.sizes:
            if other is None:
                mine, base, step = t.candidate_us, t.baseline_us, t.step_us
            else:
                o = theirs.get(_key(t))
                if o is None or not (t.baseline_us > 0 and o.baseline_us > 0):
                    continue
                # both were timed beside the same original: compare their times relative to it
                mine, base = t.candidate_us / t.baseline_us, o.candidate_us / o.baseline_us
                step = max(t.step_us / t.baseline_us, o.step_us / o.baseline_us)
            if not (mine > 0 and base > 0):
                continue
            ratio = 1.0 if step and abs(mine - base) <= step else base / mine   # within a step: nothing measured
            if math.isfinite(ratio) and (worst is None or ratio < worst[1]):
                worst = (t, ratio)
        return worst

    def to_json(self) -> dict[str, Any]:
        return {"sizes": [t.to_json() for t in self.sizes], "bottleneck": self.bottleneck,
                "registers": self.registers, "occupancy": self.occupancy, "device": self.device,
                "notes": self.notes, "geomean_speedup": self.geomean_speedup}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ProfileSummary":
        sizes = tuple(SizeTiming(dict(t["sizes"]), t["baseline_us"], t["candidate_us"], t.get("copy_share"),
                                 t.get("role", ""), t.get("step_us", 0.0)) for t in d.get("sizes", ()))
        return cls(sizes, d.get("bottleneck"), d.get("registers"), d.get("occupancy"), d.get("device", ""),
                   d.get("notes", ""))


@dataclass(frozen=True)
class Evaluation:
    check: Check
    profile: ProfileSummary | None = None
    speed_note: str = ""   # why there is no profile, e.g. 'speed not measured on the CPU backend'
    registers: int | None = None   # static resource data when there is no profile
    seconds: float = 0.0
    gate_seconds: float = 0.0      # of `seconds`, the part the gate (testing agent) took
    node: str = ""                 # where it ran (the host; a Ray node's address)
    gpu: str = ""                  # the GPU that ran it ('' on the CPU backend)
    # The reference as timed beside the candidate, read as its own evaluation would read it (its
    # times on both sides, its share of the copy ceiling, its class): the original's profile
    # without timing it again (a rerun's baseline, `agents.orchestrator`). None where not timed.
    reference: ProfileSummary | None = None
    gate_timings: dict[str, float] = field(default_factory=dict)   # seconds per gate step (`Verdict.timings`)
    # non-empty: the search's answer, compiled from the reference's proven cut (`compile.fastpath`),
    # not the whole file; a final verdict (`agents.final_gate`) compiles the whole file again
    search_cut: str = ""

    @property
    def passed(self) -> bool:
        return self.check.passed

    @property
    def measured(self) -> bool:
        return self.profile is not None and bool(self.profile.sizes)

    @property
    def speedup(self) -> float | None:
        return self.profile.geomean_speedup if self.profile is not None and self.measured else None

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check.to_json(), "profile": self.profile.to_json() if self.profile else None,
                "speed_note": self.speed_note, "registers": self.registers, "seconds": self.seconds,
                "gate_seconds": self.gate_seconds, "node": self.node, "gpu": self.gpu,
                **({"reference": self.reference.to_json()} if self.reference is not None else {}),
                **({"gate_timings": self.gate_timings} if self.gate_timings else {}),
                **({"search_cut": self.search_cut} if self.search_cut else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Evaluation":
        return cls(Check(**{**d["check"], "matrix": tuple(d["check"].get("matrix", ()))}),
                   ProfileSummary.from_json(d["profile"]) if d.get("profile") else None,
                   d.get("speed_note", ""), d.get("registers"), d.get("seconds", 0.0), d.get("gate_seconds", 0.0),
                   d.get("node", ""), d.get("gpu", ""),
                   ProfileSummary.from_json(d["reference"]) if d.get("reference") else None,
                   {str(k): float(v) for k, v in (d.get("gate_timings") or {}).items()}, str(d.get("search_cut", "")))


def _key(t: SizeTiming) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(t.sizes.items()))


class InfrastructureError(AstraError):
    """The place that evaluated (a Ray worker or node) was lost, and so was the one retry: no
    verdict on the candidate. The run stops (resumable); nothing is recorded as the candidate's."""


class Evaluate(Protocol):
    """evaluate(file_text) -> Evaluation. Must not raise for a bad candidate: a compile error or
    a failed check is an Evaluation with check.passed False. InfrastructureError passes through
    (the run stops there); any other exception is that one candidate's failure."""

    def __call__(self, file_text: str) -> Evaluation: ...


class OnCandidates:
    """An evaluate given each candidate read (`model.candidate.Candidate`: its model and its own
    spec) instead of its text: `api`'s, which resolves the candidate's launch on the caller side
    and sends the worker the text with it. The orchestrator reads a text it is given once."""

    def __init__(self, evaluate: Callable[[Candidate], Evaluation],
                 with_original: Callable[[Candidate], Evaluation] | None = None,
                 final: Callable[[Candidate], Evaluation] | None = None):
        self.evaluate = evaluate
        # a candidate evaluated with the original checked in the same gate, which has not passed
        # it on its own in this run (a rerun's remembered rewrite); None: not offered
        self.with_original = with_original
        # the final verdict: the whole file compiled by nvcc (`agents.final_gate`); None: not offered,
        # so an evaluation of the search's fast path (`Evaluation.search_cut`) is never adopted
        self.final = final

    def __call__(self, candidate: Candidate) -> Evaluation:
        return self.evaluate(candidate)


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class CachedEvaluate:
    """Evaluate each distinct source once (thread-safe); exceptions become failed checks."""

    def __init__(self, evaluate: Callable[[str], Evaluation]):
        self._evaluate = evaluate
        self._cache: dict[str, Evaluation] = {}
        self._lock = threading.Lock()
        self.calls = 0

    def seed(self, file_text: str, evaluation: Evaluation) -> None:
        """Reuse an evaluation made earlier (a resumed run's log)."""
        self.seed_hash(source_hash(file_text), evaluation)

    def seed_hash(self, key: str, evaluation: Evaluation) -> None:
        """The same, by the source's hash (`source_hash`)."""
        with self._lock:
            self._cache[key] = evaluation

    def __call__(self, file_text: str | Candidate) -> Evaluation:
        """`file_text`: a text, or a candidate read (given to the evaluate as it is)."""
        key = source_hash(file_text.text if isinstance(file_text, Candidate) else file_text)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        self.calls += 1
        try:
            ev = self._evaluate(file_text)  # type: ignore[arg-type]
        except InfrastructureError:
            raise  # not the candidate's fault, and not remembered: a resume evaluates it again
        except Exception as e:  # an evaluator bug must not kill the run
            ev = Evaluation(Check(False, f"evaluation failed: {type(e).__name__}",
                                  feedback=f"the evaluation itself failed: {e}", stage="error"))
        with self._lock:
            self._cache[key] = ev
        return ev

    def again(self, file_text: str) -> Evaluation:
        """Measure `file_text` once more (its earlier evaluation is replaced): for a verdict at the
        timer's noise that must repeat to stand (`dispatch.attempt`)."""
        with self._lock:
            self._cache.pop(source_hash(file_text), None)
        return self(file_text)


NOT_MEASURED = "speed not measured (no GPU): correctness verified only"

__all__ = ["Check", "Stage", "SizeTiming", "ProfileSummary", "Evaluation", "Evaluate", "OnCandidates", "CachedEvaluate",
           "InfrastructureError",
           "source_hash", "NOT_MEASURED"]
