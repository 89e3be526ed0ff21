"""Two versions of a kernel selected by size (issue 29, item 1).

A rewrite can win at the bench sizes and lose at a decode size: packing several short rows into a
block is 1.76× faster on 16,384 tokens of merge_attn_states and 1.62× slower on one token, where
the packed grid leaves most of the GPU idle. Such a rewrite is not adopted as it is (no adopted
rewrite is slower than the original, or than the best so far, at any size of the ladder by more
than `Limits.size_tolerance`, 3%). Instead it may keep both versions in one kernel, each where it
is faster:

- **Where to switch**: the ladder's sizes where the rewrite was timed, each with the number of
  blocks of the best version's grid there (`blocks`) and whether the rewrite was faster there than
  the best so far (both were timed beside the original; within a timer step it is neither). The
  blocks of the grid are what separates a launch-bound size from a bandwidth-bound one; a
  threshold on them must put every size where the rewrite won on one side and every size where it
  lost on the other (`split`). Where they do not — one block per feature, the features the same at
  every ladder size (apex's welford: 512 features at bs = 1 and at bs = 512) — and both versions
  launch alike, another quantity every thread of the grid reads alike may: an integer parameter of
  the kernel that the spec binds to the sizes (`size_params`: `bs = "bs"`, in parameter order),
  then the block's threads (`Split.by`). Where nothing separates them there is no dispatch. The
  threshold is set just above the sizes on the lower side, so the gate's small sizes reach the
  upper version as often as they can.
- **One kernel** (`build`): the kernel's body becomes `if (<the rewrite's launch>) { the rewrite's
  body } else { the best's body }`, in the rewrite's file (its helpers and its launch sites). When
  both versions launch alike, the condition is the grid's block count itself (`gridDim`), or the
  parameter (`if ((long long)(bs) >= 2)`), or `blockDim`'s product. When the
  rewrite launches differently, the spec's grid and block and every launch site choose the
  launch by the block count the best version's grid would have (`(r) if blocks >= T else (b)` in
  the spec, `blocks >= T ? r : b` in C++), and the kernel tells the two launches apart by a block
  dimension the rewrite fixes to a value the best's launch never takes at the sizes checked (the
  packed rows' `blockDim.y == 4`); a pair of launches without one gets no dispatch, and neither
  does a switch on a parameter or the threads (the block count's route only), except a rewrite
  right for any grid that changes the grid alone (`any_grid`): where the best's body is the
  one-element-per-thread form (`coarsen.grid_cover`), the kernel runs it wherever the grid's
  threads reach its elements (`gridDim.x * blockDim.x >= n`: the best's grid does, the rewrite's
  shrunk one does not; a row per `blockIdx.x` with its columns over y, `gridDim.y * blockDim.x >=
  cols`) and the rewrite's body elsewhere, right under any grid; else the rewrite's body alone on
  both grids — below the threshold too, where it can lose as much as the rewrite itself
  (FasterTransformer's addBiasResidual at one row on an H200, 8.6% before the 2-D form was read).
  The condition
  is the same for every thread of the grid, so barriers inside either version stay valid.
- **Every branch checked**: the gate's own sizes must launch both versions (some below the
  threshold, some at or above it). Where they launch only one (the spec's small test sizes all
  below a threshold of thousands of blocks), the smallest ladder size that launches the other —
  one the rewrite was timed at — is added to the spec's [sizes] (`launch_change.add_sizes`: a
  rewrite may add test cases, never remove one), so the gate checks it, and the user's later checks
  do too; the spec says so. Without such a size there is no dispatch. Where the grid's coverage
  picks the body, the gate's sizes must also run both bodies (`_runs_both`). The candidate then goes
  through the whole gate and the timing at every size of the ladder like any other, and is adopted
  only under the same rule — faster at the bench sizes, and slower than the original or the best so
  far at no size beyond the tolerance (`verdicts.judge`).

The adopted round's plan records the threshold and what it is of (parameter `KEY`: `by` and
`param`, absent for the block count as before), so the chain of adopted rounds
replays to the same kernel (`rebuild`, from `tuning.replay`): the tuning stage varies the rewrite's
own parameters at the same threshold, and the remembered tuning makes it again.

Pure text in, text out (`split`, `build`, `rebuild`); `attempt` ties them to a round of the
orchestrator.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable

from ..model import exprs, source
from ..evaluation import CachedEvaluate, Evaluation, InfrastructureError, ProfileSummary, SizeTiming, source_hash
from ..model.launch_change import add_sizes, relaunch, side_effect_free, spec_in
from ..model.spec import Spec
from .coder import Attempt
from .offline.coarsen import grid_cover
from .records import Round

DIMS = "xyz"
KEY = "dispatch"    # in an adopted round's plan parameters: where its rewrite was kept beside the version before
DISPATCHED = "dispatched by size ("   # how an adopted dispatch's reason begins
ONE_BODY = "two grids selected by size (one body, right for any grid)"   # the note of a dispatch of grids alone


@dataclass(frozen=True)
class Split:
    threshold: int      # the quantity (`by`) from which `upper` runs
    upper: str          # 'rewrite' | 'best': the version at `threshold` and above
    wins: tuple[int, ...]    # the quantity where the rewrite was faster
    losses: tuple[int, ...]  # ... and where it was slower
    by: str = "blocks"  # 'blocks' (of the best version's grid) | 'param' (a kernel parameter) | 'threads' (a block's)
    param: str = ""     # by 'param': the integer parameter the spec binds to the sizes

    def describe(self) -> str:
        lower = "best" if self.upper == "rewrite" else "rewrite"
        names = {"rewrite": "the rewrite", "best": "the previous version"}
        where = {"blocks": f"{self.threshold} blocks", "threads": f"{self.threshold} threads a block",
                 "param": f"{self.param} = {self.threshold}"}[self.by]
        return f"{names[self.upper]} from {where} on, {names[lower]} below"


def blocks(spec: Spec, sizes: dict[str, int]) -> int:
    """The blocks of `spec`'s grid at `sizes`."""
    g = spec.launch_dims(sizes)[0]
    return g[0] * g[1] * g[2]


