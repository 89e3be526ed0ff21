"""The CLI's contracts: JSON objects (errors included), exit codes that match the outcome, 1-based
lines and columns, SARIF, a closed pipe, --version, help for every flag, names never cut."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from astra_cuda import __version__, cli
from astra_cuda.evaluation import Check, Evaluation
from astra_cuda.execution.jobs import BackendsJob, BackendStatus, EvaluateJob

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "silu_and_mul.cu"


def run(capsys, *args):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"astra {__version__}"


def test_every_flag_has_help():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    missing = [f"{verb} {a.option_strings or a.dest}" for verb, p in sub.choices.items() for a in p._actions
               if a.help is None]
    assert not missing, missing


def test_errors_are_json_with_json(capsys, tmp_path):
    code, out, err = run(capsys, "kernels", tmp_path / "missing.cu", "--json")
    assert code == 2 and "no such file" in err
    assert json.loads(out) == {"error": {"kind": "bad_input", "message": f"{tmp_path / 'missing.cu'}: no such file",
                                         "file": str(tmp_path / "missing.cu")}, "exit_code": 2}
    code, out, _ = run(capsys, "check", EXAMPLE, "--json", "--backend", "tpu")
    assert code == 2 and json.loads(out)["error"]["kind"] == "usage"


def test_spec_errors_are_json_at_1_based_lines(capsys, tmp_path):
    text = EXAMPLE.read_text().replace('shape = ["num_tokens", "2 * d"]', 'shape = ["num_tokens", "2 * width"]')
    f = tmp_path / "s.cu"
    f.write_text(text)
    line, col = next((i, l.index('"2 * width"') + 1) for i, l in enumerate(text.splitlines(), 1)
                     if l.startswith("input ="))
    code, out, err = run(capsys, "check", f, "--backend", "cpu", "--json")
    assert code == 2 and f"s.cu:{line}:{col}:" in err
    e = json.loads(out)["error"]
    assert e["kind"] == "spec" and e["line"] == line and e["col"] == col   # the expression itself
    assert e["diagnostics"][0]["line"] == line and "width" in e["diagnostics"][0]["message"]


def test_kernel_ranges_are_1_based(capsys):
    code, out, _ = run(capsys, "kernels", EXAMPLE, "--json")
    k = json.loads(out)["kernels"][0]
    line = next(i for i, l in enumerate(EXAMPLE.read_text().splitlines(), 1) if "void silu_and_mul(" in l)
    assert code == 0 and k["name_range"]["start"][0] == line


def test_static_check_as_sarif(capsys, tmp_path):
    text = EXAMPLE.read_text().replace("const float y =", "const float y = undefined_thing +")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "src" / "bad.cu"
    f.parent.mkdir()
    f.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "undefined_thing" in l)
    code, out, _ = run(capsys, "check", f, "--backend", "static", "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    assert log["version"] == "2.1.0"
    (result,) = [r for r in log["runs"][0]["results"] if r["level"] == "error"]
    loc = result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "src/bad.cu"
    assert loc["region"]["startLine"] == line and loc["region"]["startColumn"] >= 1
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == "compile"


def test_a_closed_pipe_is_no_traceback(tmp_path):
    f = tmp_path / "many.cu"
    f.write_text("".join(f"__global__ void kernel_{i}(float* out, const float* in, int n) "
                         f"{{ int j = threadIdx.x; if (j < n) out[j] = in[j]; }}\n" for i in range(400)))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    p = subprocess.Popen([sys.executable, "-m", "astra_cuda", "kernels", str(f), "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    p.stdout.readline()
    p.stdout.close()   # like `| head -1`
    _, err = p.communicate(timeout=120)
    assert p.returncode == 141 and b"Traceback" not in err, err.decode()


def test_long_kernel_names_are_never_cut(tmp_path):
    name = "gelu_forward_kernel_with_a_very_long_descriptive_name_version_number_two_and_more"
    f = tmp_path / "long.cu"
    f.write_text(f"__global__ void {name}(float* out, const float* in, int n) {{ out[0] = in[0]; }}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"), COLUMNS="60")
    for extra in ([], ["--wide"]):
        out = subprocess.run([sys.executable, "-m", "astra_cuda", "kernels", str(f), *extra], capture_output=True,
                             text=True, env=env, timeout=60).stdout
        first_column = "".join(row.split("│")[1].strip() for row in out.splitlines() if row.startswith("│"))
        assert first_column == name, out
        assert (name in out) == bool(extra)   # --wide keeps it on one line


class FailingOriginal:
    """The worker's stand-in: the original kernel fails the gate."""

    def __call__(self, job, **_):
        if isinstance(job, BackendsJob):
            return {"cpu": BackendStatus(True), "gpu": BackendStatus(False, "no GPU in tests")}
        assert isinstance(job, EvaluateJob), job
        return Evaluation(Check(False, "silu_and_mul: FAILED compile: 'x' is undefined", "", 0, "failed"))


def test_optimize_exits_1_when_the_original_fails_the_gate(capsys, tmp_path, monkeypatch):
    import astra_cuda.execution.worker
    (tmp_path / ".git").mkdir()
    f = tmp_path / "silu.cu"
    f.write_text(EXAMPLE.read_text())
    monkeypatch.setattr(astra_cuda.execution.worker, "run", FailingOriginal())
    code, out, err = run(capsys, "optimize", f, "--backend", "cpu", "--llm", "offline", "--json")
    assert code == 1
    assert "does not pass the gate" in json.loads(out)["error"] and "does not pass the gate" in err


@pytest.mark.parametrize("argv", [["check", "--help"], ["--help"]])
def test_help_exits_0(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "usage: astra" in out
