"""What each memory and time attack of the catalogue costs before its clear error: `astra check`
on the file, its exit code, wall and CPU seconds (the command and every process below it) and the
peak resident memory of its largest process. The numbers behind issue 30's "no hostile input takes
more than 2 GiB or 60 s before a clear error".

    .venv/bin/python benchmarks/hostile_costs.py [--only NAME] [--backend static|cpu]

The files are the catalogue's (`tests/security/catalogue.py`): the bounds entries with the small
kernel the tests put under them, and the spec floods at the issue's sizes. Run one at a time;
the machine's load goes into the wall times, not much into the CPU ones.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "server"))


def files(canary: Path) -> dict[str, str]:
    from tests.security import catalogue
    from tests.security.test_attacks import SMALL_KERNEL, _spec_file
    out = {a.name: a.body + SMALL_KERNEL.format(value=a.arg) for a in catalogue.BOUNDS
           if a.name not in ("module_cache_flood", "torch_budget_claimed")}
    specs = {a.name: a for a in catalogue.SPEC}
    out["size_names_59kb"] = _spec_file(dataclasses.replace(
        specs["size_name_flood"], arg="\n".join(f"a{i}=[1]" for i in range(5000))), canary)
    out["unknown_keys_20000"] = _spec_file(specs["unknown_key_flood"], canary)
    out["nesting_50000"] = _spec_file(dataclasses.replace(specs["deep_nesting"], arg="z = " + "[" * 50_000), canary)
    return out


def run(path: Path, backend: str) -> tuple[int, float, float, int, str]:
    """(exit code, wall s, CPU s of the command and its children, peak resident MiB of the largest
    process, the error's last line), measured from a child of our own so only this run counts."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        f"r = subprocess.run([sys.executable, '-m', 'astra_cuda', 'check', {str(path)!r}, '--backend', {backend!r}],"
        " capture_output=True, text=True)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "last = ((r.stderr + r.stdout).strip().splitlines() or ['-'])[-1]\n"
        "print(r.returncode, time.monotonic() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, last, sep='\\t')\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "server")})
    code, wall, cpu, rss, last = out.stdout.rstrip("\n").split("\t", 4)
    return int(code), float(wall), float(cpu), int(rss) >> 10, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--backend", default="static", choices=["static", "cpu"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / ".git").mkdir()
        canary = root / "canary"
        canary.mkdir()
        print(f"load {os.getloadavg()[0]:.1f}, backend {a.backend}")
        print("| attack | file | exit | wall s | CPU s | peak MiB | says |\n|---|---|---|---|---|---|---|")
        for name, text in files(canary).items():
            if a.only and a.only not in name:
                continue
            f = root / f"{name}.cu"
            f.write_text(text)
            code, wall, cpu, rss, last = run(f, a.backend)
            size = len(text.encode())
            amount = f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size / 1024:.0f} KiB"
            said = last.replace(str(root) + "/", "").replace("|", "\\|")[:160]
            print(f"| `{name}` | {amount} | {code} | {wall:.1f} | {cpu:.1f} | {rss} | {said} |", flush=True)


if __name__ == "__main__":
    main()