def measure(spec: Spec, sp: Split, sizes: dict[str, int]) -> int:
    """The quantity `sp` switches on, at `sizes`."""
    if sp.by == "param":
        return int(spec.scalar(sp.param, sizes))
    if sp.by == "threads":
        b = spec.launch_dims(sizes)[1]
        return b[0] * b[1] * b[2]
    return blocks(spec, sizes)


def _where(sp: Split) -> str:
    return f"{sp.param} = {sp.threshold}" if sp.by == "param" else f"{sp.threshold} {sp.by}"


def size_params(spec: Spec) -> list[str]:
    """The kernel's integer parameters passed by value whose spec value is an expression over the
    sizes (`bs = "bs"`), in parameter order: what the kernel can read, the same in every thread."""
    out = []
    for a in spec.args.values():
        if (a.pointer or a.struct or a.member_of or a.table or a.records or a.null or not a.name.isidentifier()
                or a.dtype.is_float or a.dtype.name == "bool" or a.value is None or isinstance(a.value, float)):
            continue
        try:
            if exprs.names(str(a.value)):
                out.append(a.name)
        except exprs.ExprError:
            continue
    return out


def _key(t: SizeTiming) -> tuple:
    return tuple(sorted(t.sizes.items()))


def split(best_spec: Spec, best: ProfileSummary, rewrite: ProfileSummary, others: bool = False) -> Split | None:
    """Where to switch between the best version and the rewrite (see the module docstring), or
    None when the rewrite wins nowhere, loses nowhere, or wins and loses at interleaved sizes.
    `others` (both versions launch alike): where the grid's blocks do not separate them, a size
    parameter of the kernel (`size_params`, in order), then the block's threads, may."""
    theirs = {_key(t): t for t in best.sizes}
    wins, losses = [], []
    for t in rewrite.sizes:
        o = theirs.get(_key(t))
        if o is None or not (t.baseline_us > 0 and o.baseline_us > 0 and t.candidate_us > 0 and o.candidate_us > 0):
            continue
        mine, base = t.candidate_us / t.baseline_us, o.candidate_us / o.baseline_us
        step = max(t.step_us / t.baseline_us, o.step_us / o.baseline_us)
        if step and abs(mine - base) <= step:
            continue   # within a step of the timer: nothing measured either way
        (wins if mine < base else losses).append(t.sizes)
    if not wins or not losses:
        return None
    ways = [Split(0, "", (), ())]
    if others:
        ways += [Split(0, "", (), (), "param", p) for p in size_params(best_spec)] + [Split(0, "", (), (), "threads")]
    for way in ways:
        try:
            w = sorted(measure(best_spec, way, s) for s in wins)
            lo = sorted(measure(best_spec, way, s) for s in losses)
        except Exception:  # noqa: BLE001 - a size the spec cannot launch decides nothing
            continue
        if w[0] > lo[-1]:
            return replace(way, threshold=lo[-1] + 1, upper="rewrite", wins=tuple(w), losses=tuple(lo))
        if lo[0] > w[-1]:
            return replace(way, threshold=w[-1] + 1, upper="best", wins=tuple(w), losses=tuple(lo))
    return None


