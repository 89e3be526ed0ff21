"""One version of one document, read once: its text and path, the project context its units are
cut with, the parsed source model, and each kernel with its spec (loaded, or the errors that stop
it).

The facade (`astra_cuda.api`) takes a Snapshot instead of raw text, so whatever one save asks for —
kernels, diagnostics, a check, a profile — its text is parsed once. A Snapshot is immutable and
may be shared between threads; the language server keeps one per document version. `of` keeps
the last few, so an unchanged text (a pinned baseline, say) is not parsed again either.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .compile import extract
from .model import source
from .model import spec as spec_mod
from .diagnostics import Diagnostic
from .errors import AstraError, NoSuchKernel
from .compile.project import ProjectContext


@dataclass(frozen=True)
class KernelInfo:
    """A kernel of the snapshot with its spec: `spec` None and `spec_errors` empty when it has
    no spec comment."""

    kernel: source.Kernel
    spec: spec_mod.Spec | None
    spec_errors: tuple[Diagnostic, ...] = ()
    launches: tuple[source.LaunchSite, ...] = ()

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def spec_status(self) -> str:
        return "error" if self.spec_errors else ("ok" if self.spec is not None else "none")

    def to_json(self) -> dict[str, Any]:
        d = self.kernel.to_json()
        d["spec"] = self.spec_status
        d["spec_errors"] = [e.to_json() for e in self.spec_errors]
        d["launches"] = [s.to_json() for s in self.launches]
        if self.spec is not None:
            d["sizes"] = self.spec.sizes
            d["bench"] = self.spec.bench_cases()
        return d


@dataclass(frozen=True)
class Snapshot:
    path: str
    text: str
    model: source.SourceModel
    kernels: tuple[KernelInfo, ...]
    # Include paths, macros, standard (astra_cuda.compile.project); None: discovered from the path when a
    # unit is first needed (`api` does that), so listing kernels reads no project files.
    context: ProjectContext | None = None

    def with_context(self, context: ProjectContext) -> Snapshot:
        return dataclasses.replace(self, context=context)

    def kernel(self, name: str) -> KernelInfo:
        hits = [k for k in self.kernels if name in (k.kernel.name, k.kernel.qualified_name)]
        if hits:   # of overloads, the first with a spec above it (as `SourceModel.kernel`)
            return next((k for k in hits if k.kernel.spec is not None), hits[0])
        raise NoSuchKernel(f"no __global__ kernel named {name!r} in {self.path} "
                           f"(kernels: {', '.join(k.name for k in self.kernels) or 'none'})")

    def unit(self, kernel: str, spec: spec_mod.Spec) -> extract.CompileUnit:
        """The unit a check runs for `kernel` (see `extract.spec_unit`)."""
        return extract.spec_unit(self.model, self.path, kernel, spec, context=self.context)


def _kernel_info(k: source.Kernel, m: source.SourceModel) -> KernelInfo:
    spec: spec_mod.Spec | None = None
    errors: tuple[Diagnostic, ...] = ()
    if k.spec is not None:
        try:
            spec = spec_mod.load(k, m)
        except spec_mod.SpecErrors as e:
            errors = tuple(e.diagnostics)
        except AstraError as e:
            s = k.spec.span
            errors = (Diagnostic(s.start_line, s.start_col, s.start_line, s.start_col + 2, "error", e.message,
                                 code="spec"),)
    return KernelInfo(k, spec, errors, tuple(m.launches_of(k.name)))


@lru_cache(maxsize=16)
def of(text: str, path: str, context: ProjectContext | None = None) -> Snapshot:
    """The snapshot of `text` read from `path` (parsed once; the last few are kept)."""
    m = source.parse(text)
    return Snapshot(path, text, m, tuple(_kernel_info(k, m) for k in m.kernels), context)
