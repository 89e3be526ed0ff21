"""The gate's first stages: static screening and the builds — both units compiled on the backend
(on the CPU only after they compiled for the GPU and their cut was checked against the file), started
at once where the backend builds in subprocesses — and the scalar and struct parameters' layouts
read from the candidate's module."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .. import redact
from ..backends.base import CompileError, LaunchError, Unsupported
from . import screen as screening
from .checks import Compiled, arg_types
from .state import GateState
from .verdict import CheckResult

if TYPE_CHECKING:
    from ..compile.extract import CompileUnit

BUILD_THREADS = 2                 # builds at once where the backend prefetches (0: one after another).
                                  # Two, not four: the reference and candidate, which everything waits
                                  # on, get a core each


class Building(GateState):
    def screen(self) -> bool:
        res = screening.screen(self.ref_unit.source if self.ref_unit else None, self.cand_unit.source,
                               self.cand_unit.kernel, self.spec)
        self.atomics, self.suspect = res.uses_atomics, res.stateful_suspect
        for f in res.errors:
            self.fail("screen", f.message, line=f.line)
        for f in res.warnings:
            self.v.warnings.append(f"line {f.line}: {f.message}" if f.line else f.message)
        if self.ref_unit is not None:
            self.v.warnings.extend(self.backend.numerics_warnings(self.ref_unit.source, self.cand_unit.source))
        if res.fast_math:
            self.v.coverage.notes.append(f"fast-math intrinsics added: {', '.join(res.fast_math)}")
        self.v.checks.append(CheckResult("screen", not res.errors,
                                         f"{len(res.errors)} error(s), {len(res.warnings)} flag(s)"))
        return not res.errors

    def compile(self, unit: CompileUnit, role: str, sanitize: bool = False, races: bool = False) -> Compiled:
        mod = self.backend.compile_unit(unit, sanitize=sanitize, races=races, role=role)
        return Compiled(mod, unit.name_expression, role)

    def read_layouts(self) -> bool:
        """The C++ types of the scalar parameters and the layout of each struct parameter, as
        the candidate's module has it; the reference's must be the same (a rewrite may not
        change what the kernel is given)."""
        assert self.cand is not None
        try:
            self.ctypes = arg_types(self.spec, self.backend, self.cand, self.cand_unit.param_types)
            if self.ref is not None and self.ref_unit is not None and any(a.struct for a in self.spec.args.values()):
                theirs = arg_types(self.rspec, self.backend, self.ref, self.ref_unit.param_types)
                changed = [n for n, a in self.spec.args.items() if a.struct and theirs.get(n) != self.ctypes.get(n)]
                if changed:
                    self.fail("screen", f"the candidate lays out struct parameter {changed[0]!r} differently from the "
                                        f"reference: a rewrite may not change what the kernel is given")
                    return False
        except LaunchError as e:
            self.fail("compile", f"the struct parameters cannot be assembled: {e}")
            return False
        return True

    def start_builds(self) -> None:
        """Where builds are subprocesses (caps.build_prefetch: g++ on the CPU), start every build
        this gate will need at once — threads overlap — and take each result in the usual order
        when its check comes. A build that an earlier failure makes unneeded still finishes into
        the compile cache (queued ones are dropped). Elsewhere builds stay sequential: an NVRTC
        compile takes ~35 ms."""
        if not self.caps.build_prefetch or BUILD_THREADS < 2:
            return
        plan: dict[str, tuple[CompileUnit, str, dict[str, bool]]] = {}
        if self.ref_unit is not None:
            plan["reference"] = (self.ref_unit, "reference", {})
        plan["candidate"] = (self.cand_unit, "candidate", {})
        if (not self.quick or self.bounds) and self.caps.address_sanitizer:
            plan["sanitize"] = (self.cand_unit, "candidate", {"sanitize": True})
        if not self.quick and self.caps.race_checker:
            plan["races"] = (self.cand_unit, "candidate", {"races": True})
        self.pool = ThreadPoolExecutor(BUILD_THREADS, thread_name_prefix="astra-build")
        self.builds = {key: self.pool.submit(self.compile, unit, role, **kw) for key, (unit, role, kw) in plan.items()}

    def built(self, key: str, unit: CompileUnit, role: str, **kw: bool) -> Compiled:
        """The build started for `key`, else a compile now. Raises what the compile raised."""
        future = self.builds.pop(key, None)
        return future.result() if future is not None else self.compile(unit, role, **kw)

    def stop_builds(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool, self.builds = None, {}

    def device_compile(self) -> bool:
        """CPU backend: GPU first. Both units must compile for the GPU (nvcc on the whole file
        where a CUDA toolkit is installed, else NVRTC on the unit; nothing runs) before any of
        their code runs on the host: host-only code in a kernel (file I/O, processes, hidden
        behind `#ifndef __CUDACC_RTC__` or not) is an error, never a pass."""
        from ..compile import static

        for unit, role in ((self.ref_unit, "reference"), (self.cand_unit, "candidate")):
            if unit is None:
                continue
            r = static.compile_unit(unit)
            self.v.compiler = r.compiler
            if r.ok:
                continue
            errors = [d for d in r.diagnostics if d.severity == "error"] or r.diagnostics
            log = redact.included(r.log, unit.path)  # never the text of an included .env
            said = "; ".join(d.human(os.path.basename(unit.path)) for d in errors[:4]) or log[-600:]
            msg = (f"the {role} does not compile for the GPU ({r.compiler or 'NVRTC'}), so it is not run on the CPU: "
                   f"{said}")
            if role == "reference":
                self.v.status, self.v.log = "error", msg
            else:
                self.v.log = log
                self.fail("compile", msg, line=errors[0].line + 1 if errors else None)
                self.v.checks.append(CheckResult("compile", False, msg))
            return False
        return True

    def cut_check(self) -> bool:
        """CPU backend: each unit cut out of its file for the host compiler must mean what the
        file means (`astra_cuda.compile.cutcheck`, nvcc): a cut that changes the kernel is an error that
        names what it left out, never a run of other code."""
        from ..compile import cutcheck

        for unit, role in ((self.ref_unit, "reference"), (self.cand_unit, "candidate")):
            if unit is None:
                continue
            if unit.search_cut:   # the search's unit: the reference's proof carries (compile.fastpath)
                continue
            r = cutcheck.check(unit)
            if not r.checked:
                self.v.coverage.notes.append(f"{role}: {r.message}")
            elif not r.ok:
                self.v.status, self.v.log = "error", f"the {role} cannot be run on the CPU: {r.message}"
                return False
        return True

    def compile_all(self) -> bool:
        if self.caps.host_code and not (self.device_compile() and self.cut_check()):
            return False
        self.start_builds()
        if self.ref_unit is not None:
            try:
                self.ref = self.built("reference", self.ref_unit, "reference")
            except CompileError as e:
                self.v.status, self.v.log = "error", f"the reference does not compile: {e}\n{e.log}"
                return False
            except Unsupported as e:
                self.v.status, self.v.log = "unsupported", f"the reference cannot run on the {self.backend.name}: {e}"
                return False
        try:
            self.cand = self.built("candidate", self.cand_unit, "candidate")
        except CompileError as e:
            self.v.log = e.log
            self.fail("compile", f"the candidate does not compile: {e}")
            self.v.checks.append(CheckResult("compile", False, str(e)))
            return False
        except Unsupported as e:
            self.v.status, self.v.log = "unsupported", f"the candidate cannot run on the {self.backend.name}: {e}"
            return False
        built = self.cand.module.compiler
        if built and not self.caps.host_code:
            self.v.compiler = built
        said = f" ({self.v.compiler})" if self.v.compiler else ""
        self.v.checks.append(CheckResult("compile", True, ("reference and candidate" if self.ref else "candidate") + said))
        return True

