"""The import structure of the server package: no import circle between its modules, and each
layer imports only what it may (ARCHITECTURE.md, "Invariants"). Imports inside functions count
too (a lazy import is still a dependency); imports for type checking only do not."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "server" / "astra_cuda"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node but those under `if TYPE_CHECKING:` (type-only imports never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            stack.append(child)


def import_graph() -> dict[str, set[str]]:
    """module -> the astra modules it imports (an imported name that is a module counts as it)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    found.add(t)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_lazy_imports():
    g = import_graph()
    assert "astra_cuda.gate" in g["astra_cuda.execution.jobs"]          # imported inside a job function
    assert "astra_cuda.backends.gpu" in g["astra_cuda.execution.jobs"]


def test_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def with_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph with what an import also runs: importing `a.b.c` runs `a.b`'s `__init__` first (the
    root package's, which imports nothing, left out)."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        found = set(targets)
        for t in targets:
            parent = t.rpartition(".")[0]
            while parent.count("."):
                if parent in graph and parent != module and not module.startswith(parent + "."):
                    found.add(parent)
                parent = parent.rpartition(".")[0]
        out[module] = found
    return out


def test_no_import_circle_counting_the_packages_an_import_runs():
    found = cycles(with_packages(import_graph()))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_package_graph_sees_package_inits():
    g = with_packages({"a": {"p.q.m"}, "p.q.m": set(), "p.q": set(), "p": set()})
    assert g["a"] == {"p.q.m", "p.q"}


def test_the_facade_loads_no_worker_side_module():
    """`import astra_cuda.api` (what the CLI and the language server load) loads no gate, profiler
    or backend module: they load in worker processes, or when a verb needs them."""
    code = ("import sys, astra_cuda.api; print('\\n'.join(m for m in sys.modules if m.startswith("
            "('astra_cuda.gate', 'astra_cuda.profiler', 'astra_cuda.backends', 'cupy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [], out.stdout


LONG = 500  # lines; a longer module says at the top why it is one module


def test_a_long_module_says_why():
    quiet = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
             if len(p.read_text().splitlines()) > LONG and "Long because" not in (ast.get_docstring(ast.parse(
                 p.read_text())) or "")]
    assert not quiet, f"modules over {LONG} lines without 'Long because ...' in their docstring: {quiet}"


MOST = 600  # lines: issue 28's bound for every module


def test_no_module_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MOST}
    assert not long, long


