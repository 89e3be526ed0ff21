import pathlib

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = {
    "silu_and_mul": ("examples/silu_and_mul.cu", "silu_and_mul"),
    "fused_add_rmsnorm": ("examples/fused_add_rmsnorm.cu", "fused_add_rmsnorm_kernel"),
    "merge_attn_states": ("examples/merge_attn_states.cu", "merge_attn_states"),
}


def example(name: str) -> tuple[str, str, str]:
    rel, kernel = EXAMPLES[name]
    return (ROOT / rel).read_text(), str(ROOT / rel), kernel




def loaded_kernel(path: pathlib.Path, kernel: str, text: str | None = None):
    """(text, spec) of `kernel` in `text`, else in the file at `path`."""
    from astra_cuda.model import source, spec as spec_mod
    text = text or path.read_text()
    m = source.parse(text)
    return text, spec_mod.load(m.kernel(kernel), m)


def cpu_evaluator(path, kernel):
    """The quick gate on the CPU backend for `kernel` in the file at `path` (its spec the file's);
    skips the test where the CPU backend cannot run."""
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, sp = loaded_kernel(pathlib.Path(path), kernel)
    return local_evaluator(str(path), kernel, sp, backend, text, quick=True)


def silu_evaluator():
    """(text, path, kernel, spec, evaluate) for silu_and_mul on the CPU backend (quick gate);
    skips the test where the CPU backend cannot run."""
    from astra_cuda.model import source, spec as spec_mod
    from astra_cuda.execution.evaluator import local_evaluator
    try:
        from astra_cuda.backends.cpu import CpuBackend
        backend = CpuBackend()
    except Exception as e:  # noqa: BLE001 - any reason means this machine cannot run it
        pytest.skip(f"CPU backend unavailable: {e}")
    text, path, kernel = example("silu_and_mul")
    m = source.parse(text)
    sp = spec_mod.load(m.kernel(kernel), m)
    return text, path, kernel, sp, local_evaluator(path, kernel, sp, backend, text, quick=True)
