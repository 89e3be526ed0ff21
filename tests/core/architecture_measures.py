"""The measures issue 28 ("architecture step 2") names, read off the package as it is today.

    PYTHONPATH=server .venv/bin/python tests/core/architecture_measures.py [--parses] [--before=CHECKOUT]

prints the table of ARCHITECTURE.md's "Measures" section (measure | the issue's reading before |
today); `--parses` also runs benchmarks/candidate_parses.py's offline optimize of the silu example
(a minute or two) for the parses and spec loads per evaluation; `--before` also reads another
checkout (a worktree at 971247d^, the commit before issue 28's first) for the measures any tree has. `test_architecture_measures.py`
holds each measure at today's reading or better; `test_layers.py` holds the import rules.

Everything here is read from the source (`ast`) and pyproject.toml, except the facade's imports (a
subprocess) and the parse counts (the optimize run)."""
from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_layers import PACKAGE, cycles, import_graph, with_packages  # noqa: E402

ROOT = PACKAGE.parents[1]
MOST = 600

# A worker job named by a string the worker resolves ("astra_cuda.jobs:check_job").
JOB_STRING = re.compile(r"^astra_cuda(\.\w+)+:\w+$")


def _modules() -> dict[str, ast.Module]:
    return _parsed(PACKAGE)


@functools.lru_cache(maxsize=2)
def _parsed(package: Path) -> dict[str, ast.Module]:
    """Every module's tree, read once per package (each measure walks them all)."""
    return {str(p.relative_to(package)): ast.parse(p.read_text(), str(p)) for p in sorted(package.rglob("*.py"))}


def job_strings() -> list[str]:
    """Where a job is still named by a string, or a module resolved by name (importlib.import_module)."""
    out = []
    for rel, tree in _modules().items():
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and JOB_STRING.match(n.value):
                out.append(f"{rel}:{n.lineno} {n.value}")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "import_module":
                out.append(f"{rel}:{n.lineno} import_module")
    return out


def _function(rel: str, name: str) -> ast.FunctionDef | None:
    for n in ast.walk(_modules()[rel]):
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    return None


def _says_any(annotation: ast.expr | None) -> bool:
    """An annotation that is Any, ModuleType or a bare `str` job name, or holds one."""
    if annotation is None:
        return True
    text = ast.unparse(annotation)
    return bool(re.search(r"\b(Any|ModuleType)\b", text))


def untyped_seams() -> dict[str, str]:
    """The seams the issue names, each with what it is typed as today ('' where it is gone)."""
    out: dict[str, str] = {}
    core = _function("lsp/runtime.py", "core")
    out["lsp core() -> ModuleType"] = ast.unparse(core.returns) if core and core.returns else ""
    ran = next(n for n in ast.walk(_modules()["execution/executors/base.py"])
               if isinstance(n, ast.ClassDef) and n.name == "Ran")
    value = next(n for n in ran.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "value")
    out["Ran.value"] = ast.unparse(value.annotation)
    run = next(n for n in ast.walk(_modules()["execution/executors/base.py"])
               if isinstance(n, ast.FunctionDef) and n.name == "run")
    out["Executor.run(job)"] = ast.unparse(run.args.args[1].annotation) if run.args.args[1].annotation else ""
    check = _function("gate/run.py", "check")
    assert check is not None
    out["gate.check(reference, candidate)"] = ", ".join(ast.unparse(a.annotation) for a in check.args.args[:2]
                                                         if a.annotation)
    return out


def any_in_facade() -> list[str]:
    """Parameters and returns of api.py's public functions typed Any (or unannotated)."""
    out = []
    for n in _modules()["api.py"].body:
        if isinstance(n, ast.FunctionDef) and not n.name.startswith("_"):
            args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
            out += [f"{n.name}({a.arg})" for a in args if _says_any(a.annotation)]
            if _says_any(n.returns):
                out.append(f"{n.name} ->")
    return out


def globals_set() -> list[str]:
    """Module globals a function rebinds (`global x`): a switch or a memo kept by the process."""
    out = []
    for rel, tree in _modules().items():
        for n in ast.walk(tree):
            if isinstance(n, ast.Global):
                out += [f"{rel}:{name}" for name in n.names]
    return sorted(set(out))


MUTABLE_CALLS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "WeakValueDictionary",
                 "WeakKeyDictionary", "WeakSet"}
CACHES = {"lru_cache", "cache"}


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name in MUTABLE_CALLS
    return False


def module_state() -> dict[str, list[str]]:
    """Module-level mutable state beside `global`: containers bound to a lower-case name (an
    upper-case one is a constant table by the project's convention, never written), and functions
    memoised for the process (functools' lru_cache/cache)."""
    containers, memos = [], []
    for rel, tree in _modules().items():
        for n in tree.body:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and not t.id.isupper() and not t.id.startswith("__") and _is_mutable(n.value):   # type: ignore[union-attr]
                    containers.append(f"{rel}:{t.id}")
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                for m in [n] + [b for b in n.body if isinstance(b, ast.FunctionDef)]:
                    for d in m.decorator_list:   # type: ignore[union-attr]
                        f = d.func if isinstance(d, ast.Call) else d
                        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                        if name in CACHES:
                            memos.append(f"{rel}:{m.name}")
    return {"containers": sorted(containers), "memos": sorted(memos)}


