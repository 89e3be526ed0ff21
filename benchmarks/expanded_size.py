"""How large real files are once nvcc's device pass has expanded their macros and read in their
project headers: the text the cut parses (`astra_cuda.compile.project_lines.project_rows`), in bytes and in
tree-sitter nodes, and the time the cut takes over it. It calibrates the cut's bounds
(`project_lines.FLOOR_BYTES`, `BYTES_PER_SOURCE_BYTE`, `FLOOR_NODES`,
`NODES_PER_SOURCE_BYTE`): no real kernel may be refused.

    .venv/bin/python benchmarks/expanded_size.py [--only PATTERN] [--out results.json]
        [--extra REPO:PATH:INCLUDE[,INCLUDE…]] …

The files are the real-world suite's (benchmarks/realworld/manifest.toml, from its cache: copy
/work/main's `benchmarks/realworld/.cache` or run `fetch.py`), each with its project's flags;
`--extra` adds files of a cached repository beyond the manifest's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT))

from benchmarks.realworld import fetch, manifest  # noqa: E402


def measure(path: Path, includes: list[str], defines: list[str], undefines: list[str], std: str,
            kernel: str | None) -> dict:
    from astra_cuda import api
    from astra_cuda.compile import cut, devicepp, project, project_lines
    from astra_cuda.model import source
    from astra_cuda.compile import torch_ext
    text = path.read_text(errors="replace")
    cli = project.from_flags(includes, defines, std, origin="command line", undefines=undefines)
    context = api.project_context(str(path), cli=cli, compile_commands=None)
    context = torch_ext.with_defines(context, text, str(path))
    t0 = time.monotonic()
    pp = devicepp.preprocess(text, str(path), context.options())
    t1 = time.monotonic()
    rows, _, read = project_lines.project_rows(pp)
    data = b"\n".join(r.text for r in rows)
    tree = source.parser().parse(data)
    t2 = time.monotonic()
    per_file: dict[str, int] = {}
    for r in rows:
        per_file[r.file] = per_file.get(r.file, 0) + len(r.text) + 1
    sizes = {f: os.path.getsize(f) for f in per_file if os.path.isfile(f)}
    ratios = {f: n / max(sizes.get(f, 0), 1) for f, n in per_file.items()}
    worst = max(ratios, key=lambda f: ratios[f], default="")
    out = {"source_bytes": read.bytes, "code_bytes": read.code, "largest_file_ratio": round(ratios.get(worst, 0), 2),
           "largest_ratio_file": os.path.basename(worst), "file_bytes": len(text.encode()), "preprocessed_bytes": len(pp.text.encode()), "project_bytes": len(data),
           "nodes": tree.root_node.descendant_count, "longest_row": max((len(r.text) for r in rows), default=0),
           "headers": len({r.file for r in rows}) - 1, "preprocess_s": round(t1 - t0, 2),
           "parse_s": round(t2 - t1, 2)}
    if kernel:
        model = source.parse(text)
        k = next((k for k in model.kernels if k.qualified_name == kernel or k.name == kernel.split("::")[-1]), None)
        if k is not None:
            t3 = time.monotonic()
            c = cut.cut(pp, k.name, tuple(k.qualified_name.split("::")[:-1]), set(), context.include_dirs)
            out["cut_s"] = round(time.monotonic() - t3, 2)
            out["unit_bytes"] = len(c.source.encode())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="kernel ids containing this (comma-separated alternatives)")
    ap.add_argument("--cache", default=str(fetch.CACHE))
    ap.add_argument("--extra", action="append", default=[], help="REPO_CACHE_NAME:PATH:INCLUDE[,INCLUDE…]")
    ap.add_argument("--out")
    a = ap.parse_args()
    cache = Path(a.cache)
    m = manifest.load()
    jobs: dict[str, tuple] = {}
    for k in m.select(a.only):
        root = cache / k.repo.cache_name
        f = root / k.path
        if not f.exists():
            continue
        undef = [x[2:] for x in k.repo.nvcc if x.startswith("-U")]
        key = f"{k.repo.key}:{k.path}"
        jobs.setdefault(key, (f, [str(root / d) for d in k.includes], list(k.macro_defines), undef, k.standard,
                              k.kernel))
    for e in a.extra:
        repo, path, inc = (e.split(":") + [""])[:3]
        root = cache / repo
        jobs[f"{repo}:{path}"] = (root / path, [str(root / d) for d in inc.split(",") if d], [], [], "c++17", None)
    results = {}
    for key, (f, inc, defs, undef, std, kernel) in jobs.items():
        try:
            results[key] = measure(f, inc, defs, undef, std, kernel)
        except Exception as e:  # a file the device pass refuses is recorded, not measured
            results[key] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        print(key, json.dumps(results[key]), flush=True)
    ok = {k: v for k, v in results.items() if "error" not in v}
    for v in ok.values():
        v["expansion"] = round(v["project_bytes"] / max(v["source_bytes"], 1), 2)
        v["code_expansion"] = round(v["project_bytes"] / max(v["code_bytes"], 1), 2)   # what the bound reads
        v["nodes_per_code_byte"] = round(v["nodes"] / max(v["code_bytes"], 1), 2)
    for field in ("project_bytes", "nodes", "longest_row", "cut_s", "expansion", "code_expansion",
                  "nodes_per_code_byte", "largest_file_ratio"):
        top = sorted(ok.items(), key=lambda kv: -kv[1].get(field, 0))[:3]
        print(f"largest {field}: " + "; ".join(f"{k} {v.get(field)}" for k, v in top))
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
