"""The testing agent: the verification gate every candidate kernel must pass.

    verdict = gate.check(reference_unit, candidate_unit, spec, backend)
    verdict.passed, verdict.summary, verdict.to_json(), verdict.visible_feedback()

See run.py for the checks, suite.py for the test cases, compare.py for the tolerances,
screen.py for static screening, timed.py for re-validation after timing.
"""
from .checks import launch_of
from .compare import Mismatch
from .run import Cancelled, check
from .screen import ScreenResult, fast_math_swaps
from .suite import Suite, build as build_suite
from .timed import Revalidation, TimedSet, prepare_timed, revalidate_after_timing
from .verdict import CaseInfo, CheckResult, Coverage, Failure, Verdict

__all__ = ["check", "Cancelled", "Verdict", "Failure", "CheckResult", "Coverage", "CaseInfo",
           "Mismatch", "ScreenResult", "fast_math_swaps", "build_suite", "Suite", "prepare_timed",
           "revalidate_after_timing", "TimedSet", "Revalidation", "launch_of"]
