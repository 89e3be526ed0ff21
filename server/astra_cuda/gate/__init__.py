"""The testing agent: the verification gate every candidate kernel must pass.

    verdict = gate.check(reference_unit, candidate_unit, spec, backend)
    verdict.passed, verdict.summary, verdict.to_json(), verdict.visible_feedback()

See run.py for the checks (state.py, building.py and judging.py for their parts), suite.py for the test cases, compare.py for the tolerances,
screen.py for static screening, timed.py for the correctness of timed launches.
"""
from .checks import launch_of
from .compare import Mismatch
from .run import check
from .state import Cancelled
from .screen import ScreenResult, fast_math_swaps
from .suite import Suite, build as build_suite
from .timed import (TimedSet, check_inputs_unchanged, check_outputs, check_samples, decoy, expect, fresh_run,
                    measure_rounding, prepare_timed, resync, sealed, timed_host)
from .verdict import CaseInfo, CheckResult, Coverage, Failure, Verdict

__all__ = ["check", "Cancelled", "Verdict", "Failure", "CheckResult", "Coverage", "CaseInfo",
           "Mismatch", "ScreenResult", "fast_math_swaps", "build_suite", "Suite", "prepare_timed",
           "expect", "fresh_run", "check_outputs", "check_inputs_unchanged", "check_samples", "TimedSet", "launch_of",
           "measure_rounding", "timed_host", "resync", "sealed", "decoy"]
