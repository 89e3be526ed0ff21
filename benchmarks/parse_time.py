"""What tree-sitter's parses cost on real code and on hostile text, through the parser Astra uses
(`astra_cuda.model.parse_time`): it calibrates the pace every parse must keep (`S_PER_MIB`) and
the slack one input may take beyond it (`SLACK_S`). No real file may come near either.

    .venv/bin/python benchmarks/parse_time.py [--cache DIR] [--models N] [--units PATTERN] [--hostile]

- every distinct C++/CUDA file of the real-world suite's cache, parsed once (CPU seconds per MiB,
  and how far behind the pace each input fell: 0 for every real file);
- `--models N`: the source model (`source.parse`: the file, its macro bodies, its launches
  through macros) of the N largest `.cu`/`.cuh` files, each one input;
- `--units PATTERN`: the cut's input (the project's code once nvcc's device pass has expanded
  its macros and read its headers in) of the suite's kernels matching PATTERN, as
  benchmarks/expanded_size.py makes it (minutes for CUTLASS's examples);
- `--hostile`: the catalogue's slow-parse texts through `source.parse`, where they are stopped.

The cache is the suite's (copy /work/main's `benchmarks/realworld/.cache` or run `fetch.py`).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inl", ".cuinl", ".cpp", ".cc")
MIB = 1 << 20


def _measure(what: str, fn) -> tuple[float, int, float, str]:
    """(CPU seconds, bytes read, seconds behind the pace, error) of `fn()`'s parses, one input."""
    from astra_cuda.model import parse_time
    error = ""
    with parse_time.reading(what) as account:
        try:
            fn()
        except parse_time.TooSlowToParse as e:
            error = e.message
    return account.spent, account.read, account.behind, error


def files(cache: Path) -> None:
    from astra_cuda.model import source
    seen: set[bytes] = set()
    rows = []
    for dirpath, _, names in os.walk(cache):
        for name in names:
            if not name.endswith(SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            data = Path(path).read_bytes()
            digest = hashlib.sha1(data).digest()
            if digest in seen:
                continue
            seen.add(digest)
            spent, read, behind, error = _measure(path, lambda: source.parser().parse(data))
            rows.append((spent, len(data), behind, error, os.path.relpath(path, cache)))
    total = sum(r[1] for r in rows)
    print(f"files: {len(rows)} distinct, {total / MIB:.1f} MiB, {sum(r[0] for r in rows):.1f} s of CPU; "
          f"refused: {sum(bool(r[3]) for r in rows)}; most behind the pace: {max(r[2] for r in rows):.4f} s")
    for spent, size, behind, _, path in sorted(rows, reverse=True)[:5]:
        print(f"  slowest: {path}: {size / MIB:.2f} MiB in {spent:.3f} s ({spent / size * MIB:.2f} s/MiB)")
    big = [r for r in rows if r[1] >= 64 << 10]
    for spent, size, _, _, path in sorted(big, key=lambda r: -r[0] / r[1])[:3]:
        print(f"  slowest per byte (64 KiB or more): {path}: {spent / size * MIB:.2f} s/MiB ({size >> 10} KiB)")


def models(cache: Path, n: int) -> None:
    from astra_cuda.model import source
    seen: set[bytes] = set()
    found = []
    for dirpath, _, names in os.walk(cache):
        for name in names:
            if name.endswith((".cu", ".cuh")):
                path = os.path.join(dirpath, name)
                data = Path(path).read_bytes()
                if hashlib.sha1(data).digest() not in seen:
                    seen.add(hashlib.sha1(data).digest())
                    found.append((len(data), path))
    for size, path in sorted(found, reverse=True)[:n]:
        text = Path(path).read_text(errors="replace")
        t0 = time.thread_time()
        spent, read, behind, error = _measure(path, lambda: source.parse(text))
        print(f"model: {os.path.relpath(path, cache)}: {size >> 10} KiB; tree-sitter {spent:.3f} s for "
              f"{read / MIB:.2f} MiB read ({spent / max(read, 1) * MIB:.2f} s/MiB), behind the pace {behind:.4f} s, "
              f"the whole model {time.thread_time() - t0:.2f} s{'; REFUSED ' + error if error else ''}")


def units(pattern: str) -> None:
    from benchmarks.realworld import fetch, manifest
    from astra_cuda import api
    from astra_cuda.compile import devicepp, project, project_lines, torch_ext
    from astra_cuda.model import source
    done = set()
    for k in manifest.load().select(pattern):
        root = fetch.CACHE / k.repo.cache_name
        f = root / k.path
        key = f"{k.repo.key}:{k.path}"
        if key in done or not f.exists():
            continue
        done.add(key)
        text = f.read_text(errors="replace")
        cli = project.from_flags([str(root / d) for d in k.includes], list(k.macro_defines), k.standard,
                                 origin="command line", undefines=[x[2:] for x in k.repo.nvcc if x.startswith("-U")])
        context = torch_ext.with_defines(api.project_context(str(f), cli=cli, compile_commands=None), text, str(f))
        rows, _, _ = project_lines.project_rows(devicepp.preprocess(text, str(f), context.options()))
        data = b"\n".join(r.text for r in rows)
        spent, read, behind, error = _measure(key, lambda: source.parser().parse(data))
        print(f"unit: {key}: {len(data) / MIB:.2f} MiB in {spent:.3f} s ({spent / len(data) * MIB:.2f} s/MiB), "
              f"behind the pace {behind:.4f} s{'; REFUSED ' + error if error else ''}", flush=True)


def hostile() -> None:
    from astra_cuda.model import source
    from tests.security import catalogue
    from tests.security.test_attacks import SMALL_KERNEL
    for attack in catalogue.BOUNDS:
        if not attack.name.startswith("slow_parse"):
            continue
        text = attack.body + SMALL_KERNEL.format(value=attack.arg)
        t0 = time.thread_time()
        spent, read, behind, error = _measure("the file", lambda: source.parse(text))
        print(f"hostile: {attack.name} ({len(text.encode()) / MIB:.2f} MiB): stopped after {spent:.2f} s of "
              f"tree-sitter's CPU ({time.thread_time() - t0:.2f} s in all) with {read >> 10} KiB read: {error[:90]}")


def main() -> int:
    from benchmarks.realworld import fetch
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(fetch.CACHE))
    ap.add_argument("--models", type=int, default=0)
    ap.add_argument("--units")
    ap.add_argument("--hostile", action="store_true")
    a = ap.parse_args()
    files(Path(a.cache))
    if a.models:
        models(Path(a.cache), a.models)
    if a.units:
        units(a.units)
    if a.hostile:
        hostile()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
