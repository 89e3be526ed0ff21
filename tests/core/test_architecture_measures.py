"""Issue 28's measures held at today's reading or better (ARCHITECTURE.md, "Measures"; the table is
`architecture_measures.py`'s output). The import rules, the 600-line bound and the facade's imports
are test_layers.py's; the parses and spec loads per evaluation tests/agents/test_candidate_reads.py's."""
import architecture_measures as m

# Module globals a function rebinds, each with why it is the process's and not a Session's.
GLOBALS = {
    "backends/cpu/toolchain.py:_builds_pruned",   # when this process last pruned the shared build folder
    "compile/confine.py:_warned",                 # the unconfined-compiler warning, said once a process
    "compile/nvcc.py:_cache",                     # the handle on the on-disk build cache (re-made when its root moves)
    "execution/worker.py:_retire",                # a worker process asking to be replaced after this job
}
# Module-level caches of this process (containers under lower-case names): content-keyed memos.
CONTAINERS = 15
MEMOS = 36
FLAT = 17
STRICT = 99   # of the package's modules under mypy strict


def test_no_job_is_named_by_a_string():
    assert m.job_strings() == []


def test_no_process_wide_switch():
    assert m.switches() == []


def test_the_seams_are_typed():
    seams = m.untyped_seams()
    assert seams["lsp core() -> ModuleType"] == ""
    assert seams["Ran.value"] == "T"
    assert seams["Executor.run(job)"] == "Job[T]"
    assert "Any" not in seams["gate.check(reference, candidate)"]
    assert m.any_in_facade() == []


def test_no_new_module_global_is_rebound():
    assert set(m.globals_set()) <= GLOBALS, "a new `global`: put the state in the caller's Session, or say why here"


def test_module_level_state_does_not_grow():
    state = m.module_state()
    assert len(state["containers"]) <= CONTAINERS, state["containers"]
    assert len(state["memos"]) <= MEMOS, state["memos"]


def test_the_package_root_holds_no_more_modules():
    assert len(m.flat_modules()) <= FLAT, m.flat_modules()


def test_the_named_layers_are_all_under_mypy_strict():
    cov = m.strict_coverage()
    assert {area: c for area, c in cov.items() if area != "whole package" and c[0] < c[1]} == {}
    assert cov["whole package"][0] >= STRICT, cov["whole package"]


def test_the_settings_have_one_schema():
    st = m.settings()
    assert st["server settings"] > 0
    assert st["spelled in client/src"] == 0 and st["repeated in contract.json"] == 0


def test_the_measures_see_what_they_count(tmp_path):
    """The readers find the patterns they count, so a zero above is not a reader that sees nothing."""
    import ast
    tree = ast.parse("import importlib\n_memo = {}\nx = 'astra_cuda.jobs:check_job'\n"
                     "def f():\n    global _memo\n    importlib.import_module('m')\n")
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any(m.JOB_STRING.match(s) for s in strings)
    assert m._is_mutable(tree.body[1].value)
    assert any(isinstance(n, ast.Global) for n in ast.walk(tree))
