import json

from astra_cuda.gate.verdict import CaseInfo, CheckResult, Coverage, Failure, Verdict


def sample():
    v = Verdict(kernel="k", backend="cpu", status="failed", nonce=7,
                checks=[CheckResult("compare", False, "3 of 4 passed")],
                coverage=Coverage(cases=4, sizes=3, seeds=[1, 2], distributions=["spec"], held_out=2))
    v.failures.append(Failure("compare", "`out`: 1 of 8 elements differ", CaseInfo({"n": 8}, "spec", 1, True, "spec"),
                              output="out", index=[3], bad=1, total=8, expected=1.0, got=2.0))
    v.failures.append(Failure("poison", "`out`: never written", CaseInfo({"n": 33}, "wide", 2, False, "edge")))
    return v


def test_round_trip_json():
    v = sample()
    d = json.loads(v.to_json())
    assert d["passed"] is False and d["summary"].startswith("k: FAILED")
    assert Verdict.from_json(v.to_json()) == v


def test_visible_feedback_hides_held_out_details():
    fb = sample().visible_feedback()
    assert "1 of 8 elements differ" in fb and "n=8" in fb
    assert "n=33" not in fb and "never written" not in fb
    assert "1 held-out case(s) failed the poison check" in fb


def test_passed_summary():
    v = Verdict(kernel="k", backend="gpu", status="passed", coverage=Coverage(cases=10, sizes=5, seeds=[1, 2],
                                                                             distributions=["spec", "wide"]))
    assert v.passed and "passed" in v.summary and "10 cases" in v.summary
    v.compared = False
    assert "no reference" in v.summary
