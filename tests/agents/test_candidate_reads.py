"""A candidate is read once, where its rewrite is made (issue 28, "one candidate value"): an
offline optimize of an example parses and loads specs no more often per evaluation than the
ceiling below (benchmarks/candidate_parses.py measures the same; it was 12.6-17.2 whole-text
parses and 4.8-5.4 spec loads per evaluation when every hop read the text again).

The floor, per evaluation: the candidate's one read (its tree, the model built from it, its
spec); beside that, per run, the original's read, and text that is not a candidate: a rewrite
that writes no comment of its own is parsed once more to place its note, the project's helpers are
looked up in the file's text, the readable form of the best takes a parse per pass.
"""
from __future__ import annotations

import collections
import tempfile
from pathlib import Path

import pytest

from astra_cuda import agents
from astra_cuda.evaluation import Check, Evaluation, OnCandidates, ProfileSummary, SizeTiming
from astra_cuda.model import launch_change, parse_time, source, spec as spec_mod
from astra_cuda.model.candidate import Candidate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS_PER_EVALUATION = 1.0   # a source model and its spec: the candidate's one read
SPEC_LOADS_PER_EVALUATION = 1.0
TREES_PER_EVALUATION = 3.0   # whole-text tree-sitter parses, the candidates' own included (see above)


def _counted_run(monkeypatch, name: str, kernel: str, rounds: int):
    text = (EXAMPLES / f"{name}.cu").read_text()
    sp = launch_change.spec_in(source.parse(text), kernel)
    counts: collections.Counter = collections.Counter()
    parse, load, tree = source.parse_with_tree, spec_mod.load, parse_time.Parser.parse

    def counted_parse(*a, **kw):
        counts["models"] += 1
        return parse(*a, **kw)

    def counted_load(*a, **kw):
        counts["spec_loads"] += 1
        return load(*a, **kw)

    def counted_tree(self, data, *a, **kw):   # every parse, whoever holds the parser (source.parser() is one)
        if len(data) > 200:   # whole texts, not the snippets (one expression) some checks parse
            counts["trees"] += 1
        return tree(self, data, *a, **kw)

    monkeypatch.setattr(source, "parse_with_tree", counted_parse)
    monkeypatch.setattr(spec_mod, "load", counted_load)
    monkeypatch.setattr(parse_time.Parser, "parse", counted_tree)
    seen: list[Candidate] = []

    def evaluate(c: Candidate) -> Evaluation:   # what api.optimize does before a worker runs it
        seen.append(c)
        launch, problem = launch_change.launch(c, original, ref_spec)
        assert not problem and launch is not None
        us = 100.0 - len(seen) + 1
        return Evaluation(Check(True, "passed", "", 10, "passed"),
                          ProfileSummary((SizeTiming({"n": 1 << 20}, 100.0, us, 0.4),), "memory"))

    original = Candidate.of(text, kernel)   # api reads the file once: the reference and the original
    ref_spec = launch_change.reference_spec(sp, original.model, kernel, (original.spec,))
    with tempfile.TemporaryDirectory() as runs:
        r = agents.optimize(original, name, kernel, OnCandidates(evaluate), rounds=rounds, spec=sp, gpu="stand-in",
                            runs_dir=runs)
    return r, seen, counts


@pytest.mark.parametrize("name,kernel,rounds", [("silu_and_mul", "silu_and_mul", 3),
                                                ("merge_attn_states", "merge_attn_states", 3)])
def test_a_candidate_is_read_once_where_it_is_made(monkeypatch, name, kernel, rounds):
    r, seen, counts = _counted_run(monkeypatch, name, kernel, rounds)
    n = len(seen)
    assert n >= 4 and r.improved and all(isinstance(c, Candidate) for c in seen)
    assert sum(x.adopted for x in r.rounds) >= 2, [(x.plan.idea if x.plan else None, x.outcome) for x in r.rounds]
    per = {k: counts[k] / n for k in ("models", "spec_loads", "trees")}
    assert per["models"] <= MODELS_PER_EVALUATION, (per, counts, n)
    assert per["spec_loads"] <= SPEC_LOADS_PER_EVALUATION, (per, counts, n)
    assert per["trees"] <= TREES_PER_EVALUATION, (per, counts, n)


class _AtTheGate(Exception):
    pass


@pytest.mark.parametrize("sent", [True, False])
def test_the_worker_cuts_the_candidate_it_is_sent_without_parsing_it(monkeypatch, sent):
    """The worker's side of an evaluation (`EvaluateJob`, pickled as an executor sends it): with the
    candidate's model in the job, as `api.optimize` sends it, the candidate's text is not parsed
    there (its unit is cut from that model; the reference is read once per evaluator, before);
    without it — the control — the worker parses it once."""
    import dataclasses
    import pickle
    import types

    from astra_cuda import gate
    from astra_cuda.execution import jobs

    text = (EXAMPLES / "silu_and_mul.cu").read_text()
    candidate = Candidate.of(text.replace("silu(x) * y", "silu(x) * y * 1.0f"), "silu_and_mul")
    assert candidate.text != text and candidate.spec is not None
    job = jobs.EvaluateJob("cpu", "silu_and_mul.cu", "silu_and_mul", candidate.spec, text, "silu_and_mul")
    monkeypatch.setattr(jobs, "backend", lambda name: types.SimpleNamespace(name=name))   # the gate is stood in for
    monkeypatch.setattr(jobs, "rounding_backend", lambda _name: None)
    units = []

    def at_the_gate(reference, unit, *a, **kw):
        units.append(unit)
        raise _AtTheGate

    monkeypatch.setattr(gate, "check", at_the_gate)
    jobs._evaluators.clear()
    with pytest.raises(_AtTheGate):   # the evaluator made, the reference read: once per worker
        dataclasses.replace(job, text=text).run()
    parsed: list[str] = []
    parse = source.parse_with_tree
    monkeypatch.setattr(source, "parse_with_tree", lambda t, *a, **kw: parsed.append(t) or parse(t, *a, **kw))
    sent_job = dataclasses.replace(job, text=candidate.text, model=candidate.model if sent else None)
    with pytest.raises(_AtTheGate):
        pickle.loads(pickle.dumps(sent_job)).run()
    jobs._evaluators.clear()
    assert parsed.count(candidate.text) == (0 if sent else 1), len(parsed)
    assert units[-1].kernel == "silu_and_mul" and "y * 1.0f" in units[-1].source   # the candidate's unit
