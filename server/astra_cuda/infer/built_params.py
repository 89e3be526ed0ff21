"""A kernel parameter of a class of its own that the launcher builds from a size (issue 25, item
6): the class has a host constructor of one integer parameter (`constructs.number_class`: the
divisor class of FlashInfer's `uint_fastdiv(uint32_t d)`), and every launch hands the kernel one
built from a value of the launcher — in place (`k<<<g, b>>>(fastdiv(rows), …)`) or as a local
(`fastdiv by(rows); k<<<g, b>>>(by, …)`, `auto by = fastdiv(rows);`).

`split` writes the kernel into a copy of the file with that parameter of the constructor's
integer type and each launch passing the value it built the object from, so the rest of
inference reads it as any size; `written_back` turns the proposal's value for it into
`{ construct = "ns::C(value)" }` (`model/construct`), which the validator runs as it runs a
hand-written one. Pure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import source
from ..model.source import Kernel, SourceModel
from ..model.syntax import walk
from .constructs import number_class
from .program import launches_in
from .structs import enclosing_function, function_at, launch_call, plain_type


@dataclass(frozen=True)
class Built:
    model: SourceModel
    kernel: Kernel
    classes: dict[str, str]   # parameter -> the class, qualified, whose constructor builds it


def _value(arg, fn, short: str) -> str | None:
    """The launcher's value an argument built the object from: `C(x)` in place, or a local
    `C v(x);` / `C v{x};` / `C v = C(x);` / `auto v = C(x);` named by the argument."""
    if arg.type == "call_expression":
        f, args = arg.child_by_field_name("function"), arg.child_by_field_name("arguments")
        if f is not None and args is not None and f.text.decode().split("::")[-1] == short \
                and len(args.named_children) == 1:
            return args.named_children[0].text.decode()
        return None
    if arg.type != "identifier" or fn is None:
        return None
    found = []
    for d in walk(fn):
        if d.type == "function_declarator" and d.parent is not None and d.parent.type == "declaration" and \
                d.child_by_field_name("declarator") is not None and \
                d.child_by_field_name("declarator").text.decode() == arg.text.decode():
            # `C v(x);` in a function's body, which the grammar reads as a function's declaration
            # (x a type): the local built from x
            decl_type = d.parent.child_by_field_name("type")
            ps = d.child_by_field_name("parameters")
            only = ps.named_children if ps is not None else []
            if decl_type is None or decl_type.text.decode().split("::")[-1] != short or len(only) != 1 or \
                    only[0].child_by_field_name("declarator") is not None or \
                    only[0].child_by_field_name("type") is None:
                return None
            found.append(only[0].child_by_field_name("type").text.decode())
            continue
        if d.type != "init_declarator" or d.child_by_field_name("declarator") is None or \
                d.child_by_field_name("declarator").text.decode() != arg.text.decode():
            continue
        decl_type = d.parent.child_by_field_name("type") if d.parent is not None else None
        named = decl_type.text.decode().split("::")[-1] if decl_type is not None else ""
        init = d.child_by_field_name("value")
        if init is None:
            init = next((c for c in d.named_children if c.type in ("argument_list", "initializer_list")), None)
        if init is not None and init.type in ("argument_list", "initializer_list") and named == short \
                and len(init.named_children) == 1:
            found.append(init.named_children[0].text.decode())
        elif init is not None and init.type == "call_expression" and named in (short, "auto"):
            found.append(_value(init, None, short))
        else:
            return None
    return found[0] if len(found) == 1 else None


def split(kernel: Kernel, model: SourceModel, items) -> Built | None:
    """The file with each such parameter of the constructor's integer type and every launch
    passing the value it was built from; None where the kernel has none, or a launch builds one
    otherwise (then the parameter stays a class, refused as before)."""
    classes = {p.name: number_class(plain_type(p.base_type), items) for p in kernel.params if not p.is_pointer}
    classes = {n: c for n, c in classes.items() if c[0]}
    if not classes:
        return None
    data = model.text.encode("utf-8")
    root = source.parser().parse(data).root_node
    sites = launches_in(model, kernel.name)
    edits: list[tuple[int, int, str]] = []
    index = {p.name: i for i, p in enumerate(kernel.params)}
    for name, (cls, _) in list(classes.items()):
        found: list[tuple[int, int, str]] = []
        for site in sites:
            call = launch_call(root, site)
            args = call.child_by_field_name("arguments") if call is not None else None
            a = args.named_children[index[name]] if args is not None and index[name] < len(args.named_children) \
                else None
            value = _value(a, enclosing_function(call), cls.split("::")[-1]) if a is not None else None
            if value is None:
                found = []
                break
            found.append((a.start_byte, a.end_byte, f"({value})"))
        if not found:
            del classes[name]
        edits += found
    if not classes or function_at(root, kernel.span.start_byte, kernel.name) is None:
        return None
    edits += [(p.span.start_byte, p.span.end_byte, f"{classes[p.name][1]} {p.name}")
              for p in kernel.params if p.name in classes]
    out = bytearray(data)
    for start, end, new in sorted(set(edits), reverse=True):
        out[start:end] = new.encode("utf-8")
    m = source.parse(out.decode("utf-8"), model.items[0].path if model.items else None)
    k = next((k for k in m.kernels if k.qualified_name == kernel.qualified_name), None)
    return Built(m, k, {n: c for n, (c, _) in classes.items()}) if k is not None else None


def written_back(comment: str, classes: dict[str, str]) -> str:
    """The proposal with each built parameter's value handed to its class's constructor."""
    lines, table = comment.split("\n"), ""
    for i, line in enumerate(lines):
        if line.startswith("["):
            table = line.strip()
        m = re.match(r"(\w+)(\s*)=\s*(\"[^\"]*\"|-?\d+)\s*$", line)
        if table == "[args]" and m is not None and m.group(1) in classes:
            lines[i] = f'{m.group(1)}{m.group(2)}= {{ construct = "{classes[m.group(1)]}({m.group(3).strip(chr(34))})" }}'
    return "\n".join(lines)
