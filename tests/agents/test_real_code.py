"""The offline team on kernels in the shapes real code has (tests/agents/kernels/, and the corpus
in benchmarks/corpus/ when it is there): typedef'd and templated element types, no __restrict__,
one element per thread, one thread per row, shared-memory trees, capped grids, runtime strides.

Two things are checked: every rewrite a transformation proposes is one the gate's screen accepts
and NVRTC compiles (a proposal the gate would refuse is never made), and the team adopts the
right transformations on each kernel, every one verified, the final best passing the full gate."""
import pathlib

import pytest

from astra_cuda.compile import extract, project, static
from astra_cuda.model import launch_change, source, spec as spec_mod
from astra_cuda.agents import optimize
from astra_cuda.execution.evaluator import local_evaluator
from astra_cuda.agents.offline import TRANSFORMS, context_from_text
from astra_cuda.gate import screen

from agent_helpers import EXAMPLES, ROOT

KERNELS = pathlib.Path(__file__).parent / "kernels"
# kernel file -> kernel -> the transformations the team must adopt there (on the CPU: each verified)
EXPECTED = {
    ("gelu_bf16", "gelu_forward_kernel1"): {"coarsen"},
    ("residual_bf16", "residual_forward_kernel"): {"coarsen"},
    ("adamw_fp32", "adamw_kernel"): {"coarsen", "fast_math"},
    ("silu_norestrict", "silu_and_mul"): {"vectorize", "fast_math"},
    ("silu_strided", "silu_and_mul_kernel"): {"launch_shape", "unit_stride", "vectorize", "fast_math"},
    ("layernorm_naive", "layernorm_forward_kernel1"): {"rows", "vectorize"},
    ("softmax_naive", "softmax_forward_kernel1"): {"rows", "vectorize"},
    ("softmax_naive", "softmax_forward_online_kernel1"): {"rows", "vectorize"},
    ("rmsnorm_tree", "rmsnorm_kernel"): {"warp_reduce", "vectorize"},
    ("encoder_bf16", "encoder_forward_kernel"): {"coarsen"},   # the index split by division
}


CORPUS = ROOT / "benchmarks" / "corpus"


def corpus_kernels() -> list[tuple[str, str]]:
    """(path in the corpus, kernel) of every corpus kernel; its spec is the inferred one."""
    import tomllib
    if not (CORPUS / "corpus.toml").exists():
        return []
    return [(str(CORPUS / e["file"]), e["kernel"]) for e in tomllib.loads((CORPUS / "corpus.toml").read_text())["kernel"]]


@pytest.fixture(scope="module")
def inferred(tmp_path_factory):
    """A copy of the corpus with each kernel's inferred spec pasted above it (as its runner does)."""
    import sys
    sys.path.insert(0, str(CORPUS))
    import corpus
    dest = tmp_path_factory.mktemp("corpus") / "corpus"
    # Drafts not run: this module checks the transformations, not inference, and twenty trial runs
    # took more than the 300 s a test may on a loaded 2-core machine.
    corpus.with_inferred_specs(CORPUS, dest, corpus.manifest(CORPUS), run=False)
    return dest


def all_kernels() -> list[tuple[str, str]]:
    return ([(str(ROOT / rel), k) for rel, k in EXAMPLES.values()] +
            [(str(KERNELS / f"{f}.cu"), k) for f, k in EXPECTED] + corpus_kernels())


def loaded(path, kernel):
    text = pathlib.Path(path).read_text()
    m = source.parse(text)
    k = m.kernel(kernel)
    if k is None or k.spec is None:
        pytest.skip(f"{kernel} has no spec in {path}")
    try:
        return text, spec_mod.load(k, m)
    except spec_mod.SpecErrors as e:
        pytest.skip(f"{kernel}: spec does not load ({e})")


@pytest.mark.parametrize("path,kernel", all_kernels(), ids=lambda x: pathlib.Path(x).stem if "/" in str(x) else x)
def test_every_proposal_passes_the_screen_and_compiles(path, kernel, request):
    if path.startswith(str(CORPUS)):
        path = str(request.getfixturevalue("inferred") / pathlib.Path(path).relative_to(CORPUS))
    text, sp = loaded(path, kernel)
    context = project.resolve(path)
    ref = extract.spec_unit(source.parse(text), path, kernel, sp, context=context)
    ctx = context_from_text(kernel, text, sp)
    proposed = 0
    for name, t in TRANSFORMS.items():
        rw = t.apply(text, ctx)
        if rw is None:
            continue
        proposed += 1
        cand = extract.spec_unit(source.parse(rw.text), path, kernel, sp, context=context)
        res = screen.screen(ref.source, cand.source, kernel, sp)
        assert not res.errors, f"{name}: the screen refuses it: {res.errors[0].message}"
        _, problem = launch_change.candidate_spec(sp, source.parse(text), source.parse(rw.text), kernel)
        assert not problem, f"{name}: {problem}"
        if static.available() is not None:
            r = static.compile_unit(cand)
            assert r.ok and not [d for d in r.diagnostics if d.severity == "error"], f"{name}: {r.log[-1500:]}"
    if path.startswith(str(KERNELS)):
        assert proposed, f"no transformation applies to {kernel}"


@pytest.fixture(scope="module")
def cpu():
    try:
        from astra_cuda.backends.cpu import CpuBackend
        return CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel", list(EXPECTED), ids=lambda x: x)
def test_offline_team_on_real_code(name, kernel, cpu):
    path = str(KERNELS / f"{name}.cu")
    text, sp = loaded(path, kernel)
    quick = local_evaluator(path, kernel, sp, cpu, text, quick=True)
    r = optimize(text, path, kernel, quick, rounds=8, spec=sp)
    adopted = {x.plan.idea for x in r.rounds if x.adopted}
    assert EXPECTED[(name, kernel)] <= adopted, r.summary_markdown()
    assert all(x.evaluation.passed for x in r.rounds if x.evaluation is not None), r.summary_markdown()
    assert all(x.plan.why for x in r.rounds), "every plan says why it was chosen"
    full = local_evaluator(path, kernel, sp, cpu, text)(r.best)
    assert full.passed, full.check.feedback
