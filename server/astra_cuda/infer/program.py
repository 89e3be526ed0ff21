"""The program around a kernel: the file and the source files beside it (where projects keep their
launchers: bitsandbytes' `ops.cu`, cuda-samples' `reduction.cpp`), each read as a source model.

Every way a project launches a kernel is read as the `kernel<<<grid, block, smem>>>(args)` it
stands for, so one reader of launches serves them all: a launch through a function pointer
(`kernel = &copySharedMem; ... kernel<<<grid, threads>>>(...)`), `cudaLaunchKernelEx(&config,
kernel, args...)` with `config.gridDim = ...`, and `cudaLaunchKernel((void*)kernel, grid, block,
args, smem, stream)` with `void* args[] = {&a, &b}`. The calls of each host function (with their
template arguments) say what its template parameters and size parameters are bound to.

Long because every way of launching (the chevrons, the three launch APIs, a pointer to the kernel,
a launcher's loop) is read here into the one `LaunchSite` form, so the readers stay together.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache

from tree_sitter import Node

from ..compile import confine
from .. import files
from . import launcher_loops
from ..model import source
from ..errors import AstraError
from ..compile.project import ProjectContext
from ..model.source import LaunchSite, SourceModel
from ..model.source_builder import Builder
from ..model.syntax import declarator_name, function_declarator, text as _text, walk as _walk

SIBLING_EXTS = (".cu", ".cuh", ".cpp", ".cc", ".cxx")
MAX_SIBLINGS = 24            # files beside the kernel's that are read for launchers
MAX_SIBLING_BYTES = 1 << 20  # a larger file beside it is not read for launchers
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel")


@dataclass(frozen=True)
class Call:
    """One call of a host function: `runTest<float>(argc, argv, 32)`."""
    function: str
    template_args: tuple[str, ...]
    args: tuple[str, ...]
    caller: str | None          # the function the call is written in
    model: SourceModel
    # (the switch's subject, the case's value) where the call stands in `case V:` of `switch (x)`
    case: tuple[str, str] | None = None


class Program:
    """The file's model and its siblings' (read under the compilers' read policy)."""

    def __init__(self, model: SourceModel, path: str | None = None, context: ProjectContext | None = None):
        self.model = model
        self.models: list[SourceModel] = [model]
        self._headers: list[str] = []
        self._rewritten: dict[int, SourceModel] = {}
        self._includers: list[SourceModel] = []
        self._elsewhere: list[SourceModel] = []   # host functions of the project's headers (`add_functions`)
        if path is not None:
            self.models += _siblings(path, context or ProjectContext(), self._includers)
            self._headers = _headers_beside(path, context or ProjectContext())

    def launches(self, kernel: str) -> list[tuple[LaunchSite, SourceModel]]:
        """Every launch of `kernel` in the program, with the model it is written in."""
        short = kernel.split("::")[-1]
        out = []
        for m in self.models:
            sites = [(s, m) for s in launches_in(m, short)]
            # a launcher whose loop steps a counter to a bound is read with the loop written out
            loops = launcher_loops.unrolled(m.text, short) if "<<<" in m.text and "while" in m.text else None
            if loops is not None:
                text, functions = loops
                rewritten = _model(text, "")
                self._rewritten[id(rewritten)] = m
                sites = [p for p in sites if p[0].function not in functions] + \
                    [(s, rewritten) for s in launches_in(rewritten, short) if s.function in functions]
            out += sites
        return out

    def original(self, model: SourceModel) -> SourceModel:
        """The model a launcher's rewritten model (`launches`) was read from; else itself."""
        return self._rewritten.get(id(model), model)

    def calls(self, function: str) -> list[Call]:
        short = function.split("::")[-1]
        return [c for m in self.models for c in _calls(m) if c.function == short]

    def calls_beside(self, function: str) -> list[Call]:
        """The calls of `function` in the program and in the files beside that include the kernel's
        header without launching anything (its translation unit, where a header's launcher is called;
        read for the values the callers pass, not for template arguments)."""
        short = function.split("::")[-1]
        return self.calls(function) + [c for m in self._includers for c in _calls(m) if c.function == short]

    def calls_in(self, function: str) -> list[Call]:
        """The calls written in a host function (the macros it uses included)."""
        short = function.split("::")[-1]
        return [c for m in self.models for c in _calls(m) if c.caller == short]

    def instantiations(self, kernel: str) -> list[tuple[str, ...]]:
        """The template arguments of the file's explicit instantiations of `kernel`
        (`template __global__ void kfunc<float, FILL>(...);`)."""
        from ..model.spec import split_template_args
        short = kernel.split("::")[-1]
        out = []
        for m in self.models:
            for item in m.items:
                head = item.text.split("(", 1)[0]
                if item.kind == "other" and head.lstrip().startswith("template") and "<" in head \
                        and head.split("<", 1)[0].split()[-1].split("::")[-1] == short and "{" not in item.text:
                    out.append(tuple(split_template_args("<" + head.split("<", 1)[1].rsplit(">", 1)[0] + ">")))
        return out

    def headers_beside(self) -> list[str]:
        """The texts of the headers beside the kernel's file (their enums name template arguments)."""
        return list(self._headers)

    def add_functions(self, texts: list[str]) -> None:
        """Host functions the project's headers define (TransformerEngine's `log2_ceil` in common.h):
        found by `function` where the program's files define none of that name."""
        self._elsewhere = [_model(t, "") for t in texts]

    def function_beside(self, name: str) -> tuple[Node, SourceModel] | None:
        """`function`, else a host function of the files beside that include the kernel's header
        (the launcher's caller there: apex's `fwd_cuda` reads `d2 = freqs.size(3)` for its header's
        dispatcher)."""
        found = self.function(name)
        short = name.split("::")[-1]
        for m in self._includers if found is None else []:
            fn = _functions(m.text)[1].get(short)
            if fn is not None:
                return fn, m
        return found

    def function(self, name: str) -> tuple[Node, SourceModel] | None:
        """A host function's definition by name (the first one), in the program's files, then in
        its headers' host functions."""
        short = name.split("::")[-1]
        for m in [*self.models, *self._elsewhere]:
            fn = _functions(m.text)[1].get(short)
            if fn is not None:
                return fn, m
        return None


def _siblings(path: str, context: ProjectContext, includers: list[SourceModel] | None = None) -> list[SourceModel]:
    """The files beside `path` that launch kernels; into `includers`, those that include `path`
    and launch nothing (a header's translation unit: the launcher's callers)."""
    here = os.path.dirname(os.path.abspath(path))
    policy = confine.for_unit([f"-I{here}", *context.options()])
    try:
        names = sorted(os.listdir(here))
    except OSError:
        return []
    out = []
    for name in names:
        full = os.path.join(here, name)
        if len(out) >= MAX_SIBLINGS or not name.endswith(SIBLING_EXTS) or os.path.abspath(full) == os.path.abspath(path):
            continue
        try:
            if not policy.allows(full) or os.path.getsize(full) > MAX_SIBLING_BYTES:
                continue
            text = files.read_source(full)
        except (OSError, AstraError):
            continue
        if "<<<" in text or any(api in text for api in LAUNCH_APIS):
            out.append(_model(text, full))
        elif includers is not None and os.path.basename(path) in text and any(
                os.path.basename(i.header) == os.path.basename(path) for i in _model(text, full).includes):
            includers.append(_model(text, full))
    return out


def _headers_beside(path: str, context: ProjectContext) -> list[str]:
    here = os.path.dirname(os.path.abspath(path))
    policy = confine.for_unit([f"-I{here}", *context.options()])
    out: list[str] = []
    try:
        names = sorted(n for n in os.listdir(here) if n.endswith((".h", ".cuh", ".hpp", ".hxx")))
    except OSError:
        return []
    for name in names[:MAX_SIBLINGS]:
        full = os.path.join(here, name)
        try:
            if policy.allows(full) and os.path.getsize(full) <= MAX_SIBLING_BYTES:
                out.append(files.read_source(full))
        except (OSError, AstraError):
            continue
    return out


@lru_cache(maxsize=64)
def _model(text: str, path: str) -> SourceModel:
    return source.parse(text, path=path)


def function_nodes(text: str) -> list[Node]:
    return _functions(text)[0]


@lru_cache(maxsize=64)
def _functions(text: str) -> tuple[list[Node], dict[str, Node]]:
    """The function definitions of `text`, and each one's first definition by its short name:
    inference asks for one function by name many times over (every helper at every launch), so a
    file is parsed and indexed once."""
    root = source.parser().parse(text.encode("utf-8")).root_node
    nodes = [n for n in _walk(root) if n.type == "function_definition"]
    by_name: dict[str, Node] = {}
    for fn in nodes:
        name = _function_name(fn)
        if name is not None:
            by_name.setdefault(name, fn)
    return nodes, by_name


def _function_name(fn: Node) -> str | None:
    name = declarator_name(function_declarator(fn.child_by_field_name("declarator")))[0]
    return name.split("::")[-1] if name else None


def _callee(node: Node | None) -> tuple[str, tuple[str, ...]]:
    """('name', template args) of a callee or a function named as a value: `ns::k<float, 4>`, `&k`."""
    from ..model.spec import split_template_args
    while node is not None and node.type in ("pointer_expression", "parenthesized_expression", "cast_expression"):
        node = node.child_by_field_name("argument") or node.child_by_field_name("value") or \
            (node.named_children[-1] if node.named_children else None)
    targs: tuple[str, ...] = ()
    while node is not None and node.type == "qualified_identifier":
        node = node.child_by_field_name("name")
    if node is not None and node.type == "template_function":
        args = node.child_by_field_name("arguments")
        targs = tuple(split_template_args(_text(args))) if args is not None else ()
        node = node.child_by_field_name("name")
    return (_text(node) if node is not None and node.type == "identifier" else ""), targs


@lru_cache(maxsize=64)
def _calls_cached(text: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...], str | None,
                                         tuple[str, str] | None]]:
    out = []
    macros = _function_macros(text)
    for fn in function_nodes(text):
        caller = _function_name(fn)
        for call in (n for n in _walk(fn) if n.type == "call_expression"):
            name, targs = _callee(call.child_by_field_name("function"))
            args = call.child_by_field_name("arguments")
            if name and args is not None:
                out.append((name, targs, tuple(_text(a) for a in args.named_children if a.type != "comment"), caller,
                            _case_of(call)))
            if name in macros:   # a call written by a macro of the file (sgl-kernel's `LAUNCH_SOFTMAX(T, 8, 4)`)
                out += [(n, t, a, caller, _case_of(call)) for n, t, a in _expanded_calls(macros[name], call)]
    return out


