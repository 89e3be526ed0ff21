"""The gate's checks that run an instrumented build of the candidate: AddressSanitizer (out-of-bounds
accesses) and the race checker (ThreadSanitizer over the fibers) on the CPU, compute-sanitizer
(memcheck, racecheck) on the GPU — each on a few small cases, a report that names no line of the
user's file and does not repeat being the tool's own noise, a warning."""
from __future__ import annotations

import os
import re
import threading

import numpy as np

from ..backends.base import CompileError, LaunchError, Unsupported
from . import compare, screen as screening, suite as suites
from .building import Building
from .checks import POISONS, Compiled, Run, run_case, written
from .judging import Judging
from .state import Arrays
from .verdict import CaseInfo, CheckResult


class Instrumented(Building, Judging):
    def compile_variant(self, **kw: bool) -> Compiled:
        """A sanitizer/race-checker build; a compiler timeout (a loaded machine) gets one retry."""
        try:
            return self.built("races" if kw.get("races") else "sanitize", self.cand_unit, "candidate", **kw)
        except CompileError as e:
            if "timed out" not in str(e):
                raise
        return self.compile(self.cand_unit, "candidate", **kw)

    def sanitize(self, st: suites.Suite) -> None:
        try:
            mod = self.compile_variant(sanitize=True)
        except (CompileError, Unsupported) as e:
            self.v.checks.append(CheckResult("sanitize", True, f"skipped: no sanitizer build ({e})", skipped=True))
            self.v.warnings.append(f"out-of-bounds accesses were not checked: the AddressSanitizer build failed ({e})")
            return
        spec_cases = sorted([c for c in st.cases if c.label == "spec"], key=lambda c: self.spec.elements(c.sizes))
        edges = sorted([c for c in st.cases if c.label == "edge"], key=lambda c: self.spec.elements(c.sizes))
        picks = spec_cases[:1] + edges[-1:]
        for case in picks:
            self.cancelled()
            info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 29, case.visible, "sanitize")
            host = suites.inputs(self.spec, case.sizes, case.distribution, info.seed)
            expected = self.expected(case.sizes, host, POISONS[0], info)
            try:
                run = self._sanitized_run(mod, case.sizes, host)
                self.v.coverage.launches += 1
            except LaunchError as e:
                self.fail("sanitize", f"AddressSanitizer: {e}", info)
                return
            self.judge("sanitize", info, host, run.after, expected, POISONS[0])
            if not self.whole_launch("sanitize", info, host, run.after, expected):
                return

    def races(self, st: suites.Suite) -> None:
        """CPU: a ThreadSanitizer build over the fibers (barriers and warp collectives are the
        synchronisation) finds races that every schedule happens to hide, on one small case."""
        try:
            mod = self.compile_variant(races=True)
        except (CompileError, Unsupported) as e:
            self.v.checks.append(CheckResult("races", True, f"skipped: no race-checker build ({e})", skipped=True))
            return
        spec_cases = sorted([c for c in st.cases if c.label == "spec"], key=lambda c: self.spec.elements(c.sizes))
        multi = [c for c in spec_cases if np.prod(self.spec.launch_dims(c.sizes)[1]) > 32] or spec_cases
        if not multi:
            return
        case = multi[0]
        info = CaseInfo(dict(case.sizes), case.distribution, case.seed + 31, case.visible, "races")
        host = suites.inputs(self.spec, case.sizes, case.distribution, info.seed)
        expected = self.expected(case.sizes, host, POISONS[0], info)
        try:
            run = run_case(self.spec, self.backend, mod, case.sizes, host, self.ctypes, POISONS[0])
            self.v.coverage.launches += 1
        except LaunchError as e:
            msg = str(e)
            if "data race" in msg and self._declaration_only(msg):
                self.v.warnings.append(f"race checker: a report at a __shared__ declaration (the runtime's "
                                       f"initialisation, not the kernel's code) was ignored: {msg.splitlines()[0]}")
                self.count("races")
                return
            self.fail("races" if "data race" in msg else "launch", msg, info)
            return
        if self.judge("races", info, host, run.after, expected, POISONS[0]) and \
                self.whole_launch("races", info, host, run.after, expected):
            self.count("races")

    def whole_launch(self, check: str, info: CaseInfo, host: Arrays, after: Arrays, expected: Arrays | None) -> bool:
        """An instrumented build's launch counts only once it wrote what the plain build writes
        (issue 30): a report-free launch that ended early — its process replied `{"ok": true}` and
        exited mid-launch, or the kernel told the instrumented build apart at run time and
        returned — left outputs poisoned, and its missing report is no pass. With a reference,
        `judge` has compared every element; with none, the candidate's plain build runs on the
        same inputs (another poison), and every element it writes must be written here."""
        if expected is None:
            try:
                expected = run_case(self.spec, self.backend, self.candidate, info.sizes, host, self.ctypes,
                                    POISONS[1]).after
                self.v.coverage.launches += 1
            except LaunchError as e:
                self.fail("launch", f"the candidate failed: {e}", info)
                return False
            for name in written(self.spec):
                if not self.spec.args[name].output:
                    continue
                # poisoned here, written there — and not a value that happens to look like this poison
                plain = expected[name]
                left = compare.poison_mask(after[name], POISONS[0]) & ~compare.poison_mask(plain, POISONS[1]) & \
                    ~compare.poison_mask(plain, POISONS[0])
                if left.any():
                    idx = compare.first_index(left)
                    self.fail(check, f"`{name}`: the {check} build's launch left {int(left.sum())} of {left.size} "
                              f"elements unwritten that the plain build writes, first at "
                              f"{name}[{', '.join(map(str, idx))}] (a launch that ended early)", info, output=name,
                              index=list(idx), bad=int(left.sum()), total=left.size)
                    return False
        return True

    def _declaration_only(self, message: str) -> bool:
        """Every line a race report names is a `__shared__` declaration."""
        lines = {int(n) for n in re.findall(re.escape(os.path.basename(self.cand_unit.path)) + r":(\d+)", message)}
        if not lines:
            return False
        unit = screening.parsed(self.cand_unit.source)
        rows = unit.text.split("\n")
        texts = [rows[r] for r in range(len(rows)) if unit.user_line(r) in lines]
        return bool(texts) and all("__shared__" in t and "=" not in t.split("__shared__", 1)[1] for t in texts)

    def compute_sanitizer(self) -> None:
        from .sanitizer import compute_sanitizer
        found = compute_sanitizer(self.cand_unit, self.spec, self.backend, seed=self.nonce,
                                  cancel=self.cancel if isinstance(self.cancel, threading.Event) else None)
        if found is None:
            self.v.checks.append(CheckResult("compute_sanitizer", True, "skipped: compute-sanitizer not installed",
                                             skipped=True))
            return
        for f in found:
            self.fail(f.check, f.message, f.case)
        if not found:
            self.count("compute_sanitizer")

    def _sanitized_run(self, mod: Compiled, sizes: dict[str, int], host: Arrays) -> Run:
        """A report that does not point into the user's file and does not repeat on a re-run is
        the sanitizer runtime's own noise (fiber stack switches can confuse it): a warning, not
        a failure. A real out-of-bounds access in the kernel repeats and names its line."""
        try:
            return run_case(self.spec, self.backend, mod, sizes, host, self.ctypes, POISONS[0])
        except LaunchError as e:
            if os.path.basename(self.cand_unit.path) in str(e):
                raise
            first = e
        try:
            run = run_case(self.spec, self.backend, mod, sizes, host, self.ctypes, POISONS[0])
        except LaunchError:
            raise first from None
        self.v.warnings.append(f"the sanitizer reported a problem outside the kernel's code once, not on a re-run "
                               f"(ignored): {first}")
        return run
