"""Issue 10: the corpus' CPU part. Every kernel of benchmarks/corpus is checked on the CPU
backend with its inferred spec, unedited (the gate's quick mode: one pass over the corpus stays
within a couple of minutes on 2 cores). Target: at least 80% pass; the rest say what to fill in."""
import importlib.util
import sys
from pathlib import Path

import pytest

from .conftest import needs_gxx

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"


def load():
    if "astra_corpus" in sys.modules:
        return sys.modules["astra_corpus"]
    spec = importlib.util.spec_from_file_location("astra_corpus", CORPUS / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["astra_corpus"] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_manifest_lists_every_kernel_of_the_corpus_once():
    from astra_cuda.model import source
    corpus = load()
    entries = corpus.manifest()
    assert len(entries) >= 15
    listed = {(e.file, e.kernel) for e in entries}
    assert len(listed) == len(entries)
    found = {(str(f.relative_to(CORPUS)), k.name) for f in CORPUS.rglob("*.cu")
             for k in source.parse(f.read_text()).kernels}
    assert found == listed
    for f in CORPUS.rglob("*.cu"):
        assert "@astra" not in f.read_text(), f"{f}: the corpus has no specs (inference reads it)"
    by_name = {e.kernel: e for e in entries}
    for e in entries:   # siblings name each other
        if e.naive:
            assert by_name[e.naive].improved == e.kernel
    assert {e.style for e in entries} == {"dev", "ext", "sample"}
    assert {"elementwise", "reduction", "gather", "optimizer"} <= {e.category for e in entries}


@pytest.fixture(scope="module")
def outcomes():
    corpus = load()
    return corpus.check_all(corpus.manifest(), backend="cpu", quick=True)


@needs_gxx
@pytest.mark.timeout(600)   # the module fixture infers (with trial runs) and checks 20 kernels: ~200 s at load 5
def test_at_least_80_percent_pass_their_inferred_spec_unedited(outcomes):
    passed = [o for o in outcomes if o.status == "passed"]
    report = "\n".join(f"{o.status}: {o.file}:{o.kernel}: {o.summary} | notes: {o.notes}" for o in outcomes
                       if o.status != "passed")
    assert len(passed) >= 0.8 * len(outcomes), report
    for o in outcomes:
        if o.status != "passed":   # what to fill in is said
            assert o.notes, f"{o.kernel} failed and inference said nothing to check: {o.summary}"


@needs_gxx
def test_improved_versions_are_compared_with_their_naive_sibling(outcomes):
    corpus = load()
    naive_of = {e.kernel: e.naive for e in corpus.manifest() if e.naive}
    for o in outcomes:
        if o.kernel in naive_of and o.status == "passed":
            assert o.compared_with.startswith(f"kernel {naive_of[o.kernel]}"), (o.kernel, o.compared_with)


def test_every_corpus_file_passes_the_static_check():
    """NVRTC (the GPU backend's compiler) on every kernel of the corpus, with the project context
    each file has (compile_commands.json for the extension files)."""
    from astra_cuda import api
    for f in sorted(CORPUS.rglob("*.cu")):
        text = f.read_text()
        report = api.static_check(api.snapshot(text, str(f)))
        errors = [d for d in report.diagnostics if d.severity == "error"]
        assert not errors, (f, errors)
