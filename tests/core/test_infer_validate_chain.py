"""The validator's chain of drafts (`infer.validate.first_that_runs`), with the runs stood in: two
runs that disagree after the null-and-equal-sizes draft count as an out-of-bounds access that did
not fault, so the draft with whole tiles of the block too is tried. TGI's `column_remap_kernel` on
an H200: its first draft wrote past `x_new` into `x_map` (an input modified), the next one's runs
disagreed, and without this the first draft — the one that wrote past its buffer — was proposed."""
from astra_cuda.infer.draft import Proposal
from astra_cuda.infer.validate import Trial, first_that_runs


def _chain(second_fails: tuple[str, ...]) -> tuple[list[dict[str, str]], Proposal]:
    asked: list[dict[str, str]] = []

    def redo(changes: dict[str, str]) -> Proposal:
        asked.append(dict(changes))
        return Proposal(comment="/* " + ",".join(f"{k}={v}" for k, v in sorted(changes.items())) + " */")

    def trial(p: Proposal) -> Trial:
        if p.comment == "/* first */":
            return Trial(True, False, "x_map modified", ("inputs_unchanged",))
        if "tiles=block" in p.comment:
            return Trial(True, True, "ran cleanly")
        return Trial(True, False, "second draft failed", second_fails)

    return asked, first_that_runs(Proposal(comment="/* first */"), trial, redo, "gpu")


def test_runs_that_disagree_after_the_null_draft_try_whole_tiles_too():
    asked, chosen = _chain(("determinism",))
    assert {"optional": "null", "sizes": "equal", "tiles": "block"} in asked
    assert "tiles=block" in chosen.comment and chosen.notes[0].startswith("ran before it was proposed")


def test_a_failure_that_is_no_access_past_a_buffer_does_not():
    asked, chosen = _chain(("compare",))
    assert {"optional": "null", "sizes": "equal", "tiles": "block"} not in asked
    assert chosen.comment == "/* first */" and chosen.notes[0].startswith("RAN and FAILED")