def _body(text: str, k: source.Kernel) -> str:
    data = text.encode("utf-8")
    return data[k.body_span.start_byte:k.body_span.end_byte].decode("utf-8")


def _indented(body: str) -> str:
    """A body one level deeper (its opening brace stays where it is put)."""
    first, *rest = body.split("\n")
    return "\n".join([first] + [("  " + line) if line.strip() else line for line in rest])


def _padded(dims: tuple[str, ...] | list[str]) -> list[str]:
    return [str(d).strip() for d in dims] + ["1"] * (3 - len(dims))


def _marker(best: Spec, rewrite: Spec) -> str | None:
    """`blockDim.d == c` where the rewrite's block dimension d is the constant c and the best's
    another constant: how the kernel knows which launch it got, at every size (a dimension that
    depends on a size could coincide at a size no one checked)."""
    for d, (r, b) in enumerate(zip(_padded(rewrite.block), _padded(best.block))):
        try:
            if exprs.names(r) or exprs.names(b):
                continue
            rv, bv = exprs.evaluate_int(r, {}), exprs.evaluate_int(b, {})
        except exprs.ExprError:
            continue
        if rv != bv:
            return f"blockDim.{DIMS[d]} == {rv}u"
    return None


def gate_size(best_spec: Spec, sp: Split, gate_cases: list[dict[str, int]],
              ladder: list[dict[str, int]]) -> tuple[dict[str, int] | None, str]:
    """({} when the gate's sizes launch both versions, else the smallest of the `ladder`'s sizes
    that launches the one they miss, to add to the gate's sizes), or (None, why there is none)."""
    try:
        reach = [measure(best_spec, sp, c) >= sp.threshold for c in gate_cases]
    except Exception:  # noqa: BLE001
        return None, "the gate's sizes cannot be launched"
    if any(reach) and not all(reach):
        return {}, ""
    side = "at or above" if all(reach) else "below"
    try:
        other = [c for c in ladder if (measure(best_spec, sp, c) >= sp.threshold) != all(reach)]
    except Exception:  # noqa: BLE001
        other = []
    if not other:
        return None, (f"the gate's sizes launch only one of the two versions (all {side} {_where(sp)}) and "
                      f"no timed size launches the other: it would go unchecked")
    return min(other, key=best_spec.elements), ""


def build(best_text: str, rewrite_text: str, kernel: str, sp: Split,
          gate_cases: list[dict[str, int]], ladder: list[dict[str, int]] = (),
          any_grid: bool = False) -> tuple[str | None, str]:
    """(the rewrite's file with the two versions selected by size, '') or (None, why not).
    `gate_cases`: the sizes the gate runs (both versions must be reached); `ladder`: sizes the
    rewrite was timed at, one of which is added to the spec's [sizes] where the gate's miss a
    version (see gate_size). `any_grid`: the rewrite is right for any grid (a grid-stride loop:
    coarsen, block_atomic, privatize); where it changes only the grid, the kernel need not tell
    the launches apart. Where the previous body is right under any grid whose threads reach its
    elements (`coarsen.grid_cover`), the kernel runs it wherever they do and the rewrite's body
    elsewhere: the previous grid covers them, the rewrite's shrunk one does not, so each size runs
    the version that is faster there (vectorAdd: the vectorized body on the previous grid was
    still 3.6% slower at 6,250 elements), and any grid gets a right body. That needs the gate's
    sizes to run both bodies (`_runs_both`); otherwise, or where the previous body is of another
    form, it keeps the rewrite's body alone and each size gets its own grid."""
    cover = grid_cover(best_text, kernel) if any_grid else None
    if cover is not None:
        text, why = _checked(best_text, rewrite_text, kernel, sp, gate_cases, list(ladder), any_grid, cover)
        if text is not None:
            return text, why
    return _checked(best_text, rewrite_text, kernel, sp, gate_cases, list(ladder), any_grid, None)


