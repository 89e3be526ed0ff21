import os

from astra_cuda.model import source, spec as spec_mod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def example_path(name: str) -> str:
    return os.path.join(ROOT, "examples", f"{name}.cu")


def example_spec(name: str, kernel: str | None = None):
    model = source.parse(open(example_path(name)).read())
    k = model.kernel(kernel or {"fused_add_rmsnorm": "fused_add_rmsnorm_kernel"}.get(name, name))
    return spec_mod.load(k, model)
