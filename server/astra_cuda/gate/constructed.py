"""Objects of a class the host builds (`{ construct = "uint_fastdiv(page_size)" }`, a kernel
parameter or a struct's field: `astra_cuda.model.construct`), as the gate launches them: the
constructor program built once per module by the backend's compiler (`Backend.build_host`) and run
confined once per case (`compile.hostprog.run`), its bytes kept per case. `gate.checks.launch_args`
passes a parameter's bytes by value and writes a field's where the struct's layout puts it."""
from __future__ import annotations

from typing import Any

from ..backends.base import Backend, LaunchError, Module
from ..compile import hostprog
from ..model import construct, layout
from ..model.spec import Spec

INT_MAX = (1 << 31) - 1


class Objects:
    """The spec's constructed objects of one module: `at(sizes)` their bytes, in `names`' order."""

    def __init__(self, spec: Spec, backend: Backend, module: Module, params: list[str]):
        self.names: list[str] = []
        targets: list[construct.Target] = []
        for i, p in enumerate(params):
            a = spec.args.get(p)
            if a is not None and a.construct:
                targets.append(construct.Target(i, "", a.construct))
                self.names.append(a.name)
            elif a is not None and a.struct and not a.records:
                for path in a.fields:
                    m = spec.args.get(f"{p}.{path}")
                    if m is not None and m.construct:
                        targets.append(construct.Target(i, path, m.construct))
                        self.names.append(m.name)
        self.sizes = sorted(set().union(*(construct.sizes_used(t.expression) for t in targets)))
        unit = module.unit
        if unit is None:
            raise LaunchError("an object a constructor builds: the module was not compiled from a unit")
        helpers = "" if layout.HELPERS in unit.appendix else layout.HELPERS
        main = construct.program(unit.name_expression, targets, self.sizes, helpers)
        self.program = backend.build_host(module, main)
        self._seen: dict[tuple[int, ...], list[bytes]] = {}

    def at(self, sizes: dict[str, int]) -> list[bytes]:
        key = tuple(int(sizes[n]) for n in self.sizes)
        if key not in self._seen:
            for n, v in zip(self.sizes, key):
                if not -INT_MAX - 1 <= v <= INT_MAX:
                    raise LaunchError(f"size {n} = {v} does not fit the int a constructor is given")
            out = hostprog.run(self.program, [str(v) for v in key])
            try:
                self._seen[key] = construct.parse_output(out, len(self.names))
            except ValueError as e:
                raise LaunchError(str(e)) from None
        return self._seen[key]


class Constructed:
    """One object of `Objects`: what `arg_types` records for a constructed argument."""

    def __init__(self, objects: Objects, index: int):
        self.objects, self.index = objects, index

    def at(self, sizes: dict[str, int]) -> bytes:
        return self.objects.at(sizes)[self.index]


def arg_types(spec: Spec, backend: Backend, module: Module, params: list[str]) -> dict[str, Any]:
    """Each constructed argument's `Constructed` (none where the spec gives none)."""
    if not any(a.construct for a in spec.args.values()):
        return {}
    objects = Objects(spec, backend, module, params)
    return {n: Constructed(objects, k) for k, n in enumerate(objects.names)}
