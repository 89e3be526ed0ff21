"""Where and how a kernel is launched: the launch site to read, its grid, block and shared memory
rewritten over the kernel's sizes (dim3 variables and the launcher's locals followed, macros and
constants by value, a block size the caller chooses taken as a default)."""
from __future__ import annotations

from .. import exprs, source
from ..source import ConfigVar, Kernel, LaunchSite, SourceModel
from ..syntax import walk as _walk
from .hostexprs import _HostExprs
from .types import split

def _strip_dim3(expr: str) -> list[str]:
    """'dim3(a, b)' -> ['a', 'b']; 'a' -> ['a']."""
    e = expr.strip()
    if e.startswith("dim3(") and e.endswith(")"):
        return exprs.split_top_level(e[5:-1])
    return [e]


def _config_parts(what: str, text: str, var: ConfigVar | None, line: int, notes: list[str]) -> list[str]:
    """The host expressions of a launch's grid or block: a local dim3's constructor arguments
    when the launch names one we could follow, else the text as written."""
    if var is not None and var.dims is not None:
        return list(var.dims)
    if var is not None:
        notes.append(f"{what} `{var.name}` (line {line}) is a dim3 that {var.problem}: "
                     f"its value was not followed")
    return _strip_dim3(text)


def _site_mapping(kernel: Kernel, site: LaunchSite, size_names: list[str]) -> dict[str, str]:
    """Host expression -> size name, from the launch's argument list."""
    mapping = {n: n for n in size_names}
    for p, arg in zip(kernel.params, site.args):
        if p.name in size_names:
            mapping[arg.strip()] = p.name
    return mapping


# ---- reading the launching function ---------------------------------------------------------

BLOCK_DEFAULT = 256
RUNTIME = "<runtime>"       # a host local set through its address by a call (a device query)
RUNTIME_DEFAULT = 4         # such a value in a grid: a grid-stride kernel covers its sizes with any grid
_BLOCK_WORDS = ("block", "thread", "tpb", "nthreads", "num_threads", "bs")


def _host_locals(model: SourceModel, site: LaunchSite) -> dict[str, str]:
    """Plain local variables of the launching function with one initialised declaration and no
    later assignment (`const int grid_size = ceil_div(N, block_size);`): name -> initializer."""
    if site.function is None:
        return {}
    tree = source.parser().parse(model.text.encode("utf-8")).root_node
    fn = next((n for n in _walk(tree) if n.type == "function_definition" and source._declarator_name(
        source._function_declarator(n.child_by_field_name("declarator")))[0] == site.function), None)
    if fn is None:
        return {}
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    changed: set[str] = set()
    for n in _walk(fn):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                name = source._declarator_name(d)[0]
                if name is None:
                    continue
                counts[name] = counts.get(name, 0) + 1
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if value is not None and value.type not in ("initializer_list", "argument_list"):
                    out[name] = value.text.decode()
        elif n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is not None and target.type == "identifier":
                changed.add(target.text.decode())
    for n in _walk(fn):   # `cudaDeviceGetAttribute(&sms, ...)`: a value the host reads at run time
        if n.type == "pointer_expression" and n.child_by_field_name("operator") is not None \
                and n.child_by_field_name("operator").type == "&":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and arg.text.decode() in out:
                out[arg.text.decode()] = RUNTIME
    return {k: v for k, v in out.items() if counts.get(k) == 1 and (k not in changed or v == RUNTIME)}


def _launch_of(kernel: Kernel, model: SourceModel, site: LaunchSite, size_names: list[str],
               notes: list[str]) -> tuple[list[str] | None, list[str] | None, str | None, list[str]]:
    """(grid, block, shared memory, new sizes) over the kernel's sizes, read from a launch site: dim3 variables
    and plain locals followed to their definitions, macros and constants by value; a block size
    the caller chooses (a launcher's `block_size` parameter) becomes 256, with a note."""
    line = site.span.start_line + 1
    where = f"line {line}" + (f", through macro {site.via_macro}" if site.via_macro else "")
    mapping = _site_mapping(kernel, site, size_names)
    grid_parts = _config_parts("grid", site.grid, site.grid_var, line, notes)
    block_parts = _config_parts("block", site.block, site.block_var, line, notes)
    local = _host_locals(model, site)
    for name in [k for k, v in local.items() if v == RUNTIME]:
        local[name] = str(RUNTIME_DEFAULT)
        if any(name in x for x in grid_parts + block_parts):
            notes.append(f"`{name}` is read from the device at run time ({where}): took {RUNTIME_DEFAULT}")
    # A local holding a bare number is a launch choice in a block (`const int threads = 256`)
    # but the problem's size in a grid (`const int num_tokens = 16` in main): that stays a size.
    literal = {k for k, v in local.items() if source.parse_expression(v) is not None
               and source.parse_expression(v).type == "number_literal"}
    block_values = {**model.constants, **local}
    runtime = {k for k, v in local.items() if v == str(RUNTIME_DEFAULT) and k in literal}
    grid_values = {**model.constants, **{k: v for k, v in local.items()
                                         if k not in literal or k in runtime or any(w in k.lower() for w in _BLOCK_WORDS)}}
    free: list[str] = []
    for x in grid_parts:
        _HostExprs(mapping, grid_values).spec(x, free)
    for x in block_parts:
        _HostExprs(mapping, block_values).spec(x, free)
    chosen = [f for f in free if any(w in f.lower() for w in _BLOCK_WORDS) and f not in size_names]
    for f in chosen:
        grid_values[f] = block_values[f] = str(BLOCK_DEFAULT)
        notes.append(f"block size `{f}` is chosen by the caller ({where}): took {BLOCK_DEFAULT}")
    new_sizes = [f for f in free if f not in chosen]
    for name in new_sizes:
        mapping[name] = name
    g = [_HostExprs(mapping, grid_values).spec(x) for x in grid_parts]
    b = [_HostExprs(mapping, block_values).spec(x) for x in block_parts]
    shared = None
    if site.shared_mem and site.shared_mem.strip() not in ("0", "0u"):
        shared = _HostExprs(mapping, block_values).spec(site.shared_mem)
        if shared is None:
            notes.append(f"dynamic shared memory `{site.shared_mem}` ({where}) could not be read over the sizes: "
                         f"set shared_mem")
    grid = g if g and all(g) else None
    block = b if b and all(b) else None
    if grid is None:
        notes.append(f"grid `{site.grid}` ({where}) could not be read over the sizes: guessed a grid")
    if block is None:
        notes.append(f"block `{site.block}` ({where}) could not be read over the sizes: guessed a block")
    return grid, block, shared, [n for n in new_sizes if grid is not None and any(n in exprs.names(x) for x in grid)]


def _pick_site(kernel: Kernel, model: SourceModel) -> LaunchSite | None:
    """The launch to read: one outside `main` first (a launcher function says what the kernel
    expects; `main` often loops over block sizes)."""
    sites = model.launches_of(kernel.name)
    if not sites:
        return None
    # outside main first; among launches that differ in template arguments, the general one
    # (`<scalar_t, 1>` rather than the `<scalar_t, 8>` a launcher takes only for aligned widths)
    def rank(s: LaunchSite):
        numbers = [int(t) for t in split(s.template_args or "<>") if t.strip().isdigit()]
        return (s.function == "main", sum(numbers))
    return min(sites, key=rank)
