"""What a long run says while it runs: one frozen `ProgressEvent` per step of a check or an optimize
run, given to the caller's `progress` callback (the CLI prints it, the language server shows it in
the editor's progress and status, a batch in its table). Pure data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

# What an optimize round came to (`agents.records.Round.outcome`, the run log's and the report's words).
RoundOutcome = Literal["adopted", "failed", "not faster", "slower at a size", "not compared", "no candidate",
                       "cancelled"]
# The step an event reports: a check's one step; an optimize run's baseline (or the replay of a
# remembered tuning), each round's planning, coding and outcome, the tuning stage, the readable
# form of the best checked again, the end.
Step = Literal["check", "baseline", "remembered", "plan", "code", RoundOutcome, "tune", "polish", "done"]


@dataclass(frozen=True)
class ProgressEvent:
    step: Step
    message: str                       # one line for a person
    round: int | None = None           # the optimize run's round (0: the baseline)
    best_speedup: float | None = None  # the best verified speedup so far, where measured
    kernel: str = ""                   # the kernel checked


Progress = Callable[[ProgressEvent], None]
