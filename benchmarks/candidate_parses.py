"""How often the caller side re-derives a candidate: source parses and spec loads per evaluation
during an offline `optimize` of each example (issue 28, "one candidate value").

    .venv/bin/python benchmarks/candidate_parses.py [--rounds 3] [--out results.json]

The planner, the coder, the adoption of a best and the tuning stage run as in `astra optimize`
(`agents.optimize`); the evaluation does what `api.optimize`'s does on the caller side — it takes
the candidate read (`OnCandidates`) and resolves its launch against the reference
(`launch_change.launch`) — then the worker's side as `EvaluateJob` runs it (`execution.evaluator`:
the reference read once per run, the candidate's unit cut from the model sent with the job) up to
the gate, which is stood in for — and passes every candidate, making each a little faster. Counted
on both sides (`caller_`/`worker_` split them): source models built
(`model.source.parse_with_tree`, which `parse` calls), tree-sitter parses of a whole text (any over
200 bytes, models' included; snippets such as one expression are left out) and spec loads
(`model.spec.load`), with the functions that asked most. `tests/agents/test_candidate_reads.py`
holds the per-evaluation counts to their ceiling.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from astra_cuda import agents, gate  # noqa: E402
from astra_cuda.execution import evaluator as evaluator_mod  # noqa: E402
from astra_cuda.evaluation import Check, Evaluation, OnCandidates, ProfileSummary, SizeTiming  # noqa: E402
from astra_cuda.model import launch_change, parse_time, source, spec as spec_mod  # noqa: E402
from astra_cuda.model.candidate import Candidate  # noqa: E402

EXAMPLES = [("silu_and_mul", "silu_and_mul"), ("fused_add_rmsnorm", "fused_add_rmsnorm_kernel"),
            ("merge_attn_states", "merge_attn_states")]


class _AtTheGate(Exception):
    """The worker's evaluate reached the gate, its units cut (where this count stops)."""


def _at_the_gate(*_a, **_kw):
    raise _AtTheGate


def count(kernel: str, path: Path, rounds: int, send_model: bool = True) -> dict:
    """`send_model`: the job carries the candidate's model, as `api.optimize` sends it (False: the
    worker parses the text itself, as before issue 28's worker change)."""
    text = path.read_text()
    model = source.parse(text)
    k = model.kernel(kernel)
    assert k is not None, kernel
    sp = spec_mod.load(k, model)
    counts: collections.Counter = collections.Counter()
    side = ["caller"]   # whose parses are being counted
    callers: collections.Counter = collections.Counter()
    parse, load, tree = source.parse_with_tree, spec_mod.load, parse_time.Parser.parse

    def caller(depth: int) -> str:
        f = traceback.extract_stack()[-depth]
        return f"{f.filename.split('astra_cuda/')[-1]}:{f.name}"

    def counted_parse(*a, **kw):
        counts["parses"] += 1
        counts[f"{side[0]}_parses"] += 1
        # parse() -> parse_with_tree(): name whoever called parse() (or parse_with_tree itself)
        callers["parse " + caller(4 if traceback.extract_stack()[-2].name == "parse" else 3)] += 1
        return parse(*a, **kw)

    def counted_load(*a, **kw):
        counts["spec_loads"] += 1
        counts[f"{side[0]}_spec_loads"] += 1
        callers["load " + caller(4 if traceback.extract_stack()[-2].name == "spec_in" else 3)] += 1
        return load(*a, **kw)

    def counted_tree(self, data, *a, **kw):   # every parse, whoever holds the parser (source.parser() is one)
        if len(data) > 200:
            counts["tree_parses"] += 1
            counts[f"{side[0]}_tree_parses"] += 1
            if traceback.extract_stack()[-2].name != "parse_with_tree":
                callers["tree " + caller(3)] += 1
        return tree(self, data, *a, **kw)

    evaluations = [0]

    def evaluate(candidate: Candidate) -> Evaluation:
        evaluations[0] += 1
        launch, problem = launch_change.launch(candidate, reference, ref_spec)   # as api.optimize does
        if problem:
            return Evaluation(Check(False, problem, problem, 0, "static"))
        side[0] = "worker"
        try:
            on_worker[0](candidate.text, launch, False, False, candidate.model if send_model else None)
        except _AtTheGate:
            pass
        finally:
            side[0] = "caller"
        us = 100.0 if evaluations[0] == 1 else 100.0 - evaluations[0]
        return Evaluation(Check(True, "passed", "", 10, "passed"),
                          ProfileSummary((SizeTiming({"n": 1 << 20}, 100.0, us, 0.4),), "memory"))

    source.parse_with_tree, spec_mod.load, parse_time.Parser.parse = counted_parse, counted_load, counted_tree
    check, gate.check = gate.check, _at_the_gate
    try:
        side[0] = "worker"   # the worker's evaluator, made once per run (EvaluateJob keeps it): the reference's read
        on_worker = [evaluator_mod.local_evaluator(str(path), kernel, sp, None, text)]   # type: ignore[arg-type]
        side[0] = "caller"
        reference = Candidate.of(text, kernel)   # api.optimize reads the file once: original and reference
        ref_spec = launch_change.reference_spec(sp, reference.model, kernel, (reference.spec,))
        with tempfile.TemporaryDirectory() as runs:
            agents.optimize(reference, str(path), kernel, OnCandidates(evaluate), rounds=rounds, spec=sp,
                            gpu="stand-in", runs_dir=runs)
    finally:
        source.parse_with_tree, spec_mod.load, parse_time.Parser.parse = parse, load, tree
        gate.check = check
    n = max(1, evaluations[0])
    per = {f"{who}{what}_per_evaluation": round(counts[f"{who}{what}"] / n, 2)
           for who in ("", "caller_", "worker_") for what in ("parses", "tree_parses", "spec_loads")}
    return {"evaluations": evaluations[0], **counts, **per,
            "top_callers": dict(callers.most_common(12))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    out = {name: count(kernel, ROOT / "examples" / f"{name}.cu", a.rounds) for name, kernel in EXAMPLES}
    for name, r in out.items():
        print(f"{name}: {r['evaluations']} evaluations, {r['parses']} source models, {r['tree_parses']} whole-text "
              f"tree-sitter parses, {r['spec_loads']} spec loads (per evaluation: {r['parses_per_evaluation']}, "
              f"{r['tree_parses_per_evaluation']}, {r['spec_loads_per_evaluation']}; worker side "
              f"{r['worker_parses_per_evaluation']}, {r['worker_tree_parses_per_evaluation']}, "
              f"{r['worker_spec_loads_per_evaluation']})")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
