"""The agent team: planning and coding agents (offline transformations or any OpenAI-compatible
model), the orchestrator that keeps the best verified candidate, the run log and the report.

Entry point: `optimize(text, path, kernel, evaluate, ...)`; evaluation is injected
(`evaluate(file_text) -> Evaluation`), built by astra_cuda.api from the gate and the profiler.
"""
from ..evaluation import NOT_MEASURED, CachedEvaluate, Check, Evaluate, Evaluation, ProfileSummary, SizeTiming, source_hash
from .llm import LLMConfig
from .orchestrator import optimize
from .verdicts import Limits
from .records import Plan, Round, Usage
from .result import OptimizeResult

__all__ = ["optimize", "Limits", "LLMConfig", "OptimizeResult", "Evaluation", "Evaluate", "Check", "ProfileSummary",
           "SizeTiming", "CachedEvaluate", "source_hash", "NOT_MEASURED", "Plan", "Round", "Usage"]
