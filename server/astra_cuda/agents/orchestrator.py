"""The loop: baseline → profile → plan → code → gate → profile … for N rounds, keeping the BEST
verified candidate and planning from it (a failed or slower round never becomes the base).

Where speed is measured, a candidate is adopted only when it beats the best by `min_gain`;
where it is not (the CPU backend), a verified candidate whose transformation is expected to help
is adopted and the result says that speed was not measured.

A round may propose `candidates` > 1 candidates (the offline team: the next ideas in its order;
an LLM: that many codings of its plan); they are evaluated at once (the executor spreads them over
its GPUs) and at most one of them, the best verified, is adopted. Each candidate is its own record
(`Round.index`), grouped by `Round.batch` (the round). Speedups are compared only between
candidates timed on the same GPU model. When the place that evaluates is lost
(InfrastructureError), the run stops there, resumable; nothing of that round is recorded.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from . import tuning
from .coder import Attempt, LLMCoder, OfflineCoder
from ..evaluation import CachedEvaluate, Evaluation, InfrastructureError, source_hash
from .llm import LLMClient, LLMConfig
from .offline import context_from_spec, context_from_text
from .planner import LLMPlanner, OfflinePlanner
from .records import Plan, Round, Usage
from .result import OptimizeResult
from .runlog import RunLog, new_run_id
from .situation import Situation, describe_sizes

Progress = Callable[[dict], None]


@dataclass(frozen=True)
class Limits:
    max_seconds: float | None = None      # wall time for the whole run
    max_tokens: int | None = None         # LLM tokens (prompt + completion)
    max_cost_usd: float | None = None     # estimated from the LLMConfig's prices
    patience: int = 3                     # LLM mode: stop after this many rounds in a row without adoption
    min_gain: float = 0.01                # measured: must beat the best by 1%
    tune_points: int = 8                  # the tuning stage's budget of parameter points (0: no tuning)


def optimize(text: str, path: str, kernel: str, evaluate: Callable[[str], Evaluation], *,
             rounds: int = 5, llm: LLMConfig | None = None, spec=None, gpu: str = "",
             runs_dir: str | Path | None = None, limits: Limits = Limits(),
             cancel: threading.Event | None = None, progress: Progress | None = None,
             resume: str | None = None, repairs: int = 2, candidates: int = 1,
             run_id: str | None = None) -> OptimizeResult:
    """Optimize `kernel` in the file text `text`.

    evaluate: file text -> Evaluation (gate + profiler; injected by astra_cuda.api).
    llm: None for the offline team (deterministic transformations), else an endpoint.
    spec: the kernel's loaded harness spec (hints: sizes for the prompts and vector widths).
    gpu: the GPU's facts for the planner ('' on the CPU).
    runs_dir: where run logs go (`<workspace>/.astra/runs`); None: no log.
    resume: a run id under runs_dir to continue (its rounds, best and evaluations are reused).
    candidates: candidates proposed and evaluated at once per round (1: one at a time).
    run_id: the new run's id (default: made from the time and the kernel).
    """
    t0 = time.monotonic()
    client = LLMClient(llm) if llm is not None else None   # fails fast (e.g. no API key for OpenAI)
    cancel = cancel or threading.Event()
    candidates = max(1, int(candidates))
    log: RunLog | None = None
    run_id = resume or run_id or new_run_id(kernel)
    if runs_dir is not None:
        log = RunLog(Path(runs_dir) / run_id)

    def measured(text_: str) -> Evaluation:
        e = evaluate(text_)
        if log is not None:
            log.measured(source_hash(text_), e)  # kept at once: an interrupted round loses nothing
        return e
    ev = CachedEvaluate(measured)
    mode = "llm" if llm is not None else "offline"

    def tell(round_: int, step: str, best: float | None, message: str) -> None:
        if progress is not None:
            try:
                progress({"round": round_, "step": step, "best_speedup": best, "message": message})
            except Exception:
                pass  # a broken progress display must not stop the run

    history: list[Round] = []
    if resume and log is not None:
        original = log.read_original() or text
        history = log.rounds()
        t0 -= sum(r.seconds for r in history)  # the run's time includes its earlier sessions
        prior = log.read_baseline()
        if prior is not None:
            ev.seed(original, prior)
        for r in history:
            if r.candidate is not None and r.evaluation is not None:
                ev.seed(r.candidate, r.evaluation)
        for key, e in log.read_measured().items():
            ev.seed_hash(key, e)
        text = original
    elif log is not None:
        log.start({"kernel": kernel, "path": str(path), "mode": mode, "rounds": rounds,
                   "llm": llm.to_json() if llm else None, "limits": asdict(limits), "started": time.time(),
                   "status": "running"}, text)

    result = OptimizeResult(kernel, str(path), mode, text, text, baseline=None, best_eval=None,  # type: ignore[arg-type]
                            run_dir=str(log.dir) if log else None, run_id=run_id if log else None)

    def finish(stopped: str, status: str = "done") -> OptimizeResult:
        result.stopped = stopped
        result.seconds = time.monotonic() - t0
        result.cancelled = cancel.is_set()
        if log is not None:
            log.best(result.best)
            log.update_meta(status=status, stopped=stopped, improved=result.improved, speedup=result.speedup,
                            seconds=round(result.seconds, 2), usage=result.usage.to_json())
        tell(len(result.rounds), "done", result.speedup, stopped)
        return result

    def interrupted(e: InfrastructureError) -> OptimizeResult:
        result.error, result.interrupted = e.message, True
        return finish(f"{e.message}; resume with --resume {run_id}", status="interrupted")

    def tune_stage(stopped: str) -> str:
        """The tuning stage, once the offline team has no idea left (its chain can be replayed)."""
        chain = [(r.index, r.plan.idea, r.plan.params) for r in result.rounds if r.adopted and r.plan is not None]
        if not chain or limits.tune_points <= 0 or cancel.is_set() or _over_limits(limits, t0, result.usage):
            return stopped
        if not s.best_eval.measured:
            result.tuning_note = "no tuning: it compares timings, and speed is not measured here"
            return stopped
        if any(r.plan is None or r.plan.source != "offline" for r in result.rounds if r.adopted) or \
                tuning.replay(text, kernel, [(i, p) for _, i, p in chain], spec) != s.best:
            result.tuning_note = "no tuning: the adopted rewrites cannot be replayed with other parameters"
            return stopped
        deadline = t0 + limits.max_seconds if limits.max_seconds is not None else None
        try:
            best, best_eval, points, _ = tuning.tune(
                text, kernel, chain, ev, s.best, s.best_eval, spec=spec, points=limits.tune_points,
                min_gain=limits.min_gain, deadline=deadline, cancel=cancel, parallel=candidates,
                tell=lambda m: tell(len(result.rounds), "tune", s.best_eval.speedup, m))
        except InfrastructureError as e:   # the evaluations broke down: keep what the rounds found
            result.tuning_note = f"tuning stopped: {e.message}"
            return stopped
        result.tuning = points
        if best != s.best:
            s.best, s.best_eval = best, best_eval
            result.best, result.best_eval = best, best_eval
        if log is not None:
            log.tuning(points)
            log.best(s.best)
        kept = sum(p.outcome == "adopted" for p in points)
        return f"{stopped}; tuning tried {len(points)} point(s), kept {kept}"

    tell(0, "baseline", None, f"resuming run {run_id}" if history else f"checking and timing the original {kernel}")
    try:
        base = ev(text)
    except InfrastructureError as e:
        result.baseline = result.best_eval = Evaluation(_infra_check(e))
        return interrupted(e)
    result.baseline = result.best_eval = base
    if log is not None:
        log.baseline(base)
    if not base.passed and cancel.is_set():
        result.error = "cancelled before the original was measured"
        return finish("cancelled")
    if not base.passed:
        result.error = f"the original kernel does not pass the gate: {base.check.summary}"
        return finish("the original kernel does not pass the gate")

    planner = LLMPlanner(client) if client else OfflinePlanner()
    coder = LLMCoder(client, repairs=repairs) if client else OfflineCoder()
    s = Situation(kernel, str(path), text, text, base, base, context_from_spec(kernel, spec),
                  describe_sizes(spec), gpu, history)

    # Replay a resumed run's rounds: the best adopted candidate becomes the base again.
    for r in history:
        result.rounds.append(r)
        result.usage.add(r.usage)
        if r.adopted and r.candidate is not None and r.evaluation is not None:
            s.best, s.best_eval = r.candidate, r.evaluation
            s.context = context_from_text(kernel, s.best, spec)
    result.best, result.best_eval = s.best, s.best_eval

    stale = 0
    for b in sorted({r.batch for r in history}, reverse=True):  # patience carries over a resume
        if any(r.adopted for r in history if r.batch == b):
            break
        stale += 1
    start_round = max((r.batch for r in history), default=0) + 1
    for i in range(start_round, rounds + 1):
        if cancel.is_set():
            return finish("cancelled; the best verified version so far is kept")
        over = _over_limits(limits, t0, result.usage)
        if over:
            return finish(over)
        best_sp = s.best_eval.speedup
        tell(i, "plan", best_sp, f"round {i}: planning")
        round_t0 = time.monotonic()
        if client is not None:
            client.transcript.clear()
        plans, usage = _plans(planner, s, candidates)
        if not plans:
            if usage.calls:
                result.usage.add(usage)
            return finish(tune_stage("nothing left to try") if mode == "offline" else
                          "the planner had no idea to offer")
        tell(i, "code", best_sp, f"round {i}: " + "; ".join(p.title for p in plans))
        try:
            if len(plans) == 1:
                attempts = [coder.code(plans[0], s, ev, cancel)]
            else:  # evaluated at once: the executor spreads them over its slots
                with ThreadPoolExecutor(len(plans), thread_name_prefix="astra-candidate") as pool:
                    attempts = list(pool.map(lambda p: coder.code(p, s, ev, cancel), plans))
        except InfrastructureError as e:
            return interrupted(e)
        batch = []
        next_index = max((r.index for r in result.rounds), default=0) + 1
        for j, (plan, att) in enumerate(zip(plans, attempts)):
            r = Round(next_index + j, plan, s.best_hash, usage=usage if j == 0 else Usage(), batch=i)
            r.usage.add(att.usage)
            r.candidate, r.evaluation, r.changes, r.attempts = att.candidate, att.evaluation, att.changes, att.attempts
            r.candidate_hash = source_hash(att.candidate) if att.candidate is not None else None
            _judge(r, att, s, limits, cancel)
            r.seconds = time.monotonic() - round_t0
            batch.append(r)
        _keep_best_of(batch)
        if client is not None and batch:
            batch[0].transcript = list(client.transcript)
        winner = next((r for r in batch if r.adopted), None)
        for r in batch:
            history.append(r)
            result.rounds.append(r)
            result.usage.add(r.usage)
        if winner is not None:
            s.best, s.best_eval = winner.candidate, winner.evaluation  # type: ignore[assignment]
            s.context = context_from_text(kernel, s.best, spec)  # the launch may have changed
            result.best, result.best_eval = s.best, s.best_eval
            stale = 0
        else:
            stale += 1
        if log is not None:
            for r in batch:
                log.round(r)
            log.best(s.best)
        for r in batch:
            tell(i, r.outcome, s.best_eval.speedup, f"round {i}: {r.plan.title if r.plan else ''}: {r.outcome}"
                 + (f" ({r.reason})" if r.reason else ""))
        if cancel.is_set():
            return finish("cancelled; the best verified version so far is kept")
        # Offline ideas are few and cheap, so each is tried; an LLM can go on forever: patience.
        if mode == "llm" and stale >= limits.patience:
            return finish(f"{stale} rounds in a row brought no improvement")
    if mode == "offline" and any(r.adopted for r in result.rounds):
        result.tuning_note = "no tuning yet: the rounds ran out before the ideas did (resume with more rounds)"
    return finish(f"all {rounds} rounds done")


def _plans(planner, s: Situation, k: int) -> tuple[list[Plan], Usage]:
    """Up to k plans for one round. The offline team gives its next k different ideas (each idea
    chosen is seen as tried when picking the next); an LLM plan is coded k times."""
    usage = Usage()
    probe = replace(s, history=list(s.history))
    plans: list[Plan] = []
    while len(plans) < k:
        plan, u = planner.plan(probe)
        usage.add(u)
        if plan is None:
            break
        plans.append(plan)
        if plan.source == "llm":
            plans += [plan] * (k - len(plans))
            break
        probe.history.append(Round(0, plan, s.best_hash))
    return plans, usage


def _keep_best_of(batch: list[Round]) -> None:
    """At most one candidate of a round is adopted: the fastest measured one (on ties, or where
    speed is not measured, the first in the planner's order)."""
    adopted = [r for r in batch if r.adopted]
    if len(adopted) < 2:
        return
    best = max(adopted, key=lambda r: r.evaluation.speedup if r.evaluation is not None and r.evaluation.measured
               else float("-inf"))
    if not (best.evaluation is not None and best.evaluation.measured):
        best = adopted[0]
    for r in adopted:
        if r is best:
            continue
        r.outcome = "not faster"
        if r.evaluation is not None and r.evaluation.measured:
            r.reason = (f"{r.evaluation.speedup:.3f}× vs the original, but candidate {best.index} of this round "
                        f"was faster ({best.evaluation.speedup:.3f}×)")
        else:
            r.reason = f"verified, but candidate {best.index} of this round was adopted (one per round)"


def _infra_check(e: InfrastructureError):
    from ..evaluation import Check
    return Check(False, e.message, e.message, 0, "infrastructure")


def _reordered_sums_note(r: Round, e: Evaluation) -> str:
    """A rewrite that sums floats in another order can miss the spec's tolerance by rounding
    alone. The gate keeps the tolerance (only the user can say what "the same result" means):
    the reason says how to accept such differences."""
    from .offline import TRANSFORMS
    t = TRANSFORMS.get(r.plan.idea) if r.plan is not None and r.plan.source == "offline" else None
    if t is None or not t.reorders_sums or "differ beyond atol" not in e.check.summary:
        return ""
    return (" — this rewrite sums in another order than the original, so float results differ by rounding; "
            "the spec's tolerance was kept: where such differences are acceptable, state atol/rtol for the "
            "output in the spec")


def _judge(r: Round, att: Attempt, s: Situation, limits: Limits, cancel: threading.Event) -> None:
    if att.candidate is None or att.evaluation is None:
        r.outcome = "cancelled" if cancel.is_set() else "no candidate"
        r.reason = att.problem or "no usable code"
        return
    e = att.evaluation
    if not e.passed and cancel.is_set():
        r.outcome, r.reason = "cancelled", "cancelled while the candidate was being evaluated"
        return
    if not e.passed:
        r.outcome = "failed"
        r.reason = e.check.summary + _reordered_sums_note(r, e)
        return
    if att.candidate == s.best:
        r.outcome, r.reason = "not faster", "the rewrite is identical to the current best"
        return
    if e.measured and s.best_eval.measured and e.gpu and s.best_eval.gpu and e.gpu != s.best_eval.gpu:
        r.outcome = "not compared"
        r.reason = (f"timed on {e.gpu}, the best on {s.best_eval.gpu}: speedups are never compared across "
                    f"GPU models")
        return
    if e.measured and s.best_eval.measured:
        gain = e.speedup / s.best_eval.speedup
        if gain >= 1.0 + limits.min_gain:
            r.outcome = "adopted"
            r.reason = f"{e.speedup:.3f}× vs the original ({gain:.3f}× vs the previous best)"
        else:
            r.outcome = "not faster"
            r.reason = f"{e.speedup:.3f}× vs the original, not better than the best ({s.best_eval.speedup:.3f}×)"
        return
    r.outcome = "adopted"
    r.reason = f"verified on {e.check.cases} cases; {e.speed_note or 'speed not measured'}"


def _over_limits(limits: Limits, t0: float, usage: Usage) -> str:
    if limits.max_seconds is not None and time.monotonic() - t0 > limits.max_seconds:
        return f"time limit ({limits.max_seconds:g} s) reached"
    if limits.max_tokens is not None and usage.tokens >= limits.max_tokens:
        return f"token limit ({limits.max_tokens}) reached"
    if limits.max_cost_usd is not None and usage.cost_usd >= limits.max_cost_usd:
        return f"cost limit (${limits.max_cost_usd:g}) reached"
    return ""
