"""The CLI on good and bad input: exit codes, clear messages, no tracebacks, nothing written."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "silu_and_mul.cu"


def astra(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    return subprocess.run([sys.executable, "-m", "astra_cuda", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_kernels_json_lists_kernel_and_params():
    r = astra("kernels", EXAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    (k,) = data["kernels"]
    assert k["name"] == "silu_and_mul" and k["spec"] == "ok"
    assert [p["name"] for p in k["params"]] == ["out", "input", "d"]
    assert k["params"][1]["const"] and k["params"][1]["pointer"]


@pytest.mark.parametrize("content,needle", [
    (os.urandom(4096) + b"\x00", "binary file"),
    (b"__global__ void k(float* x) { x[0] = 1.0f; } // caf\xe9\n", "not UTF-8"),
    (b"int main() { return 0; }\n", "no __global__ kernels"),
    (b"# A markdown file\n\nNot CUDA at all.\n", "no __global__ kernels"),
])
def test_bad_input_exits_2_without_traceback(tmp_path, content, needle):
    f = tmp_path / "bad.cu"
    f.write_bytes(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    for verb in (["kernels"], ["check", "--backend", "cpu"], ["profile"], ["spec", "--kernel", "k"]):
        r = astra(verb[0], f, *verb[1:])
        assert r.returncode == 2, (verb, r.stdout, r.stderr)
        assert needle in r.stderr or "no __global__ kernel named" in r.stderr, (verb, r.stderr)
        assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_huge_file(tmp_path):
    f = tmp_path / "huge.cu"
    f.write_bytes(b"// filler\n" * 1_100_000)  # ~11 MB
    r = astra("kernels", f)
    assert r.returncode == 2 and "too large" in r.stderr and "Traceback" not in r.stderr


def test_missing_file_and_usage():
    r = astra("kernels", "/nonexistent/file.cu")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = astra("frobnicate")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = astra("spec", EXAMPLE)  # --kernel missing
    assert r.returncode == 2


def test_spec_error_reported_with_location(tmp_path):
    text = EXAMPLE.read_text().replace('shape = ["num_tokens", "2 * d"]', 'shape = ["num_tokens", "2 * width"]')
    f = tmp_path / "s.cu"
    f.write_text(text)
    r = astra("check", f, "--backend", "cpu")
    assert r.returncode == 2
    line, col = next((i, l.index('"2 * width"') + 1) for i, l in enumerate(text.splitlines(), 1)
                     if l.startswith("input ="))
    assert f"s.cu:{line}:{col}:" in r.stderr and "unknown size(s) width" in r.stderr   # at the expression
    assert not (tmp_path / ".astra").exists()


def test_spec_proposal_for_kernel_without_spec(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text("__global__ void scale(float* out, const float* in, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 2.f * in[i];\n}\n"
                 "void run(float* o, const float* i, int n) { scale<<<(n + 255) / 256, 256>>>(o, i, n); }\n")
    r = astra("spec", f, "--kernel", "scale")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("/* @astra") and 'grid = ["(n + 255) / 256"]' in r.stdout
    assert 'out = { type = "float", shape = ["n"], output = true }' in r.stdout


def test_static_check_reports_planted_compile_error_at_its_line(tmp_path):
    text = EXAMPLE.read_text().replace("const float y =", "const float y = undefined_thing +")
    f = tmp_path / "bad.cu"
    f.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "undefined_thing" in l)
    r = astra("check", f, "--backend", "static")
    assert r.returncode == 1, r.stderr
    assert f"bad.cu:{line}:" in r.stdout and "undefined_thing" in r.stdout
    r = astra("check", EXAMPLE, "--backend", "static", "--json")
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["passed"] and data["resources"]["silu_and_mul"]["registers"] > 0
