"""What a proposal says of itself: its notes ranked by how unsure inference is of each, and the
problems that keep a draft from being proposed (what no reading of the program gives,
`CANNOT`; the validator's refusals; records whose fields cannot be split). Separate because
both the draft and the struct-splitting entry (`proposal`) ask it."""
from __future__ import annotations

from ..model import access, source, syntax
from ..model.source import Kernel, SourceModel
from ..model.syntax import walk as _walk
from .template_args import CANNOT
from .types import Types


def problems_of(notes: list[str], kernel: Kernel, model: SourceModel, comment: str) -> list[str]:
    """Why the draft is not proposed: what inference says it cannot know, then the validator's refusals."""
    return [n for n in notes if n.startswith(CANNOT)] + refusals(kernel, model, comment)


def record_refusals(kernel: Kernel, types: Types) -> list[str]:
    """Why no draft gives a pointer to records whose fields the kernel reads (`batch->n_tokens`)
    that `records` could not split into its fields (it is also used otherwise): the counts and
    offsets the kernel takes from them decide what it reads — a draft that guessed them would only
    fail for a reason it hides. (A struct passed by value is `CANNOT`'s note where `structs`
    cannot split it.)"""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    out: list[str] = []
    for p in kernel.params:
        base = p.base_type.replace("const", "").replace("__restrict__", "").strip()
        if not p.is_pointer or types.resolve(base)[0] is not None or base == "void" or "<" in base:
            continue
        read = None
        for n in _walk(body):
            if n.type != "field_expression":
                continue
            arg = n.child_by_field_name("argument")
            while arg is not None and arg.type in ("parenthesized_expression", "subscript_expression"):
                arg = arg.child_by_field_name("argument") if arg.type == "subscript_expression" else arg.named_children[0]
            if arg is not None and arg.type == "identifier" and syntax.text(arg) == p.name:
                read = syntax.text(n)
                break
        if read is not None:
            out.append(f"{CANNOT}`{p.name}` points to `{base}` records whose fields the kernel reads (`{read}`), "
                       f"but it also uses the pointer otherwise (hands it on whole, offsets it), so Astra cannot tell "
                       f"which fields decide what it reads — give it by hand as {{ records = \"n\", <field> = ... }}")
    return out

_UNSURE = (("could not be resolved", "took float", "took 1", "took false", "took int32"),
           ("guessed", "could not be read", "CHECK", "no launch site", "invented", "not followed"),
           ("is a guess", "assumed", "took 256", "took its value", "one of the cases", "taken as"))


def ranked(notes: list[str]) -> list[str]:
    """The notes, what inference is least sure of first (the order within a rank kept)."""
    def rank(note: str) -> int:
        if note.startswith(CANNOT):   # what no reading of the program gives: before any guess
            return -1
        return next((i for i, words in enumerate(_UNSURE) if any(w in note for w in words)), len(_UNSURE))
    return sorted(notes, key=rank)


def refusals(kernel: Kernel, model: SourceModel, comment: str) -> list[str]:
    """What Astra's own validator says of `comment` pasted above the kernel ([] when it accepts it)."""
    from ..errors import AstraError
    from ..model.spec import SpecErrors, load
    data = model.text.encode("utf-8")
    text = (data[:kernel.span.start_byte] + comment.encode("utf-8") + data[kernel.span.start_byte:]).decode("utf-8")
    m = source.parse(text)
    k = next((x for x in m.kernels if x.qualified_name == kernel.qualified_name and x.spec is not None), None)
    if k is None:
        return ["the comment is not read as the kernel's spec where it is inserted"]
    try:
        load(k, m)
    except SpecErrors as e:
        return [d.message for d in e.diagnostics]
    except AstraError as e:
        return [e.message]
    return []