# area -> areas it must not import (an area is a module or a package with everything under it)
FORBIDDEN = {
    # The agents run in the caller's process: what they learn of a candidate is astra_cuda.evaluation.
    "astra_cuda.agents": ("astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends", "astra_cuda.execution.jobs", "astra_cuda.execution.evaluator",
                     "astra_cuda.execution.worker", "astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli"),
    # The worker side receives its backend from astra_cuda.execution.jobs and never reaches back up.
    "astra_cuda.gate": ("astra_cuda.execution.jobs", "astra_cuda.api", "astra_cuda.agents", "astra_cuda.lsp", "astra_cuda.cli"),
    "astra_cuda.profiler": ("astra_cuda.execution.jobs", "astra_cuda.api", "astra_cuda.agents", "astra_cuda.lsp", "astra_cuda.cli"),
    "astra_cuda.execution.evaluator": ("astra_cuda.execution.jobs", "astra_cuda.api", "astra_cuda.agents", "astra_cuda.lsp", "astra_cuda.cli"),
    # Executors only move astra_cuda.execution.jobs payloads to worker processes (here or on Ray), never run them.
    "astra_cuda.execution.executors": ("astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends", "astra_cuda.execution.evaluator", "astra_cuda.api",
                        "astra_cuda.agents", "astra_cuda.lsp", "astra_cuda.cli"),
    "astra_cuda.backends": ("astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.execution.jobs", "astra_cuda.execution.evaluator", "astra_cuda.api",
                       "astra_cuda.agents", "astra_cuda.lsp", "astra_cuda.cli"),
    # The language server reaches the core through the facade; kernel code runs only in workers.
    "astra_cuda.lsp": ("astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends", "astra_cuda.execution.jobs", "astra_cuda.execution.evaluator",
                  "astra_cuda.execution.worker", "astra_cuda.cli"),
    "astra_cuda.cli": ("astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends", "astra_cuda.execution.jobs", "astra_cuda.execution.evaluator",
                  "astra_cuda.execution.worker"),
    # The kernel model is the bottom layer: it reads text, never compiles, runs or calls up.
    "astra_cuda.model": ("astra_cuda.compile", "astra_cuda.infer", "astra_cuda.execution", "astra_cuda.gate",
                         "astra_cuda.profiler", "astra_cuda.backends", "astra_cuda.agents", "astra_cuda.snapshot",
                         "astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.config"),
    # Compiling user code sits under the worker side and the callers (it may retire the worker it runs in).
    "astra_cuda.compile": ("astra_cuda.infer", "astra_cuda.execution.jobs", "astra_cuda.execution.executors",
                           "astra_cuda.execution.evaluator", "astra_cuda.execution.availability", "astra_cuda.gate",
                           "astra_cuda.profiler", "astra_cuda.agents", "astra_cuda.snapshot", "astra_cuda.api",
                           "astra_cuda.lsp", "astra_cuda.cli"),
    # The rest of the pure core (units, snapshot, contract) knows no caller.
    "astra_cuda.compile.extract": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker"),
    "astra_cuda.snapshot": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker"),
    "astra_cuda.contract": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker"),
    "astra_cuda.report": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker",
                     "astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends"),
    "astra_cuda.cli.sarif": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker"),
    "astra_cuda.gpu_setup": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker"),
    "astra_cuda.evaluation": ("astra_cuda.api", "astra_cuda.lsp", "astra_cuda.cli", "astra_cuda.agents", "astra_cuda.execution.jobs", "astra_cuda.execution.worker",
                         "astra_cuda.gate", "astra_cuda.profiler", "astra_cuda.backends"),
}


def _in(module: str, area: str) -> bool:
    return module == area or module.startswith(area + ".")


def test_each_layer_imports_only_what_it_may():
    bad = [f"{m} imports {t}" for m, targets in sorted(import_graph().items())
           for area, forbidden in FORBIDDEN.items() if _in(m, area)
           for t in sorted(targets) if any(_in(t, f) for f in forbidden)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_cycle_finder(graph, expected):
    assert cycles(graph) == expected


def test_the_facade_flips_no_process_wide_switch():
    """Where kernel code runs and whether it may run are the caller's `Session`, passed to each
    call: neither the facade, the executors, what the backends offer (remembered by the session) nor
    the language server keep a module global that a `global` statement sets."""
    for rel in ("api.py", "session.py", "execution/executors/__init__.py", "execution/availability.py",
                "lsp/runtime.py"):
        tree = ast.parse((PACKAGE / rel).read_text())
        assert not [n.names for n in ast.walk(tree) if isinstance(n, ast.Global)], rel


def private_reaches() -> dict[str, set[str]]:
    """module -> the private names (`_x`) of other astra modules it reads: `from .m import _x`, or
    `m._x` where `m` is an astra module it imported (a module reading itself is left out)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in sorted(files.items()):
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        tree = ast.parse(path.read_text(), str(path))
        modules: dict[str, str] = {}   # a name bound to an astra module -> that module
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("astra_cuda")):
                base = ".".join((here[:len(here) - node.level + 1] if node.level else []) + ([node.module] if node.module else []))
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        found.add(f"{base}.{a.name}")
                    modules[a.asname or a.name] = f"{base}.{a.name}"
            elif isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names if a.name.startswith("astra_cuda") and a.asname})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and modules.get(node.value.id, name) != name:
                found.add(f"{modules[node.value.id]}.{node.attr}")
        if found:
            out[name] = found
    return out


def test_no_module_reads_another_modules_private_names():
    bad = {m: sorted(names) for m, names in private_reaches().items()}
    assert not bad, f"private names read from outside their module (make them public where they are shared): {bad}"