def _checked(best_text: str, rewrite_text: str, kernel: str, sp: Split, gate_cases: list[dict[str, int]],
             ladder: list[dict[str, int]], any_grid: bool, cover: tuple[str, str] | None) -> tuple[str | None, str]:
    """`build` with the previous body kept where the grid covers `cover` (elements, grid axis;
    None: not)."""
    mb, mr = source.parse(best_text), source.parse(rewrite_text)
    kb, kr = mb.kernel(kernel), mr.kernel(kernel)
    sb, sr = spec_in(mb, kernel), spec_in(mr, kernel)
    if kb is None or kr is None or sb is None or sr is None:
        return None, "a version has no kernel or spec to dispatch between"
    extra, why = gate_size(sb, sp, gate_cases, ladder)
    if extra is None:
        return None, why
    note = f"two versions selected by size: {sp.describe()} (each is faster there)"
    if extra:
        note += "; [sizes] gained " + ", ".join(f"{n} = {v}" for n, v in extra.items()) + " so the checks launch both"
    text, why, covered = _build(best_text, rewrite_text, kernel, sp, note, mb, mr, kb, kr, sb, sr, any_grid, cover)
    if text is None:
        return text, why
    checked = list(gate_cases)
    if extra:
        grown = add_sizes(text, kernel, extra)
        grown_spec = spec_in(source.parse(grown), kernel) if grown is not None else None
        if grown is None or grown_spec is None:
            return None, f"the timed size {extra} that launches the other version could not be added to the spec's [sizes]"
        checked += [dict(c) for c in sb.with_cases_of(grown_spec).added_cases]
        if gate_size(sb, sp, checked, [])[0] != {}:
            return None, f"with {extra} added, the gate's sizes still launch only one of the two versions"
        text = grown
    if covered and not _runs_both(spec_in(source.parse(text), kernel) or sb, checked, covered):
        return None, f"the gate's sizes do not run both bodies (the grid covers {covered[0]} elements at all or none)"
    return text, ""


def _runs_both(spec: Spec, cases: list[dict[str, int]], cover: tuple[str, str]) -> bool:
    """At `cases`, launched as `spec` says, some grids reach `cover`'s elements with their threads
    along its axis (the previous body runs) and some do not (the rewrite's body runs): the gate
    checks both."""
    runs = set()
    bound, axis = cover
    try:
        for c in cases:
            grid, block, _ = spec.launch_dims(c)
            env = {n: spec.scalar(n, c) for n in exprs.names(bound)}
            runs.add(grid[DIMS.index(axis)] * block[0] >= exprs.evaluate_int(bound, env))
    except Exception:  # noqa: BLE001 - a bound the spec cannot evaluate: no size is known to run either body
        return False
    return runs == {True, False}


