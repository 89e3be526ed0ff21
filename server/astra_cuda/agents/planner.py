"""Planning agents: the offline planner (rules over the profile and the history) and the LLM
planner (prompts/planner.*.md). Both answer with one concrete Plan, or None when nothing is left."""
from __future__ import annotations

from .llm import LLMClient, load_prompt
from .offline import TRANSFORMS
from .records import Plan, Usage
from .situation import Situation

# The offline ideas by what they change. Structure first: they choose how threads map to the data
# (and may change the launch), and the other ideas size themselves to that.
STRUCTURE = ["block_atomic", "privatize", "transpose", "rows", "pack_rows", "coarsen", "launch_shape", "widen_block"]
MEMORY = ["unit_stride", "vectorize", "vectorize64", "vectorize32", "row_cache", "unswitch", "lane_groups", "pack_stores", "unroll_vector", "batch_loads", "restrict_ldg"]
INSTRUCTIONS = ["hoist", "warp_reduce", "fast_math", "unroll"]
NEAR_CEILING = 0.90        # of the copy ceiling: moving the data cannot get much faster
LOW_OCCUPANCY = 0.25       # theoretical occupancy below this: too few threads resident


def ranked_ideas(s: Situation) -> list[tuple[str, str]]:
    """Every offline idea in the order the measured profile suggests, each with the reason for its
    place; ideas the profile rules out carry a reason starting with 'skipped:'."""
    prof = s.best_eval.profile if s.best_eval.measured else None
    if prof is None:
        why = "speed is not measured here: the order that suits memory-bound kernels"
        order = STRUCTURE + ["unit_stride", "hoist", "vectorize", "vectorize64", "vectorize32", "row_cache", "unswitch", "lane_groups", "pack_stores", "warp_reduce",
                             "fast_math", "unroll_vector", "batch_loads", "restrict_ldg", "unroll"]
        return [(i, why) for i in order]
    share = prof.best_copy_share
    at = f"{share:.0%} of the copy ceiling" if share is not None else "an unknown share of the copy ceiling"
    occ = prof.occupancy
    if prof.bottleneck == "compute":
        why = f"compute-bound at {at}: fewer instructions first"
        return [(i, why) for i in INSTRUCTIONS] + [(i, why) for i in STRUCTURE + MEMORY]
    if share is not None and share >= NEAR_CEILING:
        skip = f"skipped: at {at} moving the data is near its limit; only instruction-level ideas are left"
        return [(i, f"at {at}: only instruction-level ideas are left") for i in INSTRUCTIONS] + \
               [(i, skip) for i in STRUCTURE + MEMORY]
    if prof.bottleneck == "latency" or (occ is not None and occ < LOW_OCCUPANCY):
        why = (f"latency-bound at {at}" + (f", {occ:.0%} theoretical occupancy" if occ is not None else "") +
               ": more work in flight first (launch shape, threads per row), then wider accesses")
        order = ["block_atomic", "privatize", "transpose", "launch_shape", "widen_block", "rows", "pack_rows", "coarsen", "unit_stride", "vectorize", "vectorize64",
                 "vectorize32", "row_cache", "unswitch", "lane_groups", "pack_stores", "batch_loads", "hoist", "warp_reduce", "fast_math", "unroll_vector", "restrict_ldg", "unroll"]
        return [(i, why) for i in order]
    why = f"memory-bound at {at}: how threads map to the data, then wider accesses, then leaner loops"
    order = STRUCTURE + ["unit_stride", "hoist", "vectorize", "vectorize64", "vectorize32", "row_cache", "unswitch", "lane_groups", "pack_stores", "warp_reduce",
                         "fast_math", "unroll_vector", "batch_loads", "restrict_ldg", "unroll"]
    return [(i, why) for i in order]