def session_state() -> list[str]:
    """What a `Session` keeps as it runs: its fields left out of its equality (`compare=False`)."""
    cls = next(n for n in _modules()["session.py"].body if isinstance(n, ast.ClassDef) and n.name == "Session")
    out = []
    for f in cls.body:
        if isinstance(f, ast.AnnAssign) and isinstance(f.value, ast.Call) and any(
                k.arg == "compare" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in f.value.keywords):
            out.append(f"{ast.unparse(f.target)}: {ast.unparse(f.annotation)}")
    return out


def switches() -> list[str]:
    """The issue's two process-wide switches, where they still exist."""
    found = []
    if _function("api.py", "set_execution"):
        found.append("api.set_execution")
    if _function("execution/executors/__init__.py", "use"):
        found.append("executors.use")
    return found


def flat_modules() -> list[str]:
    """Modules in the package root (its __init__ and __main__ left out)."""
    return sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


NAMED_CIRCLE = ("astra_cuda.backends.cpu", "astra_cuda.compile.confine", "astra_cuda.compile.extract",
                "astra_cuda.compile.project", "astra_cuda.backends.cpu.toolchain", "astra_cuda.compile.sandbox")


def circles() -> dict[str, list[list[str]]]:
    g = import_graph()
    return {"modules": cycles(g), "with package inits": cycles(with_packages(g))}


def long_modules() -> dict[str, int]:
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    return dict(sorted(lines.items(), key=lambda kv: -kv[1])[:3]) | {"model/source.py": lines["model/source.py"]}


def over(bound: int = MOST) -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > bound)


def facade_loads() -> list[str]:
    code = ("import sys, astra_cuda.api; print('\\n'.join(m for m in sys.modules if m.startswith("
            "('astra_cuda.gate', 'astra_cuda.profiler', 'astra_cuda.backends', 'cupy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"})
    return out.stdout.split()


def settings() -> dict[str, int]:
    """package.json's server settings, how many the client's TypeScript spells (reads or sends by
    hand), and how many the contract.json repeats."""
    pkg = json.loads((ROOT / "client" / "package.json").read_text()) if (ROOT / "client" / "package.json").exists() \
        else json.loads((ROOT / "package.json").read_text())
    conf = pkg["contributes"]["configuration"]
    props: dict[str, object] = {}
    for part in conf if isinstance(conf, list) else [conf]:
        props |= part["properties"]
    server = [k.removeprefix("astra.") for k in props if not k.startswith("astra.server.") and k != "astra.trace.server"]
    ts = "\n".join(p.read_text() for p in sorted((ROOT / "client" / "src").glob("*.ts")) if p.name != "contract.ts")
    contract = (PACKAGE / "contract.json").read_text()
    return {"server settings": len(server),
            "spelled in client/src": sum(bool(re.search(rf"[\"'.]{re.escape(k)}[\"']", ts)) for k in server),
            "repeated in contract.json": sum(f'"{k}"' in contract or f'"astra.{k}"' in contract for k in server)}


STRICT_AREAS = {"jobs": "execution/jobs.py", "executors": "execution/executors", "evaluation": "evaluation.py",
                "evaluator": "execution/evaluator.py", "gate": "gate", "compile layer": "compile"}


