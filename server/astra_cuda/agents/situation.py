"""What the planning and coding agents are told about the run so far."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..evaluation import Evaluation, source_hash
from ..model.candidate import Candidate
from ..model.spec import Spec
from .offline import Context
from .records import Round


@dataclass
class Situation:
    kernel: str
    path: str
    original: str              # the original file text
    best: str                  # the best verified file text so far
    best_eval: Evaluation
    baseline_eval: Evaluation
    context: Context           # spec-derived hints
    sizes: str = ""            # human description of the spec's test and bench sizes
    gpu: str = ""              # GPU facts, or '' on the CPU
    history: list[Round] = field(default_factory=list)
    _read: Candidate | None = field(default=None, repr=False, compare=False)   # `best`, read once

    @property
    def base(self) -> Candidate:
        """The best version read once: what the planner's and the coder's rewrites start from."""
        if self._read is None or (self._read.text is not self.best and self._read.text != self.best):
            self._read = Candidate.of(self.best, self.kernel)
        return self._read

    def adopt(self, best: Candidate, evaluation: Evaluation) -> None:
        self.best, self.best_eval, self._read = best.text, evaluation, best

    @property
    def rival(self) -> Evaluation | None:
        """The best rewrite's evaluation, None while the best is the original (see `slower_at_a_size`)."""
        return None if self.best_eval is self.baseline_eval else self.best_eval

    @property
    def best_hash(self) -> str:
        return source_hash(self.best)

    def tried(self, idea: str, base_hash: str | None = None) -> bool:
        base_hash = base_hash or self.best_hash
        return any(r.plan is not None and r.plan.idea == idea and r.base_hash == base_hash for r in self.history)


def describe_sizes(spec: Spec | None) -> str:
    if spec is None:
        return ""
    try:
        lines = [f"test sizes: {', '.join(f'{k} in {v}' for k, v in spec.sizes.items())}"]
        if spec.bench:
            lines.append(f"timed (bench) sizes: {', '.join(f'{k} in {v}' for k, v in spec.bench.items())}")
        lines.append(f"launch: grid = {list(spec.grid)}, block = {list(spec.block)}")
        if spec.require:
            lines.append(f"requires: {', '.join(spec.require)}")
        lines.append("arguments: " + "; ".join(
            f"{a.name}: {a.dtype.name}{' [' + ', '.join(a.shape) + ']' if a.pointer else ' = ' + str(a.value)}"
            f"{' (output)' if a.output else ' (in/out)' if a.inout else ''}" for a in spec.args.values()))
        return "\n".join(lines)
    except Exception:
        return ""
