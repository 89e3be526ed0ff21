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
# Module-level containers (lower-case names), each with why it is the process's and not a Session's:
# a worker process has no Session (it runs one job at a time for whichever caller sent it), a
# memo keyed by the content it answers for gives every caller the same answer, and two are the
# process's by nature. A new one fails test_each_module_level_container_says_why.
CONTAINERS = {
    # worker side: kept warm across one worker's jobs, whoever sent them
    "execution/jobs.py:_backends": "the worker's backends (its CUDA context, its compiled modules)",
    "execution/jobs.py:_evaluators": "the worker's evaluator of the kernel it is judging (its reference's modules)",
    "profiler/touched.py:_cache": "what a kernel touches, keyed by its code, spec and sizes",
    "backends/cpu/isolation.py:_program": "the seccomp program compiled once (libseccomp, ~40 ms); the same for all",
    "backends/cpu/unit_build.py:_failed": "a build that failed a minute ago, keyed by its output path (a content hash)",
    "backends/cpu/toolchain.py:_build_locks": "one lock per output path of the shared build folder",
    # content-keyed memos: the key is everything the answer depends on
    "compile/depcache.py:_digests": "a header's digest, keyed by its path and stat stamp",
    "compile/devicepp.py:_cache": "nvcc's device preprocessing, keyed by a hash of text, flags and headers' digest",
    "compile/fastpath.py:_proofs": "a cut's proof, keyed by the reference unit, arch and toolkit",
    "compile/instances.py:_ran": "nvcc's instance list, keyed by toolkit, flags, path and unit",
    "compile/project_lines.py:_code_cache": "a file's code length without blanks, keyed by path and stat",
    "compile/static.py:_cache": "a unit's static compile, keyed by a hash of its source, options and arch",
    "lsp/parse_apart.py:_said": "a child parse's answer, keyed by the text's hash and bounds",
    # the process's by nature
    "execution/worker.py:_pools": "this machine's worker processes, shared by every session's LocalExecutor",
    "redact.py:_remembered": "every secret any caller configured, masked from every log line of the process",
}
MEMOS = 36
FLAT = 17
STRICT = 125   # of the package's modules under mypy strict


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
    assert len(state["memos"]) <= MEMOS, state["memos"]


def test_each_module_level_container_says_why():
    assert set(m.module_state()["containers"]) <= set(CONTAINERS), \
        "a new module-level container: put it in the caller's Session, or say why here"


def test_a_session_holds_what_it_learns():
    """What a Session learns as it runs is its own (a field left out of its equality)."""
    assert m.session_state() == ["backends: Availability"]


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