def _build(best_text: str, rewrite_text: str, kernel: str, sp: Split, note: str, mb: source.SourceModel,
           mr: source.SourceModel, kb: source.Kernel, kr: source.Kernel, sb: Spec, sr: Spec,
           any_grid: bool = False, cover: tuple[str, str] | None = None) -> tuple[str | None, str, tuple[str, str] | None]:
    """(text, why not, `cover` — the element count and grid axis — where the previous body runs
    wherever the grid's threads along that axis reach it, else None)."""
    upper_is_rw = sp.upper == "rewrite"
    if sp.by != "blocks" and sr.launch != sb.launch:
        return None, f"a switch on {sp.by} needs both versions launched alike, and the rewrite changes the launch", None
    if sp.by == "param" and not (kb.param(sp.param) and kr.param(sp.param) and sp.param in sb.args
                                 and sb.args[sp.param] == sr.args.get(sp.param)):
        return None, f"the parameter {sp.param} is not the same size in both versions", None
    if sr.launch == sb.launch:
        quantity = {"blocks": "(long long)gridDim.x * gridDim.y * gridDim.z", "param": f"(long long)({sp.param})",
                    "threads": "(long long)blockDim.x * blockDim.y * blockDim.z"}[sp.by]
        rw_runs = f"{quantity} {'>=' if upper_is_rw else '<'} {sp.threshold}"
        combined = (f"{{\n  // astra-note: {note}\n  if ({rw_runs}) {_indented(_body(rewrite_text, kr))} "
                    f"else {_indented(_body(best_text, kb))}\n}}")
        data = rewrite_text.encode("utf-8")
        out = data[:kr.body_span.start_byte] + combined.encode("utf-8") + data[kr.body_span.end_byte:]
        return out.decode("utf-8"), "", None
    if (sr.shared_mem or "0").strip() != (sb.shared_mem or "0").strip():
        return None, "the two versions use different dynamic shared memory", None
    marker = _marker(sb, sr)
    grid_only = marker is None and any_grid and _padded(sb.block) == _padded(sr.block)
    if marker is None and not grid_only:
        return None, ("the kernel could not tell the two versions' launches apart (no block dimension that is "
                      "a different constant in each)"), None
    grid_b, grid_r, block_b, block_r = _padded(sb.grid), _padded(sr.grid), _padded(sb.block), _padded(sr.block)
    total = " * ".join(f"({g.strip()})" for g in sb.grid)
    chosen = f"{total} >= {sp.threshold}"

    def pick(r: str, b: str) -> str:
        if r == b:
            return r
        u, lo = (r, b) if upper_is_rw else (b, r)
        return f"({u}) if {chosen} else ({lo})"

    grid = [pick(r, b) for r, b in zip(grid_r, grid_b)][:max(len(sb.grid), len(sr.grid))]
    block = [pick(r, b) for r, b in zip(block_r, block_b)][:max(len(sb.block), len(sr.block))]
    best_sites = sorted(mb.launches_of(kernel), key=lambda s: (s.span.start_line, s.span.start_col))
    rw_sites = sorted(mr.launches_of(kernel), key=lambda s: (s.span.start_line, s.span.start_col))
    if len(best_sites) != len(rw_sites) or not all(side_effect_free(s.grid) and side_effect_free(s.block)
                                                     for s in best_sites):
        return None, "the launch sites of the two versions do not pair up", None
    at = {(s.span.start_line, s.span.start_col): b for s, b in zip(rw_sites, best_sites)}

    def host(site):
        b = at.get((site.span.start_line, site.span.start_col))
        if b is None:
            return None
        g = f"dim3({b.grid})"
        many = f"(long long){g}.x * {g}.y * {g}.z >= {sp.threshold}"
        u, lo = (site, b) if upper_is_rw else (b, site)
        return (f"({many}) ? dim3({u.grid}) : dim3({lo.grid})", f"({many}) ? dim3({u.block}) : dim3({lo.block})")

    covered = cover if grid_only else None
    if covered:     # the previous body where the grid's threads reach every element (it is right there), else the rewrite's
        bound, axis = covered
        note += f"; the previous version's body runs wherever the grid's threads reach all {bound} elements"
        combined = (f"{{\n  // astra-note: {note}\n  if ((long long)gridDim.{axis} * blockDim.x >= (long long)({bound})) "
                    f"{_indented(_body(best_text, kb))} else {_indented(_body(rewrite_text, kr))}\n}}")
        edits = [(kr.body_span.start_byte, kr.body_span.end_byte, combined)]
    elif grid_only:   # the rewrite is right for any grid: one body, each size launched with its own grid
        note = (note.replace("two versions selected by size", ONE_BODY, 1)
                .replace("the rewrite from", "the rewrite's grid from", 1).replace("the previous version", "the previous grid", 1))
        edits = [(kr.body_span.start_byte, kr.body_span.end_byte,
                  f"{{\n  // astra-note: {note}{_body(rewrite_text, kr)[1:]}")]
    else:
        combined = (f"{{\n  // astra-note: {note}\n  if ({marker}) {_indented(_body(rewrite_text, kr))} "
                    f"else {_indented(_body(best_text, kb))}\n}}")
        edits = [(kr.body_span.start_byte, kr.body_span.end_byte, combined)]
    new = relaunch(rewrite_text, kernel, grid, block, host, note, edits)
    if new is None:
        return None, "the spec and the launch sites could not be changed together", None
    return new.text, "", covered


def rebuild(before: str, rewritten: str, kernel: str, how: dict) -> str | None:
    """The dispatch a round's plan parameters recorded (`KEY`), made again from the version before
    the step and the step's rewrite (a remembered chain, a tuning point); None when it no longer
    can be."""
    spec = spec_in(source.parse(before), kernel)
    try:
        sp = Split(int(how["threshold"]), str(how["upper"]), (), (), str(how.get("by", "blocks")),
                   str(how.get("param", "")))
        cases = spec.cases() if spec is not None else []
        ladder = [{str(n): int(v) for n, v in how["gate_size"].items()}] if how.get("gate_size") else []
    except Exception:  # noqa: BLE001 - a stored record of another shape, a spec that no longer loads
        return None
    return build(before, rewritten, kernel, sp, cases, ladder, bool(how.get("any_grid")))[0] \
        if sp.upper in ("rewrite", "best") and sp.by in ("blocks", "param", "threads") else None


