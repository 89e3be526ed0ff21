"""client/src/contract.ts's interfaces, written from the dataclasses of `answers` (what the server
sends is what the client's types say, with no hand copy between): `python -m
astra_cuda.lsp.answers_ts client/src/contract.ts` rewrites the generated part of that file, and
tests/lsp/test_contract.py fails while it is not current.

A field is its camelCase name; an `optional()` field is `name?: T` (left out while None), any
other `T | None` is `T | null`; a nested answer is its own interface; an `Any` field (the LSP
WorkspaceEdit, which the client converts itself) is a type parameter named after the field."""
from __future__ import annotations

import dataclasses
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from astra_cuda.lsp import answers

BEGIN = ("// ---- generated from server/astra_cuda/lsp/answers.py (do not edit): written again by\n"
         "// `python -m astra_cuda.lsp.answers_ts client/src/contract.ts`")
END = "// ---- end of the generated part"
_PRIMITIVES: dict[Any, str] = {str: "string", bool: "boolean", int: "number", float: "number"}


def _ts(t: Any, param: str) -> str:
    """The TypeScript of the Python type `t` (`param`: the type parameter an `Any` stands for)."""
    if t is Any:
        return param
    if t in _PRIMITIVES:
        return _PRIMITIVES[t]
    if isinstance(t, type) and issubclass(t, answers.Answer):
        return t.__name__
    origin, args = get_origin(t), get_args(t)
    if origin is list:
        inner = _ts(args[0], param)
        return f"({inner})[]" if " " in inner else f"{inner}[]"
    if origin in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _ts(a, param) for a in args)
    raise TypeError(f"no TypeScript for {t!r}")


def _members(cls: type[answers.Answer]) -> tuple[list[str], list[str]]:
    """(the interface's member lines, its type parameters)."""
    hints = get_type_hints(cls)
    lines, params = [], []
    for f in dataclasses.fields(cls):
        t, param = hints[f.name], f.name[:1].upper() + answers.camel(f.name)[1:]
        if t is Any:
            params.append(param)
        if f.metadata.get("optional"):   # left out while None: never null on the wire
            t = Union[tuple(a for a in get_args(t) if a is not type(None)) or (t,)]  # noqa: UP007
            lines.append(f"  {answers.camel(f.name)}?: {_ts(t, param)};")
        else:
            lines.append(f"  {answers.camel(f.name)}: {_ts(t, param)};")
    return lines, params


def _nested(cls: type[answers.Answer]) -> list[type[answers.Answer]]:
    """The answers `cls`'s fields hold (DocStatus: Optimizing, GpuSetup)."""
    out = []
    for t in get_type_hints(cls).values():
        for a in (t, *get_args(t), *(b for x in get_args(t) for b in get_args(x))):
            if isinstance(a, type) and issubclass(a, answers.Answer) and a not in out:
                out.append(a)
    return out


def _comment(doc: str) -> str:
    if not doc:
        return ""
    if len(doc) <= 94:
        return f"/** {doc} */\n"
    return "/**\n" + "".join(f" * {line}\n" for line in textwrap.wrap(doc, 97, break_on_hyphens=False)) + " */\n"


def typescript() -> str:
    """The generated part of contract.ts: one interface per answer, a nested one before its user."""
    order: list[type[answers.Answer]] = []
    for cls in answers.INTERFACES.values():
        order += [c for c in (*_nested(cls), cls) if c not in order]
    parts = [BEGIN]
    for cls in order:
        lines, params = _members(cls)
        doc = " ".join((cls.__doc__ or "").split()) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        generic = f"<{', '.join(params)}>" if params else ""
        parts.append(_comment(doc) + f"export interface {cls.__name__}{generic} {{\n" +
                     "\n".join(lines) + "\n}")
    parts.append(END)
    return "\n\n".join(parts) + "\n"


def rewritten(text: str) -> str:
    """contract.ts's `text` with its generated part written anew (appended when it has none)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + typescript() + rest.split(END, 1)[1].removeprefix("\n")
    return text.rstrip("\n") + "\n\n" + typescript()


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "client/src/contract.ts")
    path.write_text(rewritten(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
