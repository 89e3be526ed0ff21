"""A GPU that is visible but not used gets a way forward: the driver's CUDA version, the CuPy that is
(not) installed, and the one command that fixes it. The GPU is faked: an `nvidia-smi` script on
PATH and a /proc file; CuPy is absent here."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from astra_cuda import gpu_setup
from astra_cuda.execution import jobs
from astra_cuda.gpu_setup import Advice, Cupy, Driver

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "silu_and_mul.cu"

SMI = """#!/bin/sh
cat <<'EOF'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.14              Driver Version: 550.54.14      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
+-----------------------------------------------------------------------------------------+
EOF
"""
PROC = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:29 UTC 2025\n"


def fake_smi(tmp_path: Path, cuda: str = "12.4") -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    smi = d / "nvidia-smi"
    smi.write_text(SMI.replace("{cuda}", cuda))
    smi.chmod(0o755)
    return d


def test_no_gpu_no_advice(tmp_path):
    assert gpu_setup.driver(str(tmp_path / "none"), smi=None) is None
    assert gpu_setup.advise(None, Cupy(None), "no CuPy") is None


def test_driver_from_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path, "12.4")) + os.pathsep + os.environ["PATH"])
    assert gpu_setup.driver(str(tmp_path / "none")) == Driver("550.54.14", (12, 4))


def test_driver_from_proc_only_maps_the_version_to_cuda(tmp_path):
    proc = tmp_path / "version"
    proc.write_text(PROC)
    assert gpu_setup.driver(str(proc), smi=None) == Driver("580.65.06", (13, 0))


@pytest.mark.parametrize("drv,cupy,fix", [
    (Driver("550.54.14", (12, 4)), Cupy(None), "python3 -m pip install 'cupy-cuda12x[ctk]>=14'"),
    (Driver("580.65.06", (13, 0)), Cupy(None), "python3 -m pip install 'cupy-cuda13x[ctk]>=14'"),
    (Driver("590.1", (13, 1)), Cupy(None), "python3 -m pip install 'cupy-cuda13x[ctk]>=14'"),
    (Driver("550.54.14", (12, 4)), Cupy("cupy-cuda13x", "14.2.0"),
     "python3 -m pip uninstall -y cupy-cuda13x && python3 -m pip install 'cupy-cuda12x[ctk]>=14'"),
    (Driver("550.54.14", (12, 4)), Cupy("cupy-cuda12x", "14.2.0"), "python3 -m pip install 'cupy-cuda12x[ctk]>=14'"),
])
def test_the_fix_fits_the_driver(drv, cupy, fix):
    a = gpu_setup.advise(drv, cupy, "ImportError: no module named cupy", python="python3",
                         target=gpu_setup.Target("python3 -m pip"))
    assert a.fix == fix
    assert a.problem.startswith(f"a GPU is visible (NVIDIA driver {drv.version}, CUDA {drv.cuda[0]}.{drv.cuda[1]})")


def test_a_driver_too_old_says_update_it():
    a = gpu_setup.advise(Driver("470.1", (11, 4)), Cupy(None), "x", python="python3")
    assert a == Advice(a.problem, "") and "update the NVIDIA driver" in a.problem


def test_the_probe_reports_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path)) + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(gpu_setup, "PROC_VERSION", str(tmp_path / "none"))
    gpu = jobs.BackendsJob().run()["gpu"]   # CuPy is not installed in the test environment
    assert not gpu.available and gpu.setup_needed
    assert "CuPy is not installed" in gpu.reason
    assert gpu.fix == f"{sys.executable} -m pip install 'cupy-cuda12x[ctk]>=14'"


def test_astra_check_says_so(tmp_path):
    (tmp_path / ".git").mkdir()
    f = tmp_path / "silu.cu"
    f.write_text(EXAMPLE.read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"),
               PATH=str(fake_smi(tmp_path)) + os.pathsep + os.environ["PATH"])
    r = subprocess.run([sys.executable, "-m", "astra_cuda", "check", str(f), "--json"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    setup = json.loads(r.stdout)["gpu_setup"]
    assert "CuPy is not installed" in setup["problem"] and "cupy-cuda12x[ctk]" in setup["fix"]
    assert f"run `{setup['fix']}`" in r.stderr


def test_outside_its_own_venv_the_fix_installs_into_a_venv_astra_creates(tmp_path, monkeypatch):
    # The editor's bundled server on a system python3 (Debian 12's refuses pip: externally managed).
    monkeypatch.setattr(gpu_setup, "in_own_venv", lambda: False)
    monkeypatch.setenv("ASTRA_GPU_ENV", str(tmp_path / "gpu env"))
    env = shlex.quote(str(tmp_path / "gpu env"))
    a = gpu_setup.advise(Driver("550.54.14", (12, 4)), Cupy(None), "no cupy", python="/usr/bin/python3")
    assert a.fix == (f"/usr/bin/python3 -m venv {env} && {shlex.quote(str(tmp_path / 'gpu env/bin/python'))} "
                     "-m pip install 'cupy-cuda12x[ctk]>=14'")
    # a CuPy for the wrong CUDA in the system's site-packages is shadowed, not uninstalled from there
    a = gpu_setup.advise(Driver("550.54.14", (12, 4)), Cupy("cupy-cuda13x", "14.1", "other"), "x", python="python3")
    assert "uninstall" not in a.fix and a.fix.endswith("install 'cupy-cuda12x[ctk]>=14'")


def test_the_gpu_venv_goes_on_the_path_before_the_interpreters_site_packages(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_setup, "in_own_venv", lambda: False)
    monkeypatch.setenv("ASTRA_GPU_ENV", str(tmp_path))
    site = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    path = ["/ext/bundled/libs", "/usr/lib/python3.11", "/usr/lib/python3/dist-packages"]
    monkeypatch.setattr(sys, "path", list(path))
    gpu_setup.use_gpu_env()
    assert sys.path == path          # no GPU venv yet: nothing added
    site.mkdir(parents=True)
    gpu_setup.use_gpu_env()
    gpu_setup.use_gpu_env()
    assert sys.path == [path[0], path[1], str(site), path[2]]