def attempt(r: Round, best_text: str, best_eval: Evaluation, kernel: str, ev: Callable[[str], Evaluation],
            judge: Callable[[Round, Attempt], None], cancel: threading.Event) -> None:
    """Round `r`'s rewrite was faster at the bench sizes but slower at another: try both versions
    selected by size. `r` becomes the dispatched candidate's round when it is adopted; otherwise it
    keeps its outcome and its reason says why there is no dispatch."""
    e = r.evaluation
    if r.candidate is None or e is None or e.profile is None or best_eval.profile is None or cancel.is_set():
        return
    best_spec, rw_spec = spec_in(source.parse(best_text), kernel), spec_in(source.parse(r.candidate), kernel)
    if best_spec is None or rw_spec is None:
        return
    sp = split(best_spec, best_eval.profile, e.profile, others=best_spec.launch == rw_spec.launch)
    if sp is None:
        r.reason += ("; no size dispatch: the sizes where it wins and loses are not separated by the grid's size"
                     + ("" if best_spec.launch != rw_spec.launch else ", a size parameter of the kernel or the block's threads"))
        return
    ladder = [dict(t.sizes) for t in e.profile.sizes]
    from .offline import TRANSFORMS
    t = TRANSFORMS.get(r.plan.idea) if r.plan is not None else None
    any_grid = bool(getattr(t, "any_grid", False))
    extra: dict[str, int] | None = None
    try:
        extra, _ = gate_size(best_spec, sp, best_spec.cases(), ladder)
        text, why = build(best_text, r.candidate, kernel, sp, best_spec.cases(), ladder, any_grid)
    except Exception as err:  # noqa: BLE001 - a text the construction did not foresee ends the idea, not the run
        text, why = None, f"the construction failed ({err.__class__.__name__}: {err})"
    if text is None:
        r.reason += f"; no size dispatch: {why}"
        return
    try:
        d = ev(text)
    except InfrastructureError as err:
        r.reason += f"; size dispatch not evaluated: {err.message}"
        return
    trial = Round(r.index, r.plan, r.base_hash, text, source_hash(text), d, batch=r.batch)
    judge(trial, Attempt(text, d))
    if trial.outcome == "slower at a size" and isinstance(ev, CachedEvaluate):
        # Below its threshold the dispatch runs the previous version's code: a loss there is the
        # branch's cost or the timer's noise at µs sizes (on an H200 merge_attn_states' dispatch
        # measured 0.7%, 3.0% and 3.8% slower at 5-6 µs in three runs). Refused only if it repeats.
        first = trial.reason
        try:
            d = ev.again(text)
        except InfrastructureError as err:
            r.reason += f"; size dispatch not measured again: {err.message}"
            return
        trial = Round(r.index, r.plan, r.base_hash, text, source_hash(text), d, batch=r.batch)
        judge(trial, Attempt(text, d))
        trial.reason += f" (measured twice; the first time: {first})" if trial.adopted else \
            " (and again when measured a second time)"
    if ONE_BODY in text:   # say so: below the threshold the rewrite's body runs too, on the previous grid
        what = (sp.describe().replace("the rewrite from", "the rewrite's grid from", 1)
                .replace("the previous version", "the previous grid", 1) + ", the rewrite's body on both")
    else:
        what = sp.describe()
    if not trial.adopted:
        r.reason += f"; size dispatch ({what}) not adopted: {trial.outcome}, {trial.reason}"
        return
    r.candidate, r.candidate_hash, r.evaluation = text, trial.candidate_hash, d
    if r.plan is not None:   # replayable: tuning and the memory make the same kernel from the chain
        r.plan = replace(r.plan, params={**r.plan.params, KEY: {"threshold": sp.threshold, "upper": sp.upper,
                                                                 **({"by": sp.by} if sp.by != "blocks" else {}),
                                                                 **({"param": sp.param} if sp.param else {}),
                                                                 **({"gate_size": extra} if extra else {}),
                                                                 **({"any_grid": True} if any_grid else {})}})
    r.outcome = "adopted"
    r.reason = f"{DISPATCHED}{what}): {trial.reason}"
    r.changes = list(r.changes) + [f"kept beside the previous version, selected by size: {what}"] + \
        ([f"the spec's [sizes] gained {extra} so that the gate checks both versions"] if extra else [])
