"""The checks of a spec that evaluate its cases (`check_cases`, run by `load`): every test and
bench case gives a valid launch (block 1 to 1024 threads, a CUDA grid) and buffers of a sane
size (estimated here, before anything is allocated)."""
from __future__ import annotations

from . import exprs
from ..diagnostics import Diagnostic
from .harness import MAX_CASE_BYTES, MAX_TABLE_ENTRIES, Spec, SpecErrors, arg_path
from .source import Kernel
from .spec_places import Locator, diag


def check_cases(spec: Spec, kernel: Kernel, loc: Locator) -> None:
    """Semantic checks that need evaluation: every case must give positive launch dimensions
    and buffers of a sane size (estimated here, before anything is allocated)."""
    assert kernel.spec is not None
    problems: list[Diagnostic] = []
    line, col = kernel.spec.span.start_line, kernel.spec.span.start_col
    try:
        cases = spec.cases()
        timed = spec.bench_cases()
    except exprs.ExprError as e:
        raise SpecErrors([diag(*loc.key("require"), f"require: {e}")]) from None
    for case in cases[:64] + timed[:64]:
        try:
            g, b, _ = spec.launch_dims(case)
            for a in spec.args.values():
                if a.is_scalar:
                    spec.scalar(a.name, case)
            _case_bytes(spec, case)
        except exprs.ExprError as e:
            problems.append(diag(line, col, col + 2, str(e)))
            break
        except _TooLarge as e:
            line_, col_, end_line_, end_col_ = loc.place(arg_path(e.arg))
            problems.append(diag(line_, col_, end_col_ if end_line_ == line_ else col_ + 1, str(e)))
            break
        if min(b) < 1 or b[0] * b[1] * b[2] > 1024:
            problems.append(diag(line, col, col + 2, f"block {b} at sizes {case} is not between 1 and 1024 threads"))
            break
        if min(g) < 1 or g[0] >= 1 << 31 or g[1] > 65535 or g[2] > 65535:
            problems.append(diag(*loc.key("grid"), f"grid {g} at sizes {case} is not a valid CUDA grid"))
            break
    if not cases:
        problems.append(diag(line, col, col + 2, "no test case: [sizes] is empty or `require` rules out every combination"))
    if problems:
        raise SpecErrors(problems[:1])


class _TooLarge(Exception):
    def __init__(self, arg: str, message: str):
        super().__init__(message)
        self.arg = arg


def _case_bytes(spec: Spec, case: dict[str, int]) -> int:
    """Bytes of all buffers of one case, or _TooLarge naming the argument that breaks the cap."""
    total = 0
    for a in spec.args.values():
        if a.records:
            n = exprs.evaluate_int(a.records, case)
            if not 1 <= n <= MAX_TABLE_ENTRIES:
                raise _TooLarge(a.name, f"{a.name!r}: {n} records at sizes {case} (from 1 to {MAX_TABLE_ENTRIES})")
        if a.drawn:
            a.init.at(case)   # its bounds evaluate at every case
        if not a.pointer:
            continue
        shape = spec.shape(a.name, case)
        if any(d < 0 for d in shape):
            raise _TooLarge(a.name, f"parameter {a.name!r}: negative shape {shape} at sizes {case}")
        if a.table and not 1 <= shape[0] <= MAX_TABLE_ENTRIES:
            raise _TooLarge(a.name, f"parameter {a.name!r}: a table of {shape[0]} pointers at sizes {case} "
                                    f"(from 1 to {MAX_TABLE_ENTRIES})")
        n = a.dtype.itemsize
        for d in shape:
            n *= d
        total += n
        if total > MAX_CASE_BYTES:
            raise _TooLarge(a.name, f"parameter {a.name!r}: the buffers of sizes {case} would take "
                                    f"{total / 2**30:.1f} GiB (at most {MAX_CASE_BYTES >> 30} GiB per case)")
    return total
