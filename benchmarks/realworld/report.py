"""The suite's numbers as tables: pass rate per stage and per repository, failure classes with
their counts and most frequent messages, and (from a GPU run) the speed table. Pure functions
of the results JSON, plus a small CLI:

    python benchmarks/realworld/report.py RESULTS.json [--readme FILE] [--update]   # print; or rewrite
                                           FILE's table; --update writes the recomputed classes back
    python benchmarks/realworld/report.py --merge OUT.json SHARD.json…   # one file from a GPU run's shards

The README's table sits between `<!-- realworld:MACHINE -->` and `<!-- /realworld:MACHINE -->`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realworld import traffic  # noqa: E402

STAGE_KEYS = (("fetched", "fetched"), ("listed", "listed by `astra kernels`"), ("spec_proposed", "spec proposed"),
              ("spec_valid", "spec accepted by Astra's validator"), ("compiled", "compiled by Astra"),
              ("passed", "check passed as inferred"))


def _pattern(msg: str) -> str:
    """A message with its particulars (numbers, quoted names, paths) blurred, to count alike ones."""
    m = re.sub(r"`[^`]*`|'[^']*'|\"[^\"]*\"", "…", msg)
    m = re.sub(r"[\w./+-]+\.(cuh?|h|hpp|cc|cpp)(:\d+)*(\(\d+\))?", "FILE", m)
    m = re.sub(r"\b\d+(\.\d+)?\b", "N", m)
    return m[:140]


def reclassify(results: dict) -> dict:
    """The classes as classify.py and triage.toml say now (a class is a view of the record's
    first failure, so it can be recomputed without running anything)."""
    from realworld import classify
    triage = classify.load_triage()
    for r in results.get("kernels", []):
        r["failure_class"] = classify.classify(r, triage)
    results["summary"] = summary(results.get("kernels", []))
    return results


def summary(records: list[dict]) -> dict:
    n = len(records)
    stages = {key: sum(bool(r.get(key)) for r in records) for key, _ in STAGE_KEYS}
    repos: dict[str, dict] = {}
    for r in records:
        d = repos.setdefault(r["repo"], {"kernels": 0, **{key: 0 for key, _ in STAGE_KEYS}})
        d["kernels"] += 1
        for key, _ in STAGE_KEYS:
            d[key] += bool(r.get(key))
    classes = Counter(r.get("failure_class") or "?" for r in records)
    top: dict[str, list] = {}
    for c in classes:
        msgs = Counter()
        example: dict[str, str] = {}
        for r in records:
            if r.get("failure_class") == c and r.get("failure"):
                f = r["failure"]
                text = f"{f.get('stage')}{'/' + f['check'] if f.get('check') else ''}: {f.get('message', '')}"
                if c == "nvcc fails too" and r.get("nvcc"):
                    text += f" | nvcc: {r['nvcc'].get('message', '')}"
                key = _pattern(text)
                msgs[key] += 1
                example.setdefault(key, text[:300])
        top[c] = [{"count": k, "example": example[p]} for p, k in msgs.most_common(5)]
    compilers = Counter(r.get("compiler") for r in records if r.get("compiler"))
    return {"total": n, "stages": stages, "repos": repos, "classes": dict(classes.most_common()),
            "top_messages": top, "compilers": dict(compilers), "nvcc_compilable": nvcc_compilable(records),
            "bench_traffic": traffic.summary(records)}


def nvcc_compilable(records: list[dict]) -> dict:
    """Issue 24's measure: of the kernels whose file nvcc compiles with the project's flags (Astra
    compiled it — with nvcc where a toolkit is found —, or the runner's nvcc did after Astra's
    refusal), how many Astra compiled. A file nvcc refuses as checked out is not counted: one
    that stops at a header the repository does not hold (generated or downloaded by the
    project's build: `external`; `build_step` those its build files name, which the build writes),
    or at anything else (`refused`). A kernel that stopped before
    its compile and has no nvcc verdict is `unmeasured`."""
    out = {"compiled": 0, "of": 0, "external": [], "build_step": [], "refused": [], "unmeasured": [], "not_compiled": []}
    for r in records:
        nv = (r.get("nvcc") or {}).get("ok")
        if r.get("compiled") or nv is True:
            out["of"] += 1
            out["compiled"] += bool(r.get("compiled"))
            if not r.get("compiled"):
                out["not_compiled"].append(r["id"])
        elif nv is False:
            out["external" if r["nvcc"].get("outside_repository") else "refused"].append(r["id"])
            if r["nvcc"].get("made_by_build"):
                out["build_step"].append(r["id"])
        elif r.get("fetched", True):
            out["unmeasured"].append(r["id"])
    return out


def _compilable_line(c: dict) -> str:
    return (f"Issue 24: compiled by Astra where nvcc compiles the file: {_pct(c['compiled'], c['of'])}; not counted: "
            f"{len(c['external'])} stop nvcc at a header the repository does not hold ({len(c.get('build_step', []))} "
            f"named by its build files: they need the project's build step; the others a dependency its build "
            f"installs or downloads), {len(c['refused'])} nvcc refuses otherwise, {len(c['unmeasured'])} stopped before "
            f"a compile (no verdict).")


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "–"


def markdown(results: dict) -> str:
    s = results.get("summary") or summary(results.get("kernels", []))
    n = s["total"]
    lines = [f"Run: {results.get('backend')} backend through `{results.get('stage')}`, {n} kernels from "
             f"{len(s['repos'])} repositories, {results.get('jobs')} at once, {results.get('wall_s', 0) / 60:.1f} min "
             f"on {results.get('cores')} cores; Astra {str(results.get('astra_commit', ''))[:24]}"
             f"{' (uncommitted changes)' if results.get('astra_dirty') else ''}; {results.get('nvcc', '')}.", "",
             "| stage | kernels |", "|---|---:|"]
    lines += [f"| {label} | {_pct(s['stages'][key], n)} |" for key, label in STAGE_KEYS]
    lines += ["", _compilable_line(s.get("nvcc_compilable") or nvcc_compilable(results.get("kernels", [])))]
    moved = traffic.markdown(s.get("bench_traffic") or traffic.summary(results.get("kernels", [])))
    lines += ["", *moved] if moved else []
    lines += ["", "| repository | kernels | listed | spec proposed | spec valid | compiled | passed |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for repo, d in sorted(s["repos"].items(), key=lambda x: (-x[1]["passed"] / x[1]["kernels"], x[0])):
        lines.append(f"| {repo} | {d['kernels']} | {d['listed']} | {d['spec_proposed']} | {d['spec_valid']} | "
                     f"{d['compiled']} | {d['passed']} |")
    lines += ["", "| class | kernels | most frequent first failures (count: example) |", "|---|---:|---|"]
    for c, k in s["classes"].items():
        ex = "<br>".join(f"{t['count']}: {_cell(t['example'])}" for t in s["top_messages"].get(c, [])[:3])
        lines.append(f"| {c} | {k} | {ex} |")
    gpu = [r for r in results.get("kernels", []) if r.get("gpu")]
    if gpu:
        lines += ["", *speed_markdown(gpu)]
    return "\n".join(lines)


# ---- the GPU stage: speed per kernel and per size ------------------------------------------------

SLOWER_TOLERANCE = 0.03     # issue 29: no adopted rewrite slower than the original at any size by more than this


def speed(records: list[dict]) -> dict:
    """Issue 29's measures over the records of a GPU run: per kernel the copy-ceiling share before
    and after (largest bench size), the speedup at the bench sizes and at each ladder size; over the
    memory-bound kernels that pass the check the median final share, those that start below
    60% and end below 70%, and every adopted rewrite slower than the original at a size by more
    than 3%. Memory-bound is the manifest's word where the record has it (`memory_bound`), else
    the measured class of the original."""
    rows = []
    for r in records:
        opt = (r.get("gpu") or {}).get("optimize") or {}
        prof = (r.get("gpu") or {}).get("profile") or {}
        before = opt.get("share_before", prof.get("ceiling_share"))
        after = opt.get("share_after")
        sizes = [t for t in opt.get("per_size") or [] if isinstance(t.get("speedup"), (int, float))]
        worst = min(sizes, key=lambda t: t["speedup"]) if sizes and opt.get("improved") else None
        bound = r["memory_bound"] if isinstance(r.get("memory_bound"), bool) else \
            opt.get("bottleneck") in ("memory", "latency")
        rows.append({"kernel": f"{r['repo']}: {r['kernel']}", "passed": bool(r.get("passed")), "bound": bound,
                     "bottleneck": opt.get("bottleneck"), "device": opt.get("device") or prof.get("device"),
                     "before": before, "after": after, "speedup": opt.get("speedup"), "error": opt.get("error"),
                     "per_size": sizes, "worst": worst})
    bound = [x for x in rows if x["passed"] and x["bound"] and isinstance(x["after"], (int, float))]
    finals = sorted(x["after"] for x in bound)
    median = (finals[len(finals) // 2] if len(finals) % 2 else (finals[len(finals) // 2 - 1] + finals[len(finals) // 2]) / 2) \
        if finals else None
    low = [x["kernel"] for x in bound if isinstance(x["before"], (int, float)) and x["before"] < 0.6 and x["after"] < 0.7]
    slower = [f"{x['kernel']} at {x['worst'].get('role') or 'bench'} {_sizes(x['worst'].get('sizes'))} "
              f"({x['worst']['speedup']:.2f}×)" for x in rows
              if x["worst"] is not None and x["worst"]["speedup"] < 1 - SLOWER_TOLERANCE]
    devices = sorted({x["device"] for x in rows if x["device"]})
    return {"kernels": rows, "devices": devices, "memory_bound": len(bound), "median_final_share": median,
            "start_below_60_end_below_70": low, "slower_at_a_size": slower}


def speed_markdown(records: list[dict]) -> list[str]:
    s = speed(records)
    lines = [f"Speed on {', '.join(s['devices']) or 'an unnamed GPU'}: median final share of the copy ceiling "
             f"{_share(s['median_final_share'])} over the {s['memory_bound']} memory-bound kernels that pass "
             f"the check; starting below 60% and ending below 70%: "
             f"{', '.join(s['start_below_60_end_below_70']) or 'none'}; adopted rewrites slower than the original "
             f"at a size by more than {SLOWER_TOLERANCE:.0%}: {', '.join(s['slower_at_a_size']) or 'none'}.", "",
             "| kernel | class | copy ceiling before | speedup (verified, bench sizes) | copy ceiling after | "
             "speedup per size |", "|---|---|---:|---:|---:|---|"]
    for x in s["kernels"]:
        sp = x["speedup"]
        per = "; ".join(f"{t.get('role') or 'bench'} {_sizes(t.get('sizes'))}: {t['speedup']:.2f}×"
                        f"{' at ' + _share(t.get('copy_share')) if isinstance(t.get('copy_share'), (int, float)) else ''}"
                        for t in x["per_size"])
        lines.append(f"| {_cell(x['kernel'])} | {x['bottleneck'] or '–'} | {_share(x['before'])} | "
                     f"{f'{sp:.2f}×' if isinstance(sp, (int, float)) else _cell(str(x['error'] or '–'))} | "
                     f"{_share(x['after'])} | {per.replace('|', chr(92) + '|') or '–'} |")
    return lines


def _sizes(sizes) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) if isinstance(sizes, dict) else ""


def _share(x) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) else "–"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:220]


def _span(parts: list[dict]) -> float:
    """The run's wall time: from the first shard's start to the last one's end where each says
    when it started (shards side by side on the GPUs of one machine), else their sum (one device
    call each)."""
    if all("started" in p for p in parts):
        return round(max(p["started"] + p.get("wall_s", 0) for p in parts) - min(p["started"] for p in parts), 1)
    return sum(p.get("wall_s", 0) for p in parts)


def merge(parts: list[dict]) -> dict:
    """One results file from the shards of a GPU run (each from its own device call)."""
    kernels = [r for p in parts for r in p.get("kernels", [])]
    head = {k: v for k, v in parts[0].items() if k not in ("kernels", "summary", "shard", "wall_s", "complete", "started")}
    return {**head, "shards": [p.get("shard") for p in parts], "wall_s": _span(parts),
            "shard_wall_s": [p.get("wall_s", 0) for p in parts],
            "complete": all(p.get("complete") for p in parts), "summary": summary(kernels), "kernels": kernels}


def write_readme(path: Path, results: dict) -> None:
    tag = results.get("machine", "cpu")
    begin, end = f"<!-- realworld:{tag} -->", f"<!-- /realworld:{tag} -->"
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: no {begin} … {end} section to fill")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{markdown(results)}\n{end}{tail}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Tables from the real-world suite's results.")
    ap.add_argument("results", nargs="*")
    ap.add_argument("--readme", help="rewrite this file's <!-- realworld:MACHINE --> section")
    ap.add_argument("--merge", metavar="OUT", help="merge the given shard files into OUT")
    ap.add_argument("--update", action="store_true", help="write the recomputed classes back into each results file")
    a = ap.parse_args(argv)
    parts = [reclassify(json.loads(Path(p).read_text())) for p in a.results]
    if a.update:
        for p, r in zip(a.results, parts):
            Path(p).write_text(json.dumps(r, indent=1) + "\n")
    if a.merge:
        Path(a.merge).write_text(json.dumps(merge(parts), indent=1) + "\n")
        parts = [json.loads(Path(a.merge).read_text())]
    for r in parts:
        if a.readme:
            write_readme(Path(a.readme), r)
        else:
            print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