class OfflinePlanner:
    """Picks the first applicable transformation, in the order the profile suggests, that has not
    been tried on the current best candidate; the plan says why, and why the ideas before it were
    passed over."""

    def __init__(self) -> None:
        self.passed_over: list[str] = []   # after a plan of None: every idea and why it did not fit

    def plan(self, s: Situation) -> tuple[Plan | None, Usage]:
        ranked = ranked_ideas(s)
        skipped = [f"{idea}: {why[len('skipped: '):]}" for idea, why in ranked if why.startswith("skipped:")]
        for idea, why in ranked:
            if why.startswith("skipped:"):
                continue
            if s.tried(idea):
                skipped.append(f"{idea}: tried on this version already")
                continue
            t = TRANSFORMS[idea]
            rw = t.apply(s.base, s.context)
            if rw is None:
                skipped.append(f"{idea}: its pattern is not in this version of the kernel")
                continue
            return Plan(idea, t.title, "; ".join(rw.changes), expected=t.expected, params=dict(rw.params),
                        why=why, skipped=skipped, rewrite=rw, rewrite_base=s.best_hash), Usage()
        self.passed_over = skipped
        return None, Usage()


def history_text(s: Situation) -> str:
    if not s.history:
        return "(no rounds yet)"
    lines = []
    for r in s.history:
        title = r.plan.title if r.plan else "(no plan)"
        sp = ""
        if r.evaluation is not None and r.evaluation.measured:
            sp = f", {r.evaluation.speedup:.3f}x vs baseline"
        lines.append(f"- round {r.index}: {title} -> {r.outcome}{sp}. {r.reason}".strip())
    return "\n".join(lines)


def profile_text(s: Situation) -> str:
    ev = s.best_eval
    if not ev.measured:
        out = ev.speed_note or "speed not measured (no GPU)"
        if ev.registers is not None:
            out += f"; {ev.registers} registers per thread"
        return out
    p = ev.profile
    lines = [f"geomean speedup of the current best vs the original: {p.geomean_speedup:.3f}x"]
    for t in p.sizes:
        share = f", {t.copy_share:.0%} of copy ceiling" if t.copy_share is not None else ""
        lines.append(f"- {t.sizes}: {t.candidate_us:.2f} us (original {t.baseline_us:.2f} us){share}")
    for k, v in (("bottleneck", p.bottleneck), ("registers", p.registers), ("occupancy", p.occupancy)):
        if v is not None:
            lines.append(f"{k}: {v:.0%}" if k == "occupancy" else f"{k}: {v}")
    if p.notes:
        lines.append(p.notes)
    return "\n".join(lines)


class LLMPlanner:
    """Asks the planning agent for one optimization; falls back to the offline planner's next
    idea when the model gives nothing usable (so a round is never wasted on a bad reply)."""

    def __init__(self, client: LLMClient, prompt_version: str = "v1"):
        self.client = client
        self.system = load_prompt(f"planner.system.{prompt_version}").template
        self.template = load_prompt(f"planner.user.{prompt_version}")
        self.fallback = OfflinePlanner()

    def plan(self, s: Situation) -> tuple[Plan | None, Usage]:
        from .coder import kernel_text
        user = self.template.safe_substitute(
            kernel_name=s.kernel, code=kernel_text(s.base, s.kernel), sizes=s.sizes or "(not given)",
            profile=profile_text(s), gpu=s.gpu or "no GPU here: speed is not measured, only correctness",
            history=history_text(s))
        usage = Usage()
        for attempt in range(2):
            reply = self.client.chat(self.system, user if attempt == 0 else
                                     user + "\n\nAnswer with ONE concrete optimization in at most 12 lines, "
                                            "starting with a line `Plan: <title>`.")
            usage.add(reply.usage)
            text = reply.text.strip() if reply.ok else ""
            if text and reply.finish_reason != "length" and len(text) > 10:
                title = _title(text)
                expected = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                                 if ln.lower().lstrip("-* ").startswith("expected")), "")
                return Plan("llm", title, text[:4000], expected=expected, source="llm"), usage
        plan, _ = self.fallback.plan(s)
        if plan is not None:
            plan.source = "offline-fallback"
        return plan, usage


def _title(text: str) -> str:
    for ln in text.splitlines():
        ln = ln.strip().lstrip("#*- ").strip()
        if ln.lower().startswith("plan:"):
            ln = ln[5:].strip()
        if ln:
            return ln[:120]
    return "optimization"
