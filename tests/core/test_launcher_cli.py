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


def _bundle_with_archive(tmp_path: Path) -> Path:
    """A bundle laid out as the .vsix carries it: the manifest plain, the libraries (here one small
    package) only in bundled/libs.tar.xz, packed by scripts/bundle-libs' own `archive`."""
    import importlib.machinery
    import importlib.util
    import json
    import platform
    loader = importlib.machinery.SourceFileLoader("bundle_libs", str(ROOT / "scripts" / "bundle-libs"))
    spec = importlib.util.spec_from_loader("bundle_libs", loader)
    assert spec is not None
    bundle_libs = importlib.util.module_from_spec(spec)
    loader.exec_module(bundle_libs)
    bundled = tmp_path / "bundled"
    (bundled / "tool").mkdir(parents=True)
    (bundled / "tool" / "astra_launcher.py").write_text(LAUNCHER.read_text())
    libs = bundled / "libs"
    (libs / "packed_probe").mkdir(parents=True)
    (libs / "packed_probe" / "__init__.py").write_text("WHERE = __file__\n")
    (libs / "packed_probe" / "data.bin").write_bytes(bytes(range(256)) * 64)
    here = "%d.%d" % sys.version_info[:2]
    plat = {"x86_64": "linux-x64", "aarch64": "linux-arm64"}[platform.machine()]
    (libs / "ASTRA_BUNDLE.json").write_text(json.dumps({"platform": plat, "python": [here], "packages": []}))
    assert bundle_libs.archive(libs, bundled / "libs.tar.xz") == 2
    import shutil
    shutil.rmtree(libs / "packed_probe")   # as in the .vsix: only the archive holds it
    return bundled


def _where(bundled: Path, env: dict) -> subprocess.CompletedProcess:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import astra_launcher as L; "
            "sys.path[0:0] = L.library_path(); import packed_probe; print(packed_probe.WHERE)")
    return subprocess.run([sys.executable, "-c", code, str(bundled / "tool")], capture_output=True, text=True,
                          env=env, timeout=60)


def test_the_first_start_unpacks_the_archived_libraries_once(tmp_path):
    bundled = _bundle_with_archive(tmp_path)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    launcher = bundled / "tool" / "astra_launcher.py"
    # two starts at once (the client's check and a terminal's astra): both ok, one copy unpacked
    procs = [subprocess.Popen([sys.executable, str(launcher), "--check"], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert '"ok": true' in out, out
    assert (bundled / "deps" / "packed_probe" / "data.bin").read_bytes() == bytes(range(256)) * 64
    assert not [p for p in bundled.iterdir() if p.name.startswith(".unpacking-")]
    r = _where(bundled, env)
    assert r.returncode == 0 and r.stdout.strip() == str(bundled / "deps" / "packed_probe" / "__init__.py"), r
    # later starts reuse it (the archive is no longer read)
    (bundled / "libs.tar.xz").write_bytes(b"not read again")
    assert _where(bundled, env).returncode == 0


def test_a_damaged_archive_is_a_clear_check_failure_that_leaves_nothing(tmp_path):
    bundled = _bundle_with_archive(tmp_path)
    (bundled / "libs.tar.xz").write_bytes((bundled / "libs.tar.xz").read_bytes()[:200])   # cut short
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(bundled / "tool" / "astra_launcher.py"), "--check"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0 and '"ok": false' in r.stdout and "could not unpack Astra's libraries" in r.stdout, r
    # nothing unpacked or half unpacked (the empty lock file stays)
    assert sorted(p.name for p in bundled.iterdir()) == [".unpacking.lock", "libs", "libs.tar.xz", "tool"]


def test_what_a_start_killed_while_unpacking_left_is_removed_by_the_next(tmp_path):
    bundled = _bundle_with_archive(tmp_path)
    stale = bundled / ".unpacking-killed"
    (stale / "numpy").mkdir(parents=True)
    (stale / "numpy" / "half.so").write_bytes(b"\0" * 4096)
    (bundled / "deps").mkdir()   # an empty folder where the libraries belong (removed by hand, say)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(bundled / "tool" / "astra_launcher.py"), "--check"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert '"ok": true' in r.stdout, r
    assert not stale.exists() and (bundled / "deps" / "packed_probe" / "__init__.py").is_file()
