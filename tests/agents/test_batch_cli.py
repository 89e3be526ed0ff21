"""`astra optimize PATH…` (batches) and the executor in the JSON output, through the CLI in this
process with the worker replaced by the counting fake of test_resume (no kernel runs)."""
import json
import shutil
from pathlib import Path

import pytest


from agent_helpers import ROOT
from test_resume import FakeWorker, astra


@pytest.fixture
def ws(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "examples" / "notes.txt").write_text("not CUDA")
    fake = FakeWorker("")
    import astra_cuda.execution.worker
    monkeypatch.setattr(astra_cuda.execution.worker, "run", fake)
    monkeypatch.chdir(tmp_path)
    return tmp_path, fake


def test_batch_over_a_folder_json_summary_report_and_resume(ws, capsys):
    root, fake = ws
    code, out, err = astra(capsys, "optimize", "examples", "--backend", "cpu", "--rounds", "1", "--json",
                           "--report", root / "rep")
    assert code == 0, err
    r = json.loads(out)
    assert r["executor"]["kind"] == "local"
    assert [s["kernel"] for s in r["summary"]] == ["fused_add_rmsnorm_kernel", "merge_attn_states", "silu_and_mul"]
    assert all(s["state"] == "done" and s["improved"] and s["rounds"] == 1 for s in r["summary"])
    assert len(fake.evaluated) == 9                         # each original, one candidate and its readable form
    page = Path(r["report"]).read_text()
    assert page.count("<h2 id='run-") == 3 and "this machine" in page
    fake.evaluated.clear()
    code, out, err = astra(capsys, "optimize", "examples", "--backend", "cpu", "--resume", "last")
    assert code == 0, err
    assert fake.evaluated == []                             # finished runs are only reported
    assert r["batch"] in out and "silu_and_mul" in out


def test_batch_of_named_files_with_kernel_filter(ws, capsys):
    root, fake = ws
    code, out, err = astra(capsys, "optimize", "examples/silu_and_mul.cu", "examples/merge_attn_states.cu",
                           "--kernel", "silu_and_mul", "--backend", "cpu", "--rounds", "1", "--json")
    assert code == 0, err
    assert [s["kernel"] for s in json.loads(out)["summary"]] == ["silu_and_mul"]


def test_single_run_json_names_the_executor(ws, capsys):
    root, fake = ws
    code, out, err = astra(capsys, "optimize", "examples/silu_and_mul.cu", "--backend", "cpu", "--rounds", "1",
                           "--candidates", "2", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["executor"]["kind"] == "local" and r["executor"]["workers"] >= 1
    assert [x["batch"] for x in r["rounds"]] == [1, 1]      # two candidates in round 1
    assert sum(x["outcome"] == "adopted" for x in r["rounds"]) == 1


@pytest.mark.parametrize("args, message", [
    (["check", "examples/silu_and_mul.cu", "--cluster", "gpu-box:1"], "unknown cluster"),
    (["optimize", "examples/silu_and_mul.cu", "--candidates", "0"], "--candidates"),
    (["optimize", "nowhere/", "examples"], "no such file or folder"),
    (["optimize", "examples/silu_and_mul.cu", "examples/x.cu", "--list-runs"], "--list-runs takes one file"),
])
def test_bad_cluster_options_exit_2(ws, capsys, args, message):
    code, out, err = astra(capsys, *args)
    assert code == 2 and message in err
