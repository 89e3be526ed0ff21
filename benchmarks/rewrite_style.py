"""How readable the offline team's rewrites are (issue 26): every offline transformation applied to
the examples, the offline transformations' test kernels (`tests/agents/kernels/`) and the
real-world suite's unedited public kernels, measured as a reviewer meets
them — lines added, `astra_`-prefixed names, comments — as the transformation writes it and as
it is offered (`offline.style.polish`, the form the orchestrator verifies again and offers);
and a side-by-side with the hand-written faster versions the same public files hold (a kernel
whose name marks it as the vectorized/optimized sibling of the one rewritten).

Each suite kernel is read from the local mirror at the manifest's pinned commit, with the spec
Astra inferred for it in the suite's last CPU run (`benchmarks/results/realworld-cpu.json`,
validated there) pasted above it, as the suite does — so the launch-changing transformations can
apply too. CPU only, no kernel runs: it measures text. Nothing of the public files is written.

    .venv/bin/python benchmarks/rewrite_style.py [--json benchmarks/results/rewrite_style.json]

`--baseline` measures the transformations as they are (no `style` module: what main offered
before issue 26's item 3), to put numbers before and after side by side:

    git archive COMMIT server | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/server .venv/bin/python benchmarks/rewrite_style.py --baseline --commit COMMIT --json ...
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import astra_cuda  # noqa: E402
from astra_cuda.compile import extract, project  # noqa: E402
from astra_cuda.model import source  # noqa: E402
from astra_cuda.agents.offline import TRANSFORMS, context_from_text, helpers  # noqa: E402
from astra_cuda.errors import AstraError  # noqa: E402
from astra_cuda.model.syntax import walk  # noqa: E402
from realworld import manifest  # noqa: E402

MIRRORS = Path("/work/.mirror")
CACHE = ROOT / "benchmarks" / "realworld" / ".cache"
SPECS = ROOT / "benchmarks" / "results" / "realworld-cpu.json"
# what distinguishes a hand-written faster sibling's name from the plain kernel's
SIBLING = re.compile(r"vec(tor(ized)?)?|v\d+|opt(imized)?\d?|fast|packed|x\d|half2?|float4|bf162", re.I)
# vector types and the load/store helpers of hand-written vector code
VECTOR = re.compile(r"reinterpret_cast<[^>]*(vec|float[24]|half2|int4|uint4|uint2|Packed)|\b(ld|st)(128|256)\b"
                    r"|\bload128\b|\bstore128\b")


def added(a: str, b: str) -> int:
    return sum(1 for line in difflib.unified_diff(a.split("\n"), b.split("\n"), lineterm="", n=0)
               if line.startswith("+") and not line.startswith("+++"))


def prefixed(a: str, b: str) -> int:
    return len(set(re.findall(r"\bastra_\w+", b)) - set(re.findall(r"\bastra_\w+", a)))


def comments(a: str, b: str) -> int:
    kept = set(a.split("\n"))
    return sum(1 for ln in b.split("\n") if ln.strip().startswith("//") and ln not in kept)


def paste(text: str, kernel: str, comment: str) -> str | None:
    """`comment` on a line of its own right above `kernel` (its `template` line)."""
    k = source.parse(text).kernel(kernel)
    if k is None:
        return None
    data = text.encode("utf-8", "surrogateescape")
    start = data.rfind(b"\n", 0, k.span.start_byte) + 1
    head, rest = data[:start], data[start:]
    if data[start:k.span.start_byte].strip():   # something else ends on the kernel's first line
        head, rest = data[:k.span.start_byte] + b"\n", data[k.span.start_byte:]
    return (head + comment.rstrip("\n").encode() + b"\n" + rest).decode("utf-8", "surrogateescape")


def _show(git: Path, commit: str, path: str) -> bytes | None:
    try:
        return subprocess.run(["git", "--git-dir", str(git), "show", f"{commit}:{path}"],
                              capture_output=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def style_path(git: Path, commit: str, path: str, scratch: Path) -> str | None:
    """Where the file would sit so that `polish` finds the project's own `.clang-format` (the
    nearest one up its folders at the pinned commit, copied into `scratch`), else None."""
    parts = Path(path).parts[:-1]
    for i in range(len(parts), -1, -1):
        folder = "/".join(parts[:i])
        for name in (".clang-format", "_clang-format"):
            data = _show(git, commit, f"{folder}/{name}" if folder else name)
            if data is not None:
                home = scratch / git.parent.name / commit / folder
                home.mkdir(parents=True, exist_ok=True)
                (home / ".clang-format").write_bytes(data)
                return str(home / Path(path).name)
    return None


def project_headers(r: dict, text: str, kernels: dict) -> tuple[str, ...]:
    """The project headers the suite file includes, read from the suite's cache of its repository
    (`benchmarks/realworld/.cache`, fetch.py) with the manifest's include folders, as `astra
    optimize` reads them; () where the cache does not hold the repository."""
    k = kernels.get((r["repo"], r["path"], r["kernel"]))
    if k is None:
        return ()
    root = CACHE / k.repo.cache_name
    if not (root / k.path).is_file():
        return ()
    ctx = project.from_flags([str(root / d) for d in k.includes], k.macro_defines, k.standard, origin="suite")
    try:
        return extract.project_header_texts(source.parse(text, path=str(root / k.path)), str(root / k.path), ctx)
    except AstraError:
        return ()


def corpus(scratch: Path) -> list[tuple[str, str, str, str, str | None, tuple[str, ...]]]:
    """(label, kernel, text, unedited text, path for the project's style, the project headers'
    texts): each example kernel, and each suite kernel with its inferred spec pasted (the unedited
    file kept for finding hand-written siblings)."""
    out = []
    for f in sorted((ROOT / "examples").glob("*.cu")) + sorted((ROOT / "tests" / "agents" / "kernels").glob("*.cu")):
        text = f.read_text()
        label = str(f.relative_to(ROOT))
        out += [(label, k.name, text, text, str(f), ()) for k in source.parse(text).kernels]
    records = json.loads(SPECS.read_text())["kernels"] if SPECS.exists() else []
    kernels = {(k.repo.key, k.path, k.kernel): k for k in manifest.load().kernels}
    for r in records:
        if not r.get("spec_valid") or not r.get("spec"):
            continue
        git = MIRRORS / r["source"].replace("/", "+") / "repo"
        data = _show(git, r["commit"], r["path"])
        if data is None:
            continue
        text = data.decode("utf-8", "surrogateescape")
        pasted = paste(text, r["kernel"], r["spec"])
        if pasted is not None:
            out.append((f"{r['repo']}:{r['path']}", r["kernel"], pasted, text,
                        style_path(git, r["commit"], r["path"], scratch), project_headers(r, text, kernels)))
    return out


def _lines(node) -> int:
    return node.end_point[0] - node.start_point[0] + 1


def hand_written(text: str, kernel: str) -> dict | None:
    """The faster version the public file itself holds for `kernel`, with its size in lines: a
    sibling kernel named as its vectorized/optimized variant (`fooHalf`, `fooOpt`, `foo_vec`),
    or, inside the kernel, a branch over vector types beside the scalar branch (`if constexpr
    (use_vec) {...} else {...}`): the hand-written vector path vs the scalar code it stands for."""
    module = source.parse(text)
    short = kernel.split("::")[-1]
    plain = module.kernel(short)
    if plain is None:
        return None
    stem = re.sub(r"_?kernel$", "", short, flags=re.I).lower()
    for k in module.kernels:
        rest = k.name.lower().replace(stem, "", 1)
        if k.name != short and stem and k.name.lower().startswith(stem) and SIBLING.fullmatch(rest.strip("_")):
            return {"how": "sibling kernel", "theirs": k.name, "theirs_lines": k.text.count("\n") + 1,
                    "plain_lines": plain.text.count("\n") + 1}
    tree = source.parser().parse(text.encode("utf-8", "surrogateescape"))
    for n in walk(tree.root_node):
        if n.type != "if_statement" or not plain.span.start_byte <= n.start_byte < plain.span.end_byte:
            continue
        then, other = n.child_by_field_name("consequence"), n.child_by_field_name("alternative")
        if then is not None and other is not None and VECTOR.search(then.text.decode("utf-8", "replace")) \
                and not VECTOR.search(other.text.decode("utf-8", "replace")) \
                and any(c.type == "for_statement" for c in walk(other)):   # a vector loop beside a scalar loop
            return {"how": "vector branch in the kernel", "theirs": f"lines {then.start_point[0] + 1}-"
                    f"{then.end_point[0] + 1}", "theirs_lines": _lines(then), "plain_lines": _lines(other)}
    return None


def own_helpers(text: str, kernel: str, headers: tuple[str, ...]) -> set[str]:
    """The names of the helpers the project defines (`offline/helpers.py`: element packs, load/store
    and ceil-division helpers, in the file or its headers) that a rewrite could use."""
    k = source.parse(text).kernel(kernel.split("::")[-1])
    if k is None:
        return set()
    start = k.span.start_byte
    names = {p.name for p in helpers.packs(text, start, headers)} | {m.name for m in helpers.movers(text, start, headers)}
    names |= {helpers.ceil_div(text, headers)} - {None}   # type: ignore[arg-type]
    return {n.split("::")[-1] for n in names}


def used(a: str, b: str, names: set[str]) -> list[str]:
    """The project's helpers the added lines call or name."""
    new = "\n".join(ln for ln in b.split("\n") if ln not in set(a.split("\n")))
    return sorted(n for n in names if re.search(rf"\b{re.escape(n)}\b", new))


def local(label: str) -> bool:
    """Code written here (the examples, the transformations' test kernels), not public code."""
    return label.startswith(("examples/", "tests/"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--baseline", action="store_true", help="the transformations as written, no polish")
    ap.add_argument("--only", help="a substring of the labels to measure (a quick look)")
    ap.add_argument("--commit", help="the Astra commit measured, where its package is not a git checkout")
    ap.add_argument("--no-headers", action="store_true",
                    help="leave the project headers out (the file's own helpers only: main before 26's headers)")
    a = ap.parse_args()
    if a.baseline:
        def polish(text: str, original: str, path: str | None = None, root: str | None = None) -> str:
            return text
    else:
        from astra_cuda.agents.offline.style import polish   # type: ignore[no-redef]
    t0 = time.monotonic()
    rows: dict[str, list[dict]] = defaultdict(list)
    sides = []
    scratch = Path(tempfile.mkdtemp(prefix="rewrite-style-"))
    items = [c for c in corpus(scratch) if not a.only or a.only in c[0]]
    styled = sum(1 for c in items if c[4] is not None and not local(c[0]))
    for n, (label, kernel, text, unedited, where, headers) in enumerate(items, 1):
        print(f"[{time.monotonic() - t0:5.0f}s] {n}/{len(items)} {label} {kernel}", file=sys.stderr, flush=True)
        ctx = context_from_text(kernel, text, headers=() if a.no_headers else headers)
        own = own_helpers(text, kernel, ctx.headers)
        ours: dict[str, int] = {}
        for name, t in TRANSFORMS.items():
            try:
                rw = t.apply(text, ctx)
                offered = None if rw is None else polish(rw.text, text, where, str(scratch) if where else None)
            except Exception as e:   # a transformation that breaks on public code is a finding too
                rows[name].append({"file": label, "kernel": kernel, "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            if rw is None or offered is None:
                continue
            row = {"file": label, "kernel": kernel, "added": added(text, offered),
                   "removed": added(offered, text), "prefixed": prefixed(text, offered),
                   "comments": comments(text, offered), "headers": len(headers),
                   "project_helpers": used(text, offered, own)}
            rows[name].append(row)
            ours[name] = row["added"]
        if not local(label):
            theirs = hand_written(unedited, kernel)
            if theirs is not None:
                sides.append({"file": label, "kernel": kernel, **theirs,
                              "ours": {n: ours[n] for n in ("vectorize", "vectorize64", "coarsen", "rows") if n in ours}})
    shutil.rmtree(scratch, ignore_errors=True)
    ok = {name: [x for x in r if "error" not in x] for name, r in rows.items()}
    def stats(r: list[dict]) -> dict:
        return {"applied": len(r), "added_median": median(x["added"] for x in r) if r else None,
                "added_max": max((x["added"] for x in r), default=None),
                "removed_median": median(x["removed"] for x in r) if r else None,
                "with_project_helpers": sum(1 for x in r if x.get("project_helpers"))}
    summary = {name: {**stats([x for x in r if not local(x["file"])]), "errors": len(rows[name]) - len(r),
                      "prefixed_median": median(x["prefixed"] for x in r),
                      "comments_median": median(x["comments"] for x in r),
                      "local": stats([x for x in r if local(x["file"])]),
                      "examples_added": {x["kernel"]: x["added"] for x in r if x["file"].startswith("examples/")}}
               for name, r in sorted(ok.items()) if r}
    seconds = time.monotonic() - t0
    with_headers = sum(1 for c in items if c[5])
    print(f"{len(items)} kernels ({styled} suite kernels in a project with a .clang-format, {with_headers} "
          f"with project headers read from the suite's cache), "
          f"{sum(len(r) for r in ok.values())} applications, {seconds:.0f} s\n")
    def cell(st: dict) -> str:
        return "–" if not st["applied"] else \
            f"{st['applied']}: +{st['added_median']:g} ({st['added_max']}) −{st['removed_median']:g}" + \
            (f", {st['with_project_helpers']} with the project's helpers" if st["with_project_helpers"] else "")
    print("| transformation | suite: applied: lines added median (max) −removed median | examples and offline tests: "
          "the same | new `astra_` names (median) | comments added |")
    print("|---|---:|---:|---:|---:|")
    for name, s in summary.items():
        print(f"| {name} | {cell(s)} | {cell(s['local'])} | {s['prefixed_median']:g} | {s['comments_median']:g} |")
    if sides:
        print("\n| file | kernel | hand-written faster version (lines) | the code it stands for (lines) | ours (+lines) |")
        print("|---|---|---|---:|---|")
        for x in sides:
            ours_txt = ", ".join(f"{n} +{v}" for n, v in x["ours"].items()) or "none applies"
            print(f"| {x['file']} | {x['kernel']} | {x['how']}: {x['theirs']} ({x['theirs_lines']}) | "
                  f"{x['plain_lines']} | {ours_txt} |")
    if a.json:
        commit = a.commit or subprocess.run(["git", "-C", str(Path(astra_cuda.__file__).parent), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        a.json.write_text(json.dumps({"astra_commit": commit, "polished": not a.baseline, "kernels": len(items),
                                      "project_headers": not a.no_headers, "with_headers": with_headers,
                                      "with_clang_format": styled,
                                      "seconds": round(seconds), "summary": summary, "side_by_side": sides,
                                      "applications": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
