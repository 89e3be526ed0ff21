"""What a long run says while it runs: one frozen `ProgressEvent` per step of a check or an optimize
run, given to the caller's `progress` callback (the CLI prints it, the language server shows it in
the editor's progress and status, a batch in its table). Pure data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ProgressEvent:
    step: str                          # 'check'; an optimize run's 'baseline', 'plan', 'code', a round's outcome,
                                       # 'tune', 'polish', 'remembered', 'done'
    message: str                       # one line for a person
    round: int | None = None           # the optimize run's round (0: the baseline)
    best_speedup: float | None = None  # the best verified speedup so far, where measured
    kernel: str = ""                   # the kernel checked


Progress = Callable[[ProgressEvent], None]
