"""How many of a public repository's kernel files compile in Astra (compile.nvcc: a copy headed by
`#line`, confined, every non-template kernel found in the cubin by its name) against plain nvcc on
the same unedited file with the same flags — and what a first and a repeated compile cost.

    python benchmarks/nvcc_files.py --repo vllm-project+vllm --under csrc -I csrc [--max 40]
        [--torch-include DIR ...] [--json out.json]

The files come from a mirror under /work/.mirror (or `--mirror`), read at `--commit` (default:
the mirror's HEAD) with `git archive` into a scratch folder; nothing is edited. Both compilers get
`-arch=sm_90 --cubin` and the flags Astra derives (the include folders given, relative to the
repository, `-std=c++17`; torch's flags for a file that includes torch); `--torch-include` gives
torch's include folders, as a project's build would.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from astra_cuda.model import source  # noqa: E402
from astra_cuda.compile import nvcc, toolkit  # noqa: E402
from astra_cuda.compile.project import ProjectContext  # noqa: E402


def plain(nv: str, f: Path, flags: list[str], timeout: float) -> tuple[bool | None, float, str]:
    """nvcc itself on the file in place, with the flags Astra uses (the same -I, -D, -std)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            p = subprocess.run([nv, "--cubin", "-arch=sm_90", "-x", "cu", *flags,
                                "-o", os.path.join(tmp, "o.cubin"), str(f)], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, timeout, "timeout"
    first = next((ln for ln in (p.stdout + p.stderr).splitlines() if "error" in ln), "")
    return p.returncode == 0, time.perf_counter() - t0, first[:200]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--mirror", default="/work/.mirror")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--under", required=True)
    ap.add_argument("-I", dest="includes", action="append", default=[])
    ap.add_argument("--torch-include", action="append", default=[])
    ap.add_argument("--max", type=int, default=0)
    ap.add_argument("--std", default=None, help="the project's standard (default: Astra's, c++20 for torch)")
    ap.add_argument("--ext", default="cu", help="cu, or cuh for header-only kernel libraries")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    tk = toolkit.find()
    if tk is None:
        print("no CUDA toolkit here")
        return 2
    git = ["git", "--git-dir", str(Path(a.mirror) / a.repo / "repo")]
    work = Path(tempfile.mkdtemp(prefix="astra-nvcc-files-"))
    (work / ".git").mkdir()  # the project root the confinement opens
    tar = subprocess.run([*git, "archive", a.commit, a.under], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=tar, check=True)
    files = sorted(p for p in (work / a.under).rglob(f"*.{a.ext}"))
    files = [f for f in files if source.parse(f.read_text(errors="replace")).kernels][: a.max or None]
    incs = [str(work / d) for d in a.includes] + a.torch_include
    ctx = ProjectContext(include_dirs=tuple(incs), std=a.std)
    rows = []
    for f in files:
        text = f.read_text(errors="replace")
        names = [k.qualified_name for k in source.parse(text).kernels if not k.is_template]
        names = [n for n in dict.fromkeys(names) if names.count(n) == 1]  # overloads: not by name
        ok_plain, t_plain, why_plain = plain(tk.nvcc, f, nvcc.project_flags(ctx, text, str(f)), a.timeout)
        t0 = time.perf_counter()
        r = nvcc.compile(text, str(f), ctx, "sm_90", names, toolkit=tk, timeout_s=a.timeout)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = nvcc.compile(text, str(f), ctx, "sm_90", names, toolkit=tk, timeout_s=a.timeout)
        t_again = time.perf_counter() - t0
        found = r.ok and all(n in r.kernels for n in names)
        err = next((d.message for d in r.diagnostics if d.severity == "error"), "")
        rows.append({"file": str(f.relative_to(work)), "plain": ok_plain, "astra": found, "kernels": len(names),
                     "plain_s": round(t_plain, 2), "astra_s": round(t_first, 2), "repeat_s": round(t_again, 4),
                     "cached": again.cached, "plain_error": why_plain, "astra_error": err[:200]})
        print(f"{'ok ' if found else 'NO '}{'ok ' if ok_plain else 'NO '} {t_first:6.1f}s {t_plain:6.1f}s "
              f"{t_again * 1000:6.1f}ms {rows[-1]['file']} {err[:100] if not found else ''}", flush=True)
    both = sum(1 for r in rows if r["plain"] and r["astra"])
    n_plain = sum(1 for r in rows if r["plain"])
    summary = {"repo": a.repo, "commit": a.commit, "files": len(rows), "plain_nvcc_ok": n_plain,
               "astra_ok": sum(1 for r in rows if r["astra"]), "astra_ok_where_plain_ok": both,
               "median_first_s": sorted(r["astra_s"] for r in rows)[len(rows) // 2] if rows else None,
               "max_repeat_s": max((r["repeat_s"] for r in rows), default=None), "toolkit": tk.describe()}
    print(json.dumps(summary))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "files": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
