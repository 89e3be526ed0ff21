"""The bundled launcher's `--cli` mode: what "Astra: Install the astra command" puts on PATH (a
script that execs `python astra_launcher.py --cli "$@"`) is the real `astra` command."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "bundled" / "tool" / "astra_launcher.py"


def test_the_launcher_runs_the_cli_with_its_arguments_and_exit_code(tmp_path):
    # a copy with no bundle beside it (a checkout's bundled/libs may be another platform's)
    launcher = tmp_path / "bundled" / "tool" / "astra_launcher.py"
    launcher.parent.mkdir(parents=True)
    launcher.write_text(LAUNCHER.read_text())
    script = tmp_path / "astra"
    # as the extension writes it (client/src/commands.ts installCli), with this interpreter
    script.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{launcher}' --cli \"$@\"\n")
    script.chmod(0o755)
    env = dict(os.environ, ASTRA_IMPORT_STRATEGY="fromEnvironment")   # no bundle in a checkout
    v = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert v.returncode == 0 and v.stdout.startswith("astra "), v
    k = subprocess.run([str(script), "kernels", str(ROOT / "examples" / "silu_and_mul.cu")], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert k.returncode == 0 and "silu_and_mul" in k.stdout, k
    bad = subprocess.run([str(script), "kernels", str(tmp_path / "missing.cu")], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2, bad
