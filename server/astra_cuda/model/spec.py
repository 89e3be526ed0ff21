"""The harness spec: how to run a kernel, as a TOML block comment directly above it.

    /* @astra
    grid = ["num_tokens"]
    block = ["min(d, 1024)"]
    [sizes]
    num_tokens = [1, 7, 333]
    d = [128, 1001, 4096]
    [args]
    out   = { type = "half", shape = ["num_tokens", "d"], output = true }
    input = { type = "half", shape = ["num_tokens", "2 * d"] }
    d     = "d"
    */

This format is a user-facing contract (README.md documents every key). `load` turns the comment
into a validated `Spec` or raises `SpecErrors` whose diagnostics point at the line and column
inside the comment. `infer` proposes a spec for a kernel that has none.

The spec's parts: the value and the format's keys and limits (`harness`, whose names this module
gives too, as every caller reads them here), the checks `load` runs (`spec_check`), where each key
is in the comment (`spec_places`) and the `instantiate` argument list (`template_list`).
"""
from __future__ import annotations

from ..diagnostics import Diagnostic
from ..errors import AstraError
from .harness import (ARRAY_KEYS, ArgSpec, DEFAULT_MAX_CASES, FIELD_STEP, INITS, Init, MAX_CASES_CAP,
                       MAX_CASE_BYTES, MAX_COMBINATIONS, MAX_FIELDS, MAX_FIELD_DEPTH, MAX_SEEDS,
                       MAX_SIZE_NAMES, MAX_SIZE_VALUES, MAX_SPEC_CHARS, MAX_SPEC_ERRORS, MAX_TABLE_ENTRIES,
                       NULL, SCALAR_KEYS, Spec, SpecErrors, TOP_KEYS, arg_path, combinations, parse_init)
from .source import Kernel, SourceModel
from .spec_cases import check_cases
from .spec_check import Validator, toml_of
from .spec_places import Locator, diag, did_you_mean
from .template_list import MAX_INSTANTIATE_CHARS, parse_template_args, split_template_args

__all__ = ["ARRAY_KEYS", "ArgSpec", "DEFAULT_MAX_CASES", "FIELD_STEP", "INITS", "Init", "MAX_CASES_CAP",
           "MAX_CASE_BYTES", "MAX_COMBINATIONS", "MAX_FIELDS", "MAX_FIELD_DEPTH", "MAX_INSTANTIATE_CHARS",
           "MAX_SEEDS", "MAX_SIZE_NAMES", "MAX_SIZE_VALUES", "MAX_SPEC_CHARS", "MAX_SPEC_ERRORS",
           "MAX_TABLE_ENTRIES", "NULL", "SCALAR_KEYS", "Spec", "SpecErrors", "TOP_KEYS", "arg_path",
           "check_cases", "combinations", "did_you_mean", "load", "parse_init", "parse_template_args",
           "split_template_args", "validate"]


def load(kernel: Kernel, model: SourceModel | None = None) -> Spec:
    """Parse and validate the kernel's spec comment. Raises SpecErrors (all problems found)."""
    if kernel.spec is None:
        raise AstraError(f"kernel {kernel.name!r} has no harness spec (a /* @astra ... */ comment above it); "
                         f"run `astra spec FILE --kernel {kernel.name}` to get a proposed one")
    loc = Locator(kernel)
    if len(kernel.spec.body) > MAX_SPEC_CHARS:
        s = kernel.spec.span
        raise SpecErrors([diag(s.start_line, s.start_col, s.start_col + 2,
                                f"the spec comment is {len(kernel.spec.body):,} characters long (at most "
                                f"{MAX_SPEC_CHARS:,}): a harness spec is a few lines")])
    v = Validator(kernel, model, loc, toml_of(kernel, loc))
    v.top_keys()
    grid, block = v.dim_list("grid"), v.dim_list("block")
    shared_mem = str(v.data.get("shared_mem", "0"))
    sizes, bench = v.sizes()
    v.launch(grid, block, shared_mem)
    require, flops = v.require(), v.flops()
    reference = v.reference()
    instantiate, targs = v.instantiate()
    seeds, max_cases = v.counts()
    args = v.args(targs)
    if v.errors:
        raise SpecErrors(sorted(v.errors, key=lambda d: (d.line, d.col))[:MAX_SPEC_ERRORS])
    spec = Spec(kernel=kernel.name, grid=grid, block=block, shared_mem=shared_mem, reference=reference,
                instantiate=instantiate, require=require, sizes=sizes, bench=bench, args=args,
                flops=flops, seeds=seeds, max_cases=max_cases, template_args=targs)
    check_cases(spec, kernel, loc)
    return spec


def validate(kernel: Kernel, model: SourceModel | None = None) -> list[Diagnostic]:
    if kernel.spec is None:
        return []
    try:
        load(kernel, model)
    except SpecErrors as e:
        return e.diagnostics
    except AstraError as e:
        return [diag(kernel.spec.span.start_line, kernel.spec.span.start_col,
                      kernel.spec.span.start_col + 2, e.message)]
    return []
