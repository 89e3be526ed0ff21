"""The outcome of `optimize`: the best verified kernel, how it differs from the original, what
worked and what did not, and how fast it is per size (where speed was measured)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ..model import textedit
from ..model.ladder import describe
from ..plain import md
from ..evaluation import NOT_MEASURED, Evaluation
from .records import Round, Usage


@dataclass
class OptimizeResult:
    kernel: str
    path: str
    mode: str                       # 'offline' | 'llm'
    original: str                   # file text
    best: str                       # best verified file text (== original when nothing helped)
    baseline: Evaluation
    best_eval: Evaluation
    rounds: list[Round] = field(default_factory=list)
    stopped: str = ""               # why the loop ended
    run_dir: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)
    cancelled: bool = False
    error: str | None = None        # the run could not start (e.g. the original fails the gate)
    report_path: str | None = None  # the HTML report, when one was written
    interrupted: bool = False       # the evaluating machine was lost: resume the run to go on
    tuning: list = field(default_factory=list)   # tuning.TunePoint: the parameter points tried after the rounds
    tuning_note: str = ""                         # why there was no tuning, when there was none
    passed_over: list[str] = field(default_factory=list)  # when no idea was left: each idea and why it did not fit
    memory_note: str = ""                         # what the tuning remembered in .astra/tuning/ did (or why not)
    unsaved: list[str] = field(default_factory=list)  # writes a full disk refused (run log, report, the file)

    # ---- what changed -----------------------------------------------------------------------
    @property
    def improved(self) -> bool:
        return self.best != self.original

    @property
    def measured(self) -> bool:
        return self.best_eval.measured

    @property
    def speedup(self) -> float | None:
        return self.best_eval.speedup if self.measured else None

    @property
    def best_kernel_source(self) -> str:
        """The best kernel's text: what replaces the original kernel's span."""
        from .coder import kernel_text
        return kernel_text(self.best, self.kernel)

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.original.splitlines(keepends=True),
                                            self.best.splitlines(keepends=True),
                                            fromfile=f"a/{self.path}", tofile=f"b/{self.path}"))

    def text_edit(self) -> dict | None:
        """The smallest single edit that turns the original file into the best one (it covers the
        kernel and any helper a transformation rewrote): 0-based line/character positions in the
        original, as an LSP TextEdit wants them. None when nothing changed."""
        a, b = self.original, self.best
        if a == b:
            return None
        prefix, suffix = textedit.common_affixes(a, b)
        end_a, end_b = len(a) - suffix, len(b) - suffix
        # Whole lines read better in an editor and in a diff.
        start = textedit.line_start(a, prefix)
        while end_a < len(a) and a[end_a - 1:end_a] != "\n":
            end_a += 1
            end_b += 1
        return {"range": {"start": list(textedit.position(a, start)), "end": list(textedit.position(a, end_a))},
                "new_text": b[start:end_b]}

    def worked(self) -> list[Round]:
        return [r for r in self.rounds if r.adopted]

    def failed(self) -> list[Round]:
        return [r for r in self.rounds if not r.adopted and r.plan is not None]

    def per_size(self) -> list[dict]:
        if not self.measured:
            return []
        return [{"sizes": t.sizes, "role": t.role, "baseline_us": t.baseline_us, "best_us": t.candidate_us,
                 "speedup": t.speedup, "copy_share": t.copy_share,
                 "verified_cases": self.best_eval.check.cases} for t in self.best_eval.profile.sizes]

    @property
    def speed_note(self) -> str:
        return "" if self.measured else (self.best_eval.speed_note or NOT_MEASURED)

    # ---- output -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"kernel": self.kernel, "path": self.path, "mode": self.mode, "improved": self.improved,
                "measured": self.measured, "speedup": self.speedup, "speed_note": self.speed_note,
                "per_size": self.per_size(), "stopped": self.stopped, "cancelled": self.cancelled,
                "error": self.error, "run_dir": self.run_dir, "run_id": self.run_id,
                "seconds": round(self.seconds, 2), "usage": self.usage.to_json(), "interrupted": self.interrupted,
                "baseline": self.baseline.to_json(), "best": self.best_eval.to_json(),
                "rounds": [r.to_json() for r in self.rounds], "best_kernel_source": self.best_kernel_source,
                "tuning": [p.to_json() for p in self.tuning], "tuning_note": self.tuning_note,
                "passed_over": self.passed_over,
                "memory_note": self.memory_note, "unsaved": self.unsaved,
                "text_edit": self.text_edit(),
                "diff": self.diff}

    def summary_markdown(self) -> str:
        lines = [f"## Astra optimize: `{self.kernel}` ({self.mode})", ""]
        if self.error:
            return "\n".join(lines + [f"**Could not optimize:** {md(self.error)}"])
        if self.measured:
            gpu = (self.best_eval.profile.device if self.best_eval.profile else "") or self.best_eval.gpu or "the GPU"
            ladder = any(t["role"] not in ("", "bench") for t in self.per_size())
            lines.append(f"**Best: {self.speedup:.3f}× geomean** over the original"
                         f"{' at the bench sizes' if ladder else ''}, measured on {md(gpu)}; "
                         f"matches the original on {self.best_eval.check.cases} cases."
                         + (" Every size of the ladder below was timed beside the original." if ladder else ""))
            lines += ["", "| sizes | original µs | best µs | speedup | copy ceiling |", "|---|---:|---:|---:|---:|"]
            for t in self.per_size():
                share = f"{t['copy_share']:.0%}" if t["copy_share"] is not None else "–"
                size = describe(t["sizes"], t["role"])
                lines.append(f"| {md(size)} | {t['baseline_us']:.2f} | {t['best_us']:.2f} | {t['speedup']:.3f}× | {share} |")
        elif self.improved:
            lines.append(f"**A rewrite verified correct on {self.best_eval.check.cases} cases, speed unknown — "
                         f"measure on a GPU** ({md(self.speed_note)}).")
        else:
            lines.append(f"No verified improvement; the original is kept. {md(self.speed_note)}".strip())
        if self.worked():
            lines += ["", "### What changed and why"]
            for r in self.worked():
                lines.append(f"- round {r.index}: **{md(r.plan.title)}** — {md('; '.join(r.changes) or r.plan.details[:200])}"
                             f"{' — ' + md(r.plan.expected) if r.plan.expected else ''}"
                             f"{' (chosen: ' + md(r.plan.why) + ')' if r.plan.why else ''}")
        if self.tuning:
            lines += ["", "### Tuning (the adopted rewrites' parameters, each point verified and timed)",
                      "| round | idea | parameters | outcome | speedup |", "|---:|---|---|---|---:|"]
            for p in self.tuning:
                params = ", ".join(f"{k}={v}" for k, v in p.params.items() if k != "elements")
                sp = f"{p.speedup:.3f}×" if p.speedup else "–"
                lines.append(f"| {p.step} | {md(p.idea)} | {md(params)} | {md(p.outcome)}: {md(p.reason)} | {sp} |")
        elif self.tuning_note:
            lines += ["", f"_{md(self.tuning_note)}._"]
        if self.memory_note:
            lines += ["", f"_Remembered tuning: {md(self.memory_note)}._"]
        if self.failed():
            lines += ["", "### Tried and not kept"]
            for r in self.failed():
                lines.append(f"- round {r.index}: {md(r.plan.title)} — {md(r.outcome)}: {md(r.reason)}")
        for u in self.unsaved:
            lines += ["", f"**Not saved:** {md(u)}"]
        lines += ["", f"Stopped: {md(self.stopped)}. {len(self.rounds)} round(s), {self.seconds:.1f} s"
                  + (f", {self.usage.calls} LLM calls, {self.usage.tokens} tokens" if self.usage.calls else "")
                  + (f". Run log: {md(self.run_dir)}" if self.run_dir else "") + "."]
        return "\n".join(lines)