def _case_of(node: Node) -> tuple[str, str] | None:
    """(subject, value) of the nearest `case V:` of a `switch (subject)` around a node."""
    while node is not None and node.type not in ("function_definition", "case_statement"):
        node = node.parent
    switch = node.parent.parent if node is not None and node.parent is not None else None
    value = node.child_by_field_name("value") if node is not None and node.type == "case_statement" else None
    cond = switch.child_by_field_name("condition") if switch is not None and switch.type == "switch_statement" else None
    if value is None or cond is None:
        return None
    return " ".join(_text(cond).strip("() ").split()), _text(value).strip()


def _function_macros(text: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """The file's function-like macros: name -> (parameters, body)."""
    if "#define" not in text:
        return {}
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    root = source.parser().parse(text.encode("utf-8")).root_node
    for d in (n for n in _walk(root) if n.type == "preproc_function_def"):
        name, params, value = (d.child_by_field_name(f) for f in ("name", "parameters", "value"))
        if name is not None and params is not None and value is not None:
            names = tuple(_text(c) for c in params.named_children if c.type == "identifier")
            out[_text(name)] = (names, _text(value).replace("\\\n", " "))
    return out


def _expanded_calls(macro: tuple[tuple[str, ...], str], call: Node) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """The calls a macro's body makes with the call's arguments substituted (one level: the body's
    own macro calls are not expanded again), each as (name, template args, args)."""
    out = []
    for n in _walk(root) if (root := _expansion(macro, call)) is not None else ():
        if n.type == "call_expression" and (a := n.child_by_field_name("arguments")) is not None:
            name, targs = _callee(n.child_by_field_name("function"))
            if name:
                out.append((name, targs, tuple(_text(x) for x in a.named_children if x.type != "comment")))
    return out


def _calls(model: SourceModel) -> list[Call]:
    return [Call(n, t, a, c, model, k) for n, t, a, c, k in _calls_cached(model.text)]


def launches_in(model: SourceModel, kernel: str) -> list[LaunchSite]:
    """The launches of `kernel` written in one file: `<<<>>>` ones, then those through a function
    pointer or a launch API."""
    short = kernel.split("::")[-1]
    return model.launches_of(short) + _indirect_launches(model, short)


def _indirect_launches(model: SourceModel, kernel: str) -> list[LaunchSite]:
    """Launches of `kernel` written through a function pointer or a launch API, each read as
    the `<<<>>>` launch it stands for (the function rewritten, then parsed as launches are)."""
    if kernel not in model.text:
        return []
    out = []
    pickers = _pickers(model, kernel)
    for fn in function_nodes(model.text):
        body = _text(fn)
        if kernel not in body and not any(p in body for p in pickers):
            continue
        guards: dict[int, str] = {}
        edits = _rewrites(fn, kernel, pickers, guards)
        if not edits:
            continue
        data = fn.text
        for start, end, new in sorted(edits, reverse=True):
            data = data[:start - fn.start_byte] + new.encode() + data[end - fn.start_byte:]
        # where each guarded launch's edit lands in the rewritten text
        moved = {start - fn.start_byte + sum(len(n.encode()) - (e - b) for b, e, n in edits if b < start): cond
                 for start, cond in guards.items()}
        sub = Builder(data.decode("utf-8", errors="replace"))
        sub._launches(source.parser().parse(data).root_node)
        shift = fn.start_point[0]
        for site in sub.model.launches:
            if site.kernel.split("::")[-1] != kernel:
                continue
            line = site.span.start_line + shift   # where the launch is written in the file
            span = source.Span(line, 0, line, 0, fn.start_byte, fn.end_byte)
            conds = tuple(c for at, c in moved.items() if site.span.start_byte <= at < site.span.end_byte)
            out.append(replace(site, span=span, grid_var=_moved(site.grid_var, shift),
                               block_var=_moved(site.block_var, shift), conditions=site.conditions + conds))
    return out


def _moved(var, shift: int):
    return replace(var, line=var.line + shift) if var is not None and var.line is not None else var


@dataclass(frozen=True)
class Picker:
    """A host function that returns an instance of a kernel: the instance a launch through what it
    returns is read as, and the condition over its parameters under which it returns that one
    (`blocks_per_warp == 1`), or None."""
    instance: str
    condition: str | None
    params: tuple[str, ...]

    def condition_at(self, args: list[str]) -> str | None:
        """The condition with the call's arguments for the parameters."""
        if self.condition is None or len(args) != len(self.params):
            return None
        return _substituted(self.condition, dict(zip(self.params, (f"({a})" for a in args))))


def _pickers(model: SourceModel, kernel: str) -> dict[str, Picker]:
    """Host functions that return an instance of `kernel` (`fp_kernel pick(...) { if (a) return
    k<true, false>; ... return k<false, false>; }`, the returns written directly or by a macro of
    the file: `#define instance(n) if (bpw == n) return k<n>`): name -> the instance a launch through
    what they return is read as — the general one, with the fewest features switched on (`true`
    flags, larger numbers), as `launch_callers.pick_site` ranks launches — with the `if` it is returned under."""
    out: dict[str, Picker] = {}
    macros = _statement_macros(model)
    for fn in function_nodes(model.text):
        found: list[tuple[tuple[str, ...], str | None]] = []
        for node in _walk(fn):
            rets: list[Node] = []
            if node.type == "return_statement":
                rets = [node]
            elif node.type == "call_expression" and _text(node.child_by_field_name("function")) in macros:
                rets = _expanded_returns(macros[_text(node.child_by_field_name("function"))], node)
            for ret in rets:
                value = next((c for c in ret.named_children if c.type != "comment"), None)
                name, targs = _callee(value)
                if name == kernel:
                    found.append((targs, _guard(ret)))
        if found:
            def rank(item: tuple[tuple[str, ...], str | None]) -> tuple[int, int]:
                targs = item[0]
                return (sum(t.strip() == "true" for t in targs), sum(int(t) for t in targs if t.strip().isdigit()))
            best, cond = min(found, key=rank)
            out[_function_name(fn)] = Picker(kernel + (f"<{', '.join(best)}>" if best else ""), cond, _param_names(fn))
    return out


def _statement_macros(model: SourceModel) -> dict[str, tuple[tuple[str, ...], str]]:
    """The file's function-like macros whose body returns (`#define kernel_instance(bpw) if (...)
    return k<bpw>`): name -> (parameters, body)."""
    return {k: v for k, v in _function_macros(model.text).items() if "return" in v[1]}


def _expansion(macro: tuple[tuple[str, ...], str], call: Node) -> Node | None:
    """A macro's body with the call's arguments substituted, parsed as a function's body (None where
    the counts differ). The arguments are the call's text split at its commas: a type argument
    (`float`) is no expression node."""
    from ..model.exprs import split_top_level
    params, body = macro
    args_node = call.child_by_field_name("arguments")
    args = [a.strip() for a in split_top_level(_text(args_node).strip()[1:-1])] if args_node is not None else []
    if len(args) != len(params) or not body.strip():
        return None
    text = _substituted("void __astra_macro() { " + body + "; }", dict(zip(params, args)))
    return source.parser().parse(text.encode("utf-8")).root_node


def _expanded_returns(macro: tuple[tuple[str, ...], str], call: Node) -> list[Node]:
    """The return statements of a statement macro's body with the call's arguments substituted."""
    root = _expansion(macro, call)
    return [n for n in _walk(root) if n.type == "return_statement"] if root is not None else []


def _substituted(text: str, values: dict[str, str]) -> str:
    """C++ text with the identifiers named in `values` replaced (tokens, not substrings)."""
    data = text.encode("utf-8")
    root = source.parser().parse(data).root_node
    spots = [(n.start_byte, n.end_byte, values[_text(n)]) for n in _walk(root)
             if n.type in ("identifier", "type_identifier") and _text(n) in values]
    for start, end, new in sorted(spots, reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8", errors="replace")


def _guard(ret: Node) -> str | None:
    """The condition of the `if` a return is the whole `then` branch of (`if (n == 1) return k<1>;`)."""
    node, parent = ret, ret.parent
    while parent is not None and parent.type == "compound_statement" and len(parent.named_children) == 1:
        node, parent = parent, parent.parent
    if parent is None or parent.type != "if_statement" or node != parent.child_by_field_name("consequence"):
        return None
    cond = parent.child_by_field_name("condition")
    while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") \
            and len(cond.named_children) == 1:
        cond = cond.named_children[0]
    return _text(cond) if cond is not None else None


def _param_names(fn: Node) -> tuple[str, ...]:
    decl = function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    return tuple(declarator_name(p.child_by_field_name("declarator"))[0] or ""
                 for p in (plist.named_children if plist is not None else [])
                 if p.type in ("parameter_declaration", "optional_parameter_declaration"))


def _rewrites(fn: Node, kernel: str, pickers: dict[str, Picker] | None = None,
              guards: dict[int, str] | None = None) -> list[tuple[int, int, str]]:
    """(start, end, replacement) byte edits that turn the function's indirect launches of
    `kernel` into `<<<>>>` launches of it (a pointer a picker function returned included).
    `guards` gets, per launch through a picker's pointer (by the byte its edit starts at), the
    condition under which the picker returned that instance, in the launcher's terms."""
    picked: dict[str, str] = {}    # a local a picker set -> the picker's condition at that call
    pointers: dict[str, str] = {}   # a local naming the kernel -> 'kernel<targs>'
    fields: dict[str, str] = {}     # 'config.gridDim' -> its value
    field_sets: list[Node] = []     # those assignments: gone from the rewrite, so a dim3 they read stays followed
    arrays: dict[str, list[str]] = {}
    for n in _walk(fn):
        target = value = None
        if n.type == "assignment_expression":
            target, value = n.child_by_field_name("left"), n.child_by_field_name("right")
        elif n.type == "init_declarator":
            target, value = n.child_by_field_name("declarator"), n.child_by_field_name("value")
        if target is None or value is None:
            continue
        if target.type == "field_expression":
            fields[_text(target).replace(" ", "")] = _text(value)
            if _text(target).rsplit(".", 1)[-1].rsplit(">", 1)[-1] in ("gridDim", "blockDim", "dynamicSmemBytes"):
                field_sets.append(n)
            continue
        name = declarator_name(target)[0] if target.type != "identifier" else _text(target)
        if name is None:
            continue
        if value.type == "initializer_list":
            arrays[name] = [_text(c.child_by_field_name("argument") if c.type == "pointer_expression" else c)
                            for c in value.named_children if c.type != "comment"]
            continue
        callee, targs = _callee(value)
        if callee == kernel:
            pointers[name] = kernel + (f"<{', '.join(targs)}>" if targs else "")
        elif value.type == "call_expression" and (pickers or {}).get(_callee(value.child_by_field_name("function"))[0]):
            picker = (pickers or {})[_callee(value.child_by_field_name("function"))[0]]
            pointers[name] = picker.instance
            args_node = value.child_by_field_name("arguments")
            cond = picker.condition_at([_text(a) for a in args_node.named_children if a.type != "comment"]
                                       if args_node is not None else [])
            if cond is not None:
                picked[name] = cond
    edits = []
    for call in (n for n in _walk(fn) if n.type == "call_expression"):
        callee = call.child_by_field_name("function")
        args_node = call.child_by_field_name("arguments")
        if callee is None or args_node is None:
            continue
        kcs = next((c for c in call.children if c.type == "kernel_call_syntax"), None)
        if kcs is not None and callee.type == "identifier" and _text(callee) in pointers:
            edits.append((callee.start_byte, callee.end_byte, pointers[_text(callee)]))
            if guards is not None and _text(callee) in picked:
                guards[callee.start_byte] = picked[_text(callee)]
            continue
        api = _text(callee).split("::")[-1]
        args = [a for a in args_node.named_children if a.type != "comment"]
        if api not in LAUNCH_APIS or len(args) < 2:
            continue
        k_index = 1 if api == "cudaLaunchKernelEx" else 0
        name, targs = _callee(args[k_index])
        target = pointers.get(name) or (kernel + (f"<{', '.join(targs)}>" if targs else "") if name == kernel else None)
        if target is None:
            continue
        if api == "cudaLaunchKernelEx":
            cfg = _text(args[0]).replace(" ", "")
            cfg, sep = (cfg[1:], ".") if cfg.startswith("&") else (cfg, "->")
            grid = fields.get(f"{cfg}{sep}gridDim")
            block = fields.get(f"{cfg}{sep}blockDim")
            smem = fields.get(f"{cfg}{sep}dynamicSmemBytes", "0")
            kargs = [_text(a) for a in args[2:]]
        else:
            if len(args) < 4:
                continue
            grid, block = _text(args[1]), _text(args[2])
            smem = _text(args[4]) if len(args) > 4 else "0"
            listed = arrays.get(_text(args[3]))
            if listed is None:
                continue
            kargs = listed
        if grid is None or block is None:
            continue
        edits.append((call.start_byte, call.end_byte, f"{target}<<<{grid}, {block}, {smem}>>>({', '.join(kargs)})"))
    if any(e[2].count("<<<") for e in edits):
        edits += [(n.start_byte, n.end_byte, "0") for n in field_sets]
    return edits


def param_names(fn: Node) -> list[str]:
    """A function definition's parameter names, in order ("" for an unnamed one)."""
    decl = function_declarator(fn.child_by_field_name("declarator"))
    params = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in (params.named_children if params is not None else []):
        if p.type in ("parameter_declaration", "optional_parameter_declaration"):
            out.append(declarator_name(p.child_by_field_name("declarator"))[0] or "")
    return out
