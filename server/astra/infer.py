"""Propose a harness spec for a kernel that has none.

From the signature: const pointers are inputs, other pointers outputs, integer scalars are
sizes, float scalars get a value from their name. From a launch site in the same file: the
grid and block expressions, rewritten over the kernel's own parameter names. Sizes get
LLaMA-like values. Everything guessed is listed in `notes`, so the user knows what to check.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import dtypes, exprs
from .source import Kernel, LaunchSite, SourceModel

# LLaMA-7B/13B/70B-like sizes: (test sizes, bench sizes) by what a size name suggests.
_SIZE_HINTS = [
    (("token", "batch", "row", "seq", "m", "rows", "num_tokens", "bs"), [1, 7, 333], [4096]),
    (("head_dim", "headdim", "hd"), [64, 128], [128]),
    (("head", "heads", "nh"), [1, 32], [32, 40, 64]),
    (("hidden", "d", "dim", "n", "cols", "size", "k", "len", "numel", "count"), [128, 1001, 4096],
     [4096, 11008]),
]


@dataclass
class Proposal:
    comment: str
    notes: list[str] = field(default_factory=list)


def _size_values(name: str) -> tuple[list[int], list[int]]:
    low = name.lower()
    for keys, test, bench in _SIZE_HINTS:
        if low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys):
            return test, bench
    return [1, 100, 4096], [4096]


def _strip_dim3(expr: str) -> list[str]:
    """'dim3(a, b)' -> ['a', 'b']; 'a' -> ['a']."""
    e = expr.strip()
    if e.startswith("dim3(") and e.endswith(")"):
        return exprs.split_top_level(e[5:-1])
    return [e]


def _rewrite(expr: str, mapping: dict[str, str]) -> str | None:
    """Rename host variables to size names; None if the expression is not one we can evaluate."""
    e = expr.replace("std::min", "min").replace("std::max", "max")
    for cast in ("(int)", "(int64_t)", "(unsigned)", "static_cast<int>", "static_cast<int64_t>"):
        e = e.replace(cast, "")
    try:
        used = exprs.names(e)
    except exprs.ExprError:
        return None
    if not used <= set(mapping):
        return None
    import ast  # the mapping is applied on the parsed tree: no textual substitution
    tree = exprs.parse(e)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = mapping[node.id]
    return ast.unparse(tree.body)


def _site_mapping(kernel: Kernel, site: LaunchSite, size_names: list[str]) -> dict[str, str]:
    """Host expression -> size name, from the launch's argument list."""
    mapping = {n: n for n in size_names}
    for p, arg in zip(kernel.params, site.args):
        if p.name in size_names:
            mapping[arg.strip()] = p.name
    # Host variables named like a size are taken as that size.
    return mapping


def infer(kernel: Kernel, model: SourceModel) -> Proposal:
    notes: list[str] = []
    size_names = [p.name for p in kernel.params if not p.is_pointer and (
        (dtypes.from_cpp(p.base_type) or dtypes.BY_NAME["float"]).name.startswith(("int", "uint")))]
    if not size_names:
        size_names = ["n"]
        notes.append("no integer parameter to take sizes from: invented a size `n`; adjust shapes")
    grid, block = None, None
    sites = model.launches_of(kernel.name)
    if sites:
        site = sites[0]
        mapping = _site_mapping(kernel, site, size_names)
        # Plain host variables in the grid (e.g. `num_tokens`) become sizes of their own.
        for x in _strip_dim3(site.grid):
            try:
                for name in exprs.names(x.replace("std::min", "min").replace("std::max", "max")):
                    if name not in mapping and name.isidentifier():
                        mapping[name] = name
                        size_names.insert(0, name)
            except exprs.ExprError:
                pass
        g = [_rewrite(x, mapping) for x in _strip_dim3(site.grid)]
        b = [_rewrite(x, mapping) for x in _strip_dim3(site.block)]
        if all(g) and g:
            grid = g
        else:
            notes.append(f"grid `{site.grid}` (line {site.span.start_line + 1}) uses host values that are not "
                         f"kernel parameters: guessed a grid")
        if all(b) and b:
            block = b
        else:
            notes.append(f"block `{site.block}` (line {site.span.start_line + 1}) could not be rewritten over the "
                         f"sizes: guessed a block")
    else:
        notes.append("no launch site of this kernel in the file: grid and block are guesses")
    first = size_names[0]
    if grid is None:
        grid = [f"cdiv({first}, 256)"] if len(size_names) == 1 else [size_names[0]]
    if block is None:
        block = ["256"] if len(size_names) == 1 else [f"min({size_names[-1]}, 1024)"]

    lines = ["/* @astra", f"grid = {_toml_list(grid)}", f"block = {_toml_list(block)}"]
    if kernel.is_template:
        lines.append('instantiate = "<float>"  # CHECK: template arguments to test')
        notes.append("the kernel is a template: instantiate is a guess")
    lines += ["", "[sizes]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[0]}")
    lines += ["", "[bench]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[1]}")
    lines += ["", "[args]"]
    pointer_shape = _toml_list(size_names if len(size_names) <= 2 else size_names[:2])
    width = max(len(p.name) for p in kernel.params) if kernel.params else 0
    for p in kernel.params:
        dt = dtypes.from_cpp(p.base_type)
        if p.is_pointer:
            tname = dt.name if dt else "float"
            if dt is None:
                notes.append(f"`{p.name}`: element type {p.base_type!r} unknown, assumed float")
            role = "" if p.is_const else ", output = true"
            if not p.is_const:
                notes.append(f"`{p.name}` is a non-const pointer: assumed an output (use inout = true if the "
                             f"kernel also reads it)")
            lines.append(f'{p.name:<{width}} = {{ type = "{tname}", shape = {pointer_shape}{role} }}')
        elif p.name in size_names:
            lines.append(f'{p.name:<{width}} = "{p.name}"')
        else:
            low = p.name.lower()
            value = "1e-6" if "eps" in low else "1.0"
            if dt is None:
                lines.append(f'{p.name:<{width}} = {{ value = {value}, type = "float" }}')
                notes.append(f"`{p.name}`: type {p.type!r} unknown, assumed float")
            else:
                lines.append(f"{p.name:<{width}} = {value}")
                notes.append(f"`{p.name}` = {value} is a guess")
    for n in size_names:
        if kernel.param(n) is None:
            notes.append(f"size `{n}` comes from the launch site's grid; it is not a kernel parameter")
    if any(p.is_pointer for p in kernel.params):
        notes.append(f"array shapes are guesses ({pointer_shape}): set each to the real extent")
    lines.append("*/")
    return Proposal("\n".join(lines) + "\n", notes)


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"