def strict_files() -> set[str]:
    """The package's modules mypy checks strictly (pyproject's `files`; all are strict)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf.get("strict") is True
    out: set[str] = set()
    for f in conf["files"]:
        p = ROOT / f
        out |= {str(q.relative_to(PACKAGE)) for q in (p.rglob("*.py") if p.is_dir() else [p])}
    return out


def strict_coverage() -> dict[str, tuple[int, int]]:
    """area -> (modules under mypy strict, modules), for the areas the issue names and the package."""
    strict = strict_files()
    out = {}
    for area, rel in STRICT_AREAS.items():
        p = PACKAGE / rel
        files = {str(q.relative_to(PACKAGE)) for q in (p.rglob("*.py") if p.is_dir() else [p])}
        out[area] = (len(files & strict), len(files))
    every = {str(q.relative_to(PACKAGE)) for q in PACKAGE.rglob("*.py")}
    out["whole package"] = (len(every & strict), len(every))
    return out


def silu_parses() -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import candidate_parses
    r = candidate_parses.count("silu_and_mul", ROOT / "examples" / "silu_and_mul.cu", 3)
    return {k: r[k] for k in r if k == "evaluations" or k.endswith("_per_evaluation")}


def general() -> dict[str, str]:
    """The measures that read any checkout of the package (today's, or one before issue 28)."""
    state, circ = module_state(), circles()
    strict = strict_coverage()["whole package"]
    return {
        "worker jobs named by strings (importlib)": str(len(job_strings())),
        "module globals rebound with `global`": f"{len(globals_set())}: " + ", ".join(f"`{g}`" for g in globals_set()),
        "module-level mutable containers (lower-case names)":
            f"{len(state['containers'])}: " + ", ".join(f"`{c}`" for c in state["containers"]),
        "functions memoised for the process (`lru_cache`/`cache`)": str(len(state["memos"])),
        "modules flat in the package root": str(len(flat_modules())),
        "import circles counting imports in functions": str(len(circ["modules"])),
        "import circles counting also the package inits an import runs":
            "; ".join(f"{len(c)} modules ({', '.join(x.removeprefix('astra_cuda.') for x in c)})"
                      for c in circ["with package inits"]) or "0",
        "modules over 600 lines": f"{len(over())}" + (f" ({', '.join(over())})" if over() else ""),
        "gate/profiler/backend modules loaded by `import astra_cuda.api`": str(len(facade_loads())),
        "mypy strict: whole package": f"{strict[0]}/{strict[1]} modules",
    }


def at(checkout: Path) -> dict[str, str]:
    """`general()` of another checkout's package (e.g. a worktree at the commit before issue 28)."""
    import test_layers
    global PACKAGE, ROOT
    here = PACKAGE, ROOT
    PACKAGE = test_layers.PACKAGE = checkout / "server" / "astra_cuda"
    ROOT = checkout
    try:
        return general()
    finally:
        PACKAGE, ROOT = here
        test_layers.PACKAGE = PACKAGE


# The issue's own words for what each measure read when it was filed.
ISSUE = {
    "worker jobs named by strings (importlib)": "14",
    "modules flat in the package root": "34",
    "import circles counting also the package inits an import runs":
        "backends.cpu, isolation, toolchain, confine, extract, project",
    "modules over 600 lines": "source.py 894, more",
    "gate/profiler/backend modules loaded by `import astra_cuda.api`": "the whole gate",
    "mypy strict: whole package": "jobs, executors, evaluation, evaluator, gate, compile not strict",
}


def table(parses: bool, before: Path | None) -> str:
    seams = untyped_seams()
    cov = strict_coverage()
    st = settings()
    longest = long_modules()
    then = at(before) if before else {}
    rows = []
    if parses:
        p = silu_parses()
        rows.append(("parses per evaluation, silu example, caller side (benchmarks/candidate_parses.py)",
                     "78 parses, 19 spec loads for 4 evaluations",
                     "17.2 whole-text parses, 6.6 source models, 4.8 spec loads (caf76da)",
                     f"{p['caller_tree_parses_per_evaluation']} whole-text parses, {p['caller_parses_per_evaluation']}"
                     f" source models, {p['caller_spec_loads_per_evaluation']} spec loads ({p['evaluations']} "
                     "evaluations)"))
        rows.append(("parses per evaluation, silu example, worker side up to the gate (same run)", "",
                     "4.6 whole-text parses, 1.2 source models, 0.2 spec loads (7c8f906)",
                     f"{p['worker_tree_parses_per_evaluation']} whole-text parses, {p['worker_parses_per_evaluation']}"
                     f" source models, {p['worker_spec_loads_per_evaluation']} spec loads (the reference's once a "
                     "run; the rest the unit's own text: the cut, NVRTC's typedefs)"))
    rows += [
        ("facade reached as", "`core() -> ModuleType`", "", seams["lsp core() -> ModuleType"]
         or "`from astra_cuda import api` (typed)"),
        ("`Ran.value`", "`Any`", "", f"`{seams['Ran.value']}`"),
        ("executor's run", "`run(func: str, payload: Any)`", "", f"`run(job: {seams['Executor.run(job)']})`"),
        ("`gate.check` units", "`Any`", "", f"`{seams['gate.check(reference, candidate)'].replace('|', 'or')}`"),
        ("`Any` or unannotated in api.py's public signatures", "", "", str(len(any_in_facade()))),
        ("process-wide switches", "`api.set_execution`, `executors.use`", "", ", ".join(switches()) or "none"),
        ("what a `Session` learns as it runs (its own, not the process's)", "", "",
         ", ".join(f"`{x}`" for x in session_state()) or "none"),
    ]
    rows += [(m, ISSUE.get(m, ""), then.get(m, ""), t) for m, t in general().items()]
    rows[-1:-1] = [("longest modules", "", "", ", ".join(f"{k} {v}" for k, v in longest.items()))]
    rows += [
        ("settings written by hand", "4 places (contract.json, package.json, settings.ts, lsp/settings.py)", "",
         f"package.json only ({st['server settings']} server settings; client/src spells "
         f"{st['spelled in client/src']}, contract.json {st['repeated in contract.json']}; "
         "`Settings` held to it by tests/lsp/test_contract.py)"),
    ]
    rows += [(f"mypy strict: {area}", "not strict", "", f"{a}/{b} modules")
             for area, (a, b) in cov.items() if area != "whole package"]
    out = ["| measure | the issue said | measured before | today |", "|---|---|---|---|"]
    out += [f"| {m} | {i} | {b} | {t} |" for m, i, b, t in rows]
    return "\n".join(out)


if __name__ == "__main__":
    before = next((Path(a.removeprefix("--before=")) for a in sys.argv if a.startswith("--before=")), None)
    print(table("--parses" in sys.argv, before))
