"""Plain records of a run: plans, coding attempts, rounds and LLM usage (all JSON-serialisable)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ..evaluation import Evaluation, source_hash
from ..model.candidate import Candidate
from ..progress import RoundOutcome
from .offline.base import Rewrite

if TYPE_CHECKING:
    from .coder import Attempt


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0   # as the endpoint reports them: budgets are in tokens, never in guessed dollars

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: "Usage") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tokens": self.tokens}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Usage":
        return cls(d.get("calls", 0), d.get("prompt_tokens", 0), d.get("completion_tokens", 0))


@dataclass
class Plan:
    idea: str            # offline: the transform's name; LLM: 'llm'
    title: str           # one line
    details: str         # the plan as given to the coding agent
    expected: str = ""   # expected effect
    source: str = "offline"   # 'offline' | 'llm' | 'offline-fallback' | 'memory' (a remembered chain, replayed)
    params: dict[str, Any] = field(default_factory=dict)     # offline: the transform's parameters (tuning replays them)
    why: str = ""                                   # why this idea, now (from the profile)
    skipped: list[str] = field(default_factory=list)   # ideas passed over, each with its reason
    # offline: the rewrite the planner made of the version it planned from (that version's hash):
    # the coder takes it as it is instead of making it again. Not logged; dropped once the round ends.
    rewrite: Rewrite | None = field(default=None, compare=False, repr=False)
    rewrite_base: str = field(default="", compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        d = asdict(replace(self, rewrite=None))
        del d["rewrite"], d["rewrite_base"]
        return d


@dataclass
class Round:
    index: int                         # 1-based
    plan: Plan | None
    base_hash: str                     # the best candidate this round started from
    candidate: str | None = None       # whole file text
    candidate_hash: str | None = None
    evaluation: Evaluation | None = None
    outcome: RoundOutcome | Literal[""] = ""   # '' until the round is judged
    reason: str = ""                   # human explanation of the outcome
    changes: list[str] = field(default_factory=list)   # what the rewrite changed
    attempts: int = 0                  # coding attempts (1 + repairs)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    transcript: list[dict[str, Any]] = field(default_factory=list)   # LLM exchanges of this round
    batch: int = 0                     # the round it belongs to (several candidates per round); 0: `index`
    # `candidate` read once, until the round is judged and its winner adopted (not logged, not kept)
    read: Candidate | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.batch:
            self.batch = self.index

    @property
    def adopted(self) -> bool:
        return self.outcome == "adopted"

    def take(self, att: Attempt) -> None:
        """The coder's attempt as this round's candidate, to be judged next."""
        self.usage.add(att.usage)
        self.candidate, self.evaluation, self.changes, self.attempts, self.read = (
            att.candidate, att.evaluation, att.changes, att.attempts, att.read)
        self.candidate_hash = source_hash(att.candidate) if att.candidate is not None else None

    def to_json(self, with_code: bool = False) -> dict[str, Any]:
        d = {"index": self.index, "plan": self.plan.to_json() if self.plan else None, "base_hash": self.base_hash,
             "candidate_hash": self.candidate_hash,
             "evaluation": self.evaluation.to_json() if self.evaluation else None, "outcome": self.outcome,
             "reason": self.reason, "changes": self.changes, "attempts": self.attempts,
             "usage": self.usage.to_json(), "seconds": round(self.seconds, 3), "batch": self.batch}
        if with_code:
            d["candidate"] = self.candidate
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Round":
        return cls(d["index"], Plan(**d["plan"]) if d.get("plan") else None, d["base_hash"], d.get("candidate"),
                   d.get("candidate_hash"), Evaluation.from_json(d["evaluation"]) if d.get("evaluation") else None,
                   d.get("outcome", ""), d.get("reason", ""), list(d.get("changes", [])), d.get("attempts", 0),
                   Usage.from_json(d.get("usage", {})), d.get("seconds", 0.0), batch=d.get("batch", 0))
