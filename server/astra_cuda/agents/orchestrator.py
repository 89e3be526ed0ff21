"""The loop: baseline → profile → plan → code → gate → profile … for N rounds, keeping the BEST
verified candidate and planning from it (a failed or slower round never becomes the base). A
rewrite faster at the bench sizes but slower at another may keep both versions, selected by size (`dispatch`).

Where speed is measured, a candidate is adopted only when it beats the best by `min_gain`;
where it is not (the CPU backend), a verified candidate whose transformation is expected to help
is adopted and the result says that speed was not measured.

A round may propose `candidates` > 1 candidates (the offline team: the next ideas in its order;
an LLM: that many codings of its plan); they are evaluated at once (the executor spreads them over
its GPUs) and at most one of them, the best verified, is adopted. Each candidate is its own record
(`Round.index`), grouped by `Round.batch` (the round). Speedups are compared only between
candidates timed on the same GPU model. When the place that evaluates is lost
(InfrastructureError), the run stops there, resumable; nothing of that round is recorded.

With a `memory` (`.astra/tuning/`), a finished offline search is remembered for the kernel, its
sizes and the GPU model; a later run on the same model replays the remembered chain, gates and
times it like any candidate, and stops there when it still holds (see `memory`); its original is
gated in the same gate and timed beside it, not evaluated alone first.

Long because one run is one class, `_Run`, with a method per step (open or resume, baseline, round,
tuning, recall, finish) over the run's shared state (`verdicts` judges each round).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

from . import dispatch, enabling, final_gate, tuning
from .coder import Attempt, LLMCoder, OfflineCoder
from ..evaluation import CachedEvaluate, Check, Evaluation, InfrastructureError, OnCandidates, source_hash
from ..model.candidate import Candidate
from ..model.spec import Spec
from ..progress import Progress, ProgressEvent, Step
from .llm import LLMClient, LLMConfig
from .memory import Memory, Remembered
from .offline import context_from_spec, style
from .planner import LLMPlanner, OfflinePlanner
from .records import Plan, Round, Usage
from .result import OptimizeResult
from .runlog import RunLog, new_run_id
from .situation import Situation, describe_sizes
from .sizes import slower_at_a_size
from .verdicts import Limits, judge, over_limits



def optimize(text: str | Candidate, path: str, kernel: str, evaluate: Callable[[str], Evaluation] | OnCandidates, *,
             rounds: int = 5, llm: LLMConfig | None = None, spec: Spec | None = None, gpu: str = "",
             runs_dir: str | Path | None = None, limits: Limits = Limits(),
             cancel: threading.Event | None = None, progress: Progress | None = None,
             resume: str | None = None, repairs: int = 2, candidates: int = 1,
             run_id: str | None = None, memory: Memory | None = None, headers: tuple[str, ...] = ()) -> OptimizeResult:
    """Optimize `kernel` in the file text `text` (or that text read already, `Candidate.of`).

    evaluate: file text -> Evaluation (gate + profiler; injected by astra_cuda.api, which takes
    each candidate read instead: `OnCandidates`).
    llm: None for the offline team (deterministic transformations), else an endpoint.
    spec: the kernel's loaded harness spec (hints: sizes for the prompts and vector widths).
    gpu: the GPU's facts for the planner ('' on the CPU).
    runs_dir: where run logs go (`<workspace>/.astra/runs`); None: no log.
    resume: a run id under runs_dir to continue (its rounds, best and evaluations are reused).
    candidates: candidates proposed and evaluated at once per round (1: one at a time).
    run_id: the new run's id (default: made from the time and the kernel).
    memory: where this kernel's tuning is remembered for the run's GPU model (None: nothing is
    recalled or kept).
    headers: the texts of the project headers the file includes (their helpers: element packs,
    load/store and ceil-division helpers a rewrite may use).
    """
    return _Run(text, path, kernel, evaluate, rounds=rounds, llm=llm, spec=spec, gpu=gpu, runs_dir=runs_dir,
                limits=limits, cancel=cancel, progress=progress, resume=resume, repairs=repairs,
                candidates=candidates, run_id=run_id, memory=memory, headers=headers).run()


class _Run:
    """One optimization run: its log, its result and the situation it plans from; `run` is the loop."""

    def __init__(self, text: str | Candidate, path: str, kernel: str,
                 evaluate: Callable[[str], Evaluation] | OnCandidates, *,
                 rounds: int, llm: LLMConfig | None, spec: Spec | None, gpu: str, runs_dir: str | Path | None,
                 limits: Limits,
                 cancel: threading.Event | None, progress: Progress | None, resume: str | None, repairs: int,
                 candidates: int, run_id: str | None, memory: Memory | None = None,
                 headers: tuple[str, ...] = ()) -> None:
        self.t0 = time.monotonic()
        deadline = self.t0 + limits.max_seconds if limits.max_seconds is not None else None
        # fails fast (e.g. no API key for OpenAI); the run's budgets bound every call
        self.client = LLMClient(llm, token_budget=limits.max_tokens, deadline=deadline) if llm is not None else None
        self.read = text if isinstance(text, Candidate) else None   # the original, read once (`original`)
        self.text = text.text if isinstance(text, Candidate) else text
        self.path, self.kernel = path, kernel
        self.evaluate: Callable[[str | Candidate], Evaluation] = (
            (lambda v: evaluate(v if isinstance(v, Candidate) else Candidate.of(v, kernel)))
            if isinstance(evaluate, OnCandidates) else
            (lambda v: evaluate(v.text if isinstance(v, Candidate) else v)))
        # a rerun's remembered rewrite with the original checked in the same gate (`_recalled_original`)
        self.with_original: Callable[[Candidate], Evaluation] | None = (
            evaluate.with_original if isinstance(evaluate, OnCandidates) else None)
        # the whole file's verdict for what is adopted (agents.final_gate); None: nothing the fast path judged is adopted
        self.final = evaluate.final if isinstance(evaluate, OnCandidates) else None
        self.headers = headers
        self.rounds, self.llm, self.spec, self.gpu, self.limits = rounds, llm, spec, gpu, limits
        self.cancel = cancel or threading.Event()
        self.progress, self.resume, self.repairs = progress, resume, repairs
        self.candidates = max(1, int(candidates))
        self.run_id = resume or run_id or new_run_id(kernel)
        self.log = RunLog(Path(runs_dir) / self.run_id) if runs_dir is not None else None
        self.ev = CachedEvaluate(self._measured)
        self.mode = "llm" if llm is not None else "offline"
        self.history: list[Round] = []
        self.s: Situation | None = None
        self.memory = memory
        self.polished = False   # the best is already in its readable form, gated and timed (a recall)

    # ---- plumbing ----------------------------------------------------------------------------
    def original(self) -> Candidate:
        """The original version read once (a resumed run's original is its log's)."""
        if self.read is None or self.read.text != self.text:
            self.read = Candidate.of(self.text, self.kernel)
        return self.read

    def _measured(self, version: str | Candidate) -> Evaluation:
        e = self.evaluate(version)
        if self.log is not None:   # kept at once: an interrupted round loses nothing
            self.log.measured(source_hash(version.text if isinstance(version, Candidate) else version), e)
        return e

    def tell(self, round_: int, step: Step, best: float | None, message: str) -> None:
        if self.progress is not None:
            try:
                self.progress(ProgressEvent(step, message, round_, best))
            except Exception:
                pass  # a broken progress display must not stop the run

    def _open(self) -> None:
        """Start the run log, or read a resumed run's back (its original, rounds and evaluations)."""
        log = self.log
        if self.resume and log is not None:
            original = log.read_original() or self.text
            self.history = log.rounds()
            self.t0 -= sum(r.seconds for r in self.history)  # the run's time includes its earlier sessions
            prior = log.read_baseline()
            if prior is not None:
                self.ev.seed(original, prior)
            for r in self.history:
                if r.candidate is not None and r.evaluation is not None:
                    self.ev.seed(r.candidate, r.evaluation)
            for key, e in log.read_measured().items():
                self.ev.seed_hash(key, e)
            self.text = original
        elif log is not None:
            log.start({"kernel": self.kernel, "path": str(self.path), "mode": self.mode, "rounds": self.rounds,
                       "llm": self.llm.to_json() if self.llm else None, "limits": asdict(self.limits),
                       "started": time.time(), "status": "running"}, self.text)
        self.result = OptimizeResult(self.kernel, str(self.path), self.mode, self.text, self.text, baseline=None,  # type: ignore[arg-type]
                                     best_eval=None, run_dir=str(log.dir) if log else None,  # type: ignore[arg-type]
                                     run_id=self.run_id if log else None)

    def finish(self, stopped: str, status: str = "done") -> OptimizeResult:
        result = self.result
        if status == "done" and result.improved and not self.cancel.is_set() and not self.polished:
            self._polish()
        result.stopped = stopped
        result.seconds = time.monotonic() - self.t0
        result.cancelled = self.cancel.is_set()
        if self.log is not None:
            self.log.best(result.best)
            self.log.update_meta(status=status, stopped=stopped, improved=result.improved, speedup=result.speedup,
                                 seconds=round(result.seconds, 2), usage=result.usage.to_json())
            result.unsaved += [f"{self.log.unsaved} (the run log is incomplete)"] if self.log.unsaved else []
        self.tell(len(result.rounds), "done", result.speedup, stopped)
        return result

    def _polish(self) -> None:
        """The best in its readable form (`offline/style.py`), gated and timed again before it is offered."""
        r = self.result
        text = style.readable(r.best, r.original, str(self.path))
        if text is not None:
            self.tell(len(r.rounds), "polish", r.speedup, "checking the readable form of the best version")
            with contextlib.suppress(InfrastructureError):
                e = final_gate.confirmed(self.final, text, self.kernel, self.ev(text))   # what is offered: the whole file's
                if e.passed and e.measured == r.best_eval.measured and not self._polish_slower(e):
                    r.best, r.best_eval = text, e

    def _polish_slower(self, e: Evaluation) -> str:
        """Why the readable form is not offered in place of the best: it measured slower than the
        best at the bench sizes, or slower at a size of the ladder than the original or the best
        (the same rule as adoption; '' when neither)."""
        best, tol = self.result.best_eval, self.limits.size_tolerance
        if not (e.measured and best.measured):
            return ""
        mine, theirs = e.speedup or 0.0, best.speedup or 0.0
        if mine < theirs * (1.0 - tol):
            return f"{mine:.3f}× vs the best's {theirs:.3f}× at the bench sizes"
        return slower_at_a_size(e, best if best is not self.result.baseline else None, tol)

    def interrupted(self, e: InfrastructureError) -> OptimizeResult:
        self.result.error, self.result.interrupted = e.message, True
        return self.finish(f"{e.message}; resume with --resume {self.run_id}", status="interrupted")

    def _settled(self, r: Round) -> bool:
        """The final verdict of an adopted round: the whole file's (agents.final_gate)."""
        # judged again on the whole file's timing, a dispatched round still says it is one
        kept = r.reason[:r.reason.find("): ") + 3] if r.reason.startswith(dispatch.DISPATCHED) else ""
        ok = final_gate.settle(r, self.final, self.kernel, lambda rr, e: self._judge(rr, Attempt(rr.candidate, e)))
        if ok and kept and not r.reason.startswith(kept):
            r.reason = kept + r.reason
        return ok

    def _judge(self, r: Round, att: Attempt) -> None:
        """`r` judged against the best so far (`verdicts.judge`)."""
        assert self.s is not None
        judge(r, att, self.s, self.limits, self.cancel)

    def _dispatched(self, r: Round) -> bool:
        """A round the search adopted whose whole file's timing found it slower at a size (the fast
        path's build and the file's can differ by a few percent at µs sizes): both versions
        selected by size, as a round judged so at once gets, settled in turn."""
        s = self.s
        assert s is not None
        if r.outcome != "slower at a size" or self.cancel.is_set():
            return False
        dispatch.attempt(r, s.best, s.best_eval, self.kernel, self.ev, self._judge, self.cancel)
        return r.adopted and self._settled(r)

    def _adopt(self, candidate: str, evaluation: Evaluation, read: Candidate | None = None) -> None:
        """`candidate` becomes the best; `read`: that text read already (made where it was rewritten)."""
        s = self.s
        assert s is not None
        c = read if read is not None and read.text == candidate else Candidate.of(candidate, self.kernel)
        s.adopt(c, evaluation)
        s.context = context_from_spec(self.kernel, c.spec or self.spec, self.headers)  # the launch may have changed
        self.result.best, self.result.best_eval = s.best, s.best_eval

    # ---- the run -----------------------------------------------------------------------------
    def run(self) -> OptimizeResult:
        self._open()
        result = self.result
        self.tell(0, "baseline", None, f"resuming run {self.run_id}" if self.history else
                  f"checking and timing the original {self.kernel}")
        entry = None
        if self.memory is not None and self.memory.gpu and not self.history and self.mode == "offline":
            entry, result.memory_note = self.memory.recall()
        try:
            # A rerun: the original is gated and timed in the evaluation of its remembered rewrite
            # (one suite, one timing side by side), not once alone and again as the reference.
            base = self._recalled_original(entry) if entry is not None and entry.chain else None
            base = base or self.ev(self.original())
            # the original's verdict is the whole file's too (agents.final_gate)
            base = final_gate.confirmed(self.final, self.text, self.kernel, base, self.original())
        except InfrastructureError as e:
            result.baseline = result.best_eval = Evaluation(Check(False, e.message, e.message, 0, "infrastructure"))
            return self.interrupted(e)
        result.baseline = result.best_eval = base
        if self.log is not None:
            self.log.baseline(base)
        if not base.passed and self.cancel.is_set():
            result.error = "cancelled before the original was measured"
            return self.finish("cancelled")
        if not base.passed:
            result.error = f"the original kernel does not pass the gate: {base.check.summary}"
            return self.finish("the original kernel does not pass the gate")

        planner = LLMPlanner(self.client) if self.client else OfflinePlanner()
        coder = LLMCoder(self.client, repairs=self.repairs) if self.client else OfflineCoder()
        self.s = Situation(self.kernel, str(self.path), self.text, self.text, base, base,
                           context_from_spec(self.kernel, self.spec, self.headers), describe_sizes(self.spec), self.gpu,
                           self.history, self.original())
        # Replay a resumed run's rounds: the best adopted candidate becomes the base again.
        for r in self.history:
            result.rounds.append(r)
            result.usage.add(r.usage)
            if r.adopted and r.candidate is not None and r.evaluation is not None:
                self._adopt(r.candidate, r.evaluation)

        if entry is not None:
            recalled = self._recall(base, entry)
            if recalled:
                return self.finish(recalled)

        stale = 0
        for b in sorted({r.batch for r in self.history}, reverse=True):  # patience carries over a resume
            if any(r.adopted for r in self.history if r.batch == b):
                break
            stale += 1
        start_round = max((r.batch for r in self.history), default=0) + 1
        for i in range(start_round, self.rounds + 1):
            if self.cancel.is_set():
                return self.finish("cancelled; the best verified version so far is kept")
            over = over_limits(self.limits, self.t0, result.usage)
            if over:
                return self.finish(over)
            outcome = self._round(i, planner, coder)
            if isinstance(outcome, OptimizeResult):
                return outcome
            stale = 0 if outcome else stale + 1
            if self.cancel.is_set():
                return self.finish("cancelled; the best verified version so far is kept")
            # Offline ideas are few and cheap, so each is tried; an LLM can go on forever: patience.
            if self.mode == "llm" and stale >= self.limits.patience:
                return self.finish(f"{stale} rounds in a row brought no improvement")
        if self.mode == "offline" and any(r.adopted for r in result.rounds):
            result.tuning_note = "no tuning yet: the rounds ran out before the ideas did (resume with more rounds)"
        return self.finish(f"all {self.rounds} rounds done")

    def _round(self, i: int, planner: OfflinePlanner | LLMPlanner, coder: OfflineCoder | LLMCoder
               ) -> OptimizeResult | bool:
        """Round i: plan, code, judge, keep the best of its candidates. The run's end where the
        round ends it, else whether a candidate was adopted."""
        s, result, client = self.s, self.result, self.client
        assert s is not None
        best_sp = s.best_eval.speedup
        self.tell(i, "plan", best_sp, f"round {i}: planning")
        round_t0 = time.monotonic()
        if client is not None:
            client.transcript.clear()
        plans, usage = _plans(planner, s, self.candidates)
        if not plans:
            if usage.calls:
                result.usage.add(usage)
            result.passed_over = list((planner if isinstance(planner, OfflinePlanner) else planner.fallback).passed_over)
            return self.finish(self._tune("nothing left to try") if self.mode == "offline" else
                               "the planner had no idea to offer")
        self.tell(i, "code", best_sp, f"round {i}: " + "; ".join(p.title for p in plans))
        try:
            if len(plans) == 1:
                attempts = [coder.code(plans[0], s, self.ev, self.cancel)]
            else:  # evaluated at once: the executor spreads them over its slots
                contexts = [contextvars.copy_context() for _ in plans]   # the caller's (`parse_time.apart_first`)
                with ThreadPoolExecutor(len(plans), thread_name_prefix="astra-candidate") as pool:
                    attempts = list(pool.map(lambda p, c: c.run(coder.code, p, s, self.ev, self.cancel), plans,
                                             contexts))
        except InfrastructureError as e:
            return self.interrupted(e)
        batch = []
        next_index = max((r.index for r in result.rounds), default=0) + 1
        for j, (plan, att) in enumerate(zip(plans, attempts)):
            r = Round(next_index + j, plan, s.best_hash, usage=usage if j == 0 else Usage(), batch=i)
            r.take(att)
            self._judge(r, att)
            if r.outcome == "slower at a size":   # both versions, each at the sizes where it is faster
                dispatch.attempt(r, s.best, s.best_eval, self.kernel, self.ev,
                                 self._judge, self.cancel)
            r.seconds = time.monotonic() - round_t0
            batch.append(r)
        pairs = enabling.follow_ups(batch, s, coder, self.ev, self._judge,
                                    self.cancel) if isinstance(coder, OfflineCoder) else []   # a step and what it enables
        batch += [f for _, f in pairs]
        final_gate.keep_best_of(batch)
        if client is not None and batch:
            batch[0].transcript = list(client.transcript)
        winner = next((r for r in batch if r.adopted), None)
        if winner is not None and not self._settled(winner) and not self._dispatched(winner):
            winner = None   # the final gate refused it
        enabling.adopt_steps(pairs, winner)
        for r in batch:
            self.history.append(r)
            result.rounds.append(r)
            result.usage.add(r.usage)
        if winner is not None:
            self._adopt(winner.candidate, winner.evaluation, winner.read)  # type: ignore[arg-type]
        for r in batch:   # the best keeps its read; the history keeps texts (a read's tree is many times its text)
            r.read = None
            if r.plan is not None:
                r.plan.rewrite = None
        if self.log is not None:
            for r in batch:
                self.log.round(r)
            self.log.best(s.best)
        for r in batch:
            if r.outcome:   # every round of a batch is judged by now
                self.tell(i, r.outcome, s.best_eval.speedup, f"round {i}: {r.plan.title if r.plan else ''}: "
                          f"{r.outcome}" + (f" ({r.reason})" if r.reason else ""))
        return winner is not None

    def _tune(self, stopped: str) -> str:
        """The tuning stage, once the offline team has no idea left (its chain can be replayed)."""
        s, result, limits = self.s, self.result, self.limits
        assert s is not None
        chain = [(r.index, r.plan.idea, r.plan.params) for r in result.rounds if r.adopted and r.plan is not None]
        if not chain:
            self._keep([])   # nothing beat the original: remembered too, so a rerun does not search again
        if not chain or limits.tune_points <= 0 or self.cancel.is_set() or over_limits(limits, self.t0, result.usage):
            if chain and limits.tune_points <= 0:
                self._keep([(i, p) for _, i, p in chain])
            return stopped
        if not s.best_eval.measured:
            result.tuning_note = "no tuning: it compares timings, and speed is not measured here"
            return stopped
        if any(r.plan is None or r.plan.source != "offline" for r in result.rounds if r.adopted) or \
                tuning.replay(self.original(), self.kernel, [(i, p) for _, i, p in chain], self.spec, self.headers) != s.best:
            result.tuning_note = "no tuning: the adopted rewrites cannot be replayed with other parameters"
            return stopped
        deadline = self.t0 + limits.max_seconds if limits.max_seconds is not None else None
        try:
            best, best_eval, points, steps = tuning.tune(
                self.original(), self.kernel, chain, self.ev, s.best, s.best_eval, spec=self.spec, points=limits.tune_points,
                min_gain=limits.min_gain, size_tolerance=limits.size_tolerance, deadline=deadline, cancel=self.cancel,
                parallel=self.candidates, headers=self.headers,
                tell=lambda m: self.tell(len(result.rounds), "tune", s.best_eval.speedup, m))
        except InfrastructureError as e:   # the evaluations broke down: keep what the rounds found
            result.tuning_note = f"tuning stopped: {e.message}"
            return stopped
        result.tuning = points
        final = final_gate.confirmed(self.final, best, self.kernel, best_eval) if best != s.best else best_eval
        if best != s.best and not final.passed:
            result.tuning_note = f"the tuning's best was not adopted: {final.check.summary}"
        elif best != s.best:
            self._adopt(best, final)
        if self.log is not None:
            self.log.tuning(points)
            self.log.best(s.best)
        kept = sum(p.outcome == "adopted" for p in points)
        if not self.cancel.is_set() and not over_limits(limits, self.t0, result.usage):
            self._keep([(i, p) for _, i, p in steps])   # a search cut short is not remembered
        return f"{stopped}; tuning tried {len(points)} point(s), kept {kept}"

    # ---- remembered tuning (.astra/tuning/) --------------------------------------------------
    def _replayed(self, entry: Remembered) -> list[str]:
        """The remembered chain replayed on the file as it is: its readable form first (what the
        search that found it offered), then the chain's own text; [] where it no longer applies."""
        try:
            text = tuning.replay(self.original(), self.kernel, entry.chain, self.spec, self.headers)
        except Exception:   # noqa: BLE001 - a stored parameter a transformation cannot take
            text = None
        if text is None or text == self.text:
            return []
        readable = style.readable(text, self.text, str(self.path))
        return list(dict.fromkeys(t for t in (readable, text) if t is not None))

    def _recalled_original(self, entry: Remembered) -> Evaluation | None:
        """A rerun's original, gated in the same gate as its remembered rewrite (each case's inputs
        drawn once, the original run once: the rewrite's reference, judged as the original's own
        gate judges it, then the original's own checks) and timed beside it: its evaluation, with
        the times taken there. None (the original is then evaluated alone, as a search does) where
        the evaluate offers no such path, the chain no longer applies, or either version failed.
        The rewrite's evaluation is kept for `_recall`, which judges it."""
        if self.with_original is None:
            return None
        for text in self._replayed(entry):
            try:
                e = self.with_original(Candidate.of(text, self.kernel))
            except InfrastructureError:
                raise
            except Exception:   # noqa: BLE001 - an evaluator bug: the usual path says what is wrong
                return None
            if self.log is not None:
                self.log.measured(source_hash(text), e)
            self.ev.seed(text, e)   # `_recall` judges it (a failure too: the rewrite is not evaluated again)
            if e.passed and e.measured and e.reference is not None:
                return Evaluation(e.check, e.reference, node=e.node, gpu=e.gpu)
        return None

    def _recall(self, base: Evaluation, entry: Remembered) -> str:
        """Start from what a finished search on this GPU model found: replay its chain on the
        file as it is, gate and time it like any candidate, beside the original (where the two
        were gated together, `_recalled_original`, that evaluation is judged here). The run's end
        when it still holds, else '' (the search runs, with a note saying why the memory was not used)."""
        memory, result = self.memory, self.result
        assert memory is not None
        if not base.measured:
            return ""
        what = f"the tuning remembered for {entry.describe()}"
        if not entry.chain:
            result.memory_note = f"{what}: nothing searched again"
            return "remembered: no rewrite beat the original on this GPU model"
        texts = self._replayed(entry)
        if not texts:
            result.memory_note = f"{what} no longer applies to the file: searching afresh"
            return ""
        self.tell(1, "remembered", None, f"replaying {what}")
        t0 = time.monotonic()
        # The chain's readable form is what the search that found it offered: gated and timed once
        # here, in place of the chain and then its readable form (a rerun's fixed cost, issue 29);
        # where the original was gated with it (`_recalled_original`), its evaluation is cached.
        try:
            text, e = texts[-1], None
            for t in texts:
                e = self.ev(t)
                if e.passed and e.measured:
                    text = t
                    break
            assert e is not None
        except InfrastructureError as err:
            result.memory_note = f"{what} could not be evaluated ({err.message}): searching afresh"
            return ""
        polished = len(texts) == 2 and text == texts[0]
        plan = Plan("remembered", f"the rewrites remembered for {memory.gpu}",
                    "; ".join(f"{idea}({tuning.show(p)})" for idea, p in entry.chain), source="memory",
                    params={"chain": [[idea, p] for idea, p in entry.chain]})
        r = Round(1, plan, source_hash(self.text), text, source_hash(text), e, batch=1,
                  changes=[f"{idea}: {tuning.show(p)}" for idea, p in entry.chain])
        self._judge(r, Attempt(text, e))
        if r.adopted and self._settled(r) and r.evaluation is not None:
            e = r.evaluation   # the whole file's
        r.seconds = time.monotonic() - t0
        if not r.adopted:
            r.reason = f"{r.reason} (remembered from run {entry.run_id})"
            result.memory_note = f"{what} did not hold again ({r.outcome}): searching afresh"
            self._record(r)
            return ""
        self._record(r)
        self._adopt(text, e)
        self.polished = polished
        result.memory_note = f"started from {what}; verified and timed again: {e.speedup:.3f}×"
        return "remembered tuning verified again on this GPU model; nothing searched again (--fresh searches)"

    def _record(self, r: Round) -> None:
        self.history.append(r)
        self.result.rounds.append(r)
        if self.log is not None:
            self.log.round(r)

    def _keep(self, chain: list[tuple[str, dict[str, Any]]]) -> None:
        """Remember a finished offline search for this GPU model (measured runs only)."""
        s, memory = self.s, self.memory
        if memory is None or not memory.gpu or s is None or not s.best_eval.measured or self.cancel.is_set():
            return
        try:
            memory.keep(chain, s.best_eval.speedup or 1.0, self.run_id)
        except Exception as e:  # noqa: BLE001 - remembering is a convenience; the run's result stands
            self.result.memory_note = f"the tuning could not be remembered: {e}"


def _plans(planner: OfflinePlanner | LLMPlanner, s: Situation, k: int) -> tuple[list[Plan], Usage]:
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
