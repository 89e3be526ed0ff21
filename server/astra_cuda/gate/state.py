"""What one run of the gate holds: its inputs (the units, the specs, the backend), what it has built,
and its verdict's bookkeeping — the counts of each check, the failures, cancelling. The stages that
fill it are its subclasses: `building` (screen, compile), `judging` (the reference's outputs and how a
candidate's are judged), `instrumented` (sanitizer and race-checker builds) and `run` (the other checks
and the whole gate)."""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..backends.base import Backend
from ..errors import AstraError
from ..model.spec import Spec
from .checks import Compiled
from .suite import Drawn
from .verdict import CaseInfo, Failure, Verdict

if TYPE_CHECKING:
    from ..compile.extract import CompileUnit

Arrays = dict[str, np.ndarray]   # argument name -> its values on the host

Cancel = threading.Event | Callable[[], bool] | None


class Cancelled(AstraError):
    def __init__(self) -> None:
        super().__init__("the check was cancelled")


class ReferenceFailed(Exception):
    """The reference itself failed a case: the verdict is an error, not the candidate's failure."""


class GateState:
    """One check's inputs, what it has built and its verdict's bookkeeping (counts, failures, cancelling);
    the gate's stages (`building.Building`, `judging.Judging`, `run._Gate`) are its subclasses."""

    ctypes: dict[str, Any]   # each scalar parameter's C type, each struct's layout: set once the candidate is built

    def __init__(self, reference: CompileUnit | None, candidate: CompileUnit, spec: Spec, backend: Backend,
                 quick: bool, cancel: Cancel, seed: int | None,
                 max_failures: int | None, sanitizer: bool | None = None, reference_spec: Spec | None = None,
                 bounds: bool = False, rounding: Backend | None = None, verify_reference: bool = False):
        self.sanitizer = sanitizer
        self.verify_reference = verify_reference and reference is not None   # see `run.check`
        self.bounds = bounds   # the address-sanitizer build even when quick (inference's trial runs)
        # Where the reference runs with directed rounding: this backend if it can, else `rounding`
        # (the CPU beside a GPU), else nowhere (no allowance: the tolerance alone).
        self.rounding = backend if backend.caps.rounding_modes else (
            rounding if rounding is not None and rounding.caps.rounding_modes else None)
        self.rounding_ref: Compiled | None = None   # the reference built for `rounding` when it is another backend
        self.rounding_noted: set[str] = set()
        # the candidate built on the backend that keeps the atomic ledger, where that is another
        # (gate/atomic_bound.py), and whether measuring failed once already (then never again)
        self.ledger_cand: Compiled | None = None
        self.ledger_off = False
        self.ledgers: tuple[Any, dict[str, Any]] = (None, {})   # the last case's (key, ledgers)
        self.ref_unit, self.cand_unit, self.spec, self.backend = reference, candidate, spec, backend
        # A rewrite may change the launch configuration (with the launch site): the reference
        # keeps its own. Cases come from the reference's spec, so a candidate cannot shed a size
        # by making its launch invalid there. Sizes the candidate's spec adds (a size dispatch's
        # other side, `Spec.with_cases_of`) travel with it: more cases, never fewer.
        self.rspec = reference_spec or spec
        if spec.added_cases:
            added = tuple(dict.fromkeys(self.rspec.added_cases + spec.added_cases))
            self.rspec = dataclasses.replace(self.rspec, added_cases=added)
        self.quick = quick
        self.cancel = cancel
        self.nonce = seed if seed is not None else secrets.randbits(31)
        self.max_failures = max_failures if max_failures is not None else (1 if quick else 8)
        self.v = Verdict(kernel=spec.kernel, backend=backend.name, status="passed", nonce=self.nonce,
                         compared=reference is not None)
        self.ran: dict[str, list[int]] = {}   # check -> [runs, failures]
        # No reference: outputs found constant (name, case, value) and outputs seen varying, for
        # the constant-output rule, which needs the whole suite (`constant_outputs`).
        self.constants: list[tuple[str, CaseInfo, float]] = []
        self.varying: set[str] = set()
        self.ref: Compiled | None = None
        self.cand: Compiled | None = None
        self.atomics = False
        self.suspect = False
        self.caps = backend.caps
        self.builds: dict[str, Future[Compiled]] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.drawn: Drawn | None = None   # the suite's inputs drawn ahead of their turn, while the checks run
        self.on_device: set[int] = set()  # main-suite cases drawn and judged on the device (gate/device_case.py)

    @property
    def reference(self) -> Compiled:
        """The reference, built (asked for only where there is one)."""
        assert self.ref is not None
        return self.ref

    @property
    def candidate(self) -> Compiled:
        """The candidate, built: every check after 'compile' runs on it."""
        assert self.cand is not None
        return self.cand

    # ---- bookkeeping -------------------------------------------------------------------------
    def cancelled(self) -> None:
        c = self.cancel
        if c is not None and (c.is_set() if isinstance(c, threading.Event) else c()):
            raise Cancelled()

    def count(self, check: str, ok: bool = True) -> None:
        r = self.ran.setdefault(check, [0, 0])
        r[0] += 1
        r[1] += 0 if ok else 1

    def fail(self, check: str, message: str, case: CaseInfo | None = None, **kw: Any) -> None:
        self.count(check, False)
        if "line" not in kw:  # sanitizer and fault reports name the user's file and line
            m = re.search(re.escape(os.path.basename(self.cand_unit.path)) + r":(\d+)", message)
            kw["line"] = int(m.group(1)) if m else None
        self.v.failures.append(Failure(check, message, case, **kw))

    def relabel(self, start: int, prefix: str, check: str = "statefulness") -> None:
        """Failures found by a statefulness run count against that check, whatever caught them."""
        for f in self.v.failures[start:]:
            if f.check in ("compare", "not_constant", "poison"):
                self.ran[f.check][1] -= 1
                self.ran[f.check][0] -= 1
                self.count(check, False)
                f.check = check
            f.message = prefix + f.message

    @property
    def full(self) -> bool:
        return len(self.v.failures) >= self.max_failures

    def tol(self, name: str) -> tuple[float, float]:
        return self.spec.args[name].tolerance

