"""Where the numbers of an `instantiate` were guessed, the instance the project's own code makes
of the kernel (`compile.instances`, from nvcc's front end over the `.cu` beside it) taken instead.
Separate because it runs the compiler's front end, which the reading of the program never does."""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from ..model.source import Kernel
from .template_args import CALLERS_CHOICE, CANNOT
from .template_names import is_pack, split

if TYPE_CHECKING:
    from ..compile.project import ProjectContext


_GUESSED = ("no launch gives it",)


def _valid(args: tuple[str, ...]) -> bool:
    """Whether the spec's validator takes these arguments as `instantiate` (a proposal never
    carries what Astra's own checker refuses)."""
    from ..model.spec import parse_template_args
    try:
        parse_template_args("<" + ", ".join(args) + ">")
    except ValueError:
        return False
    return True


def project_instance(kernel: Kernel, instantiate: str | None, new_notes: list[str], path: str | None,
                     context: ProjectContext | None, launched_here: bool = False, largest: bool = False) -> tuple[str | None, str | None]:
    """Where the arguments were guessed for a kernel in a header, an instance the project's own
    code makes instead, as nvcc's front end instantiates it over the `.cu` beside the header that
    includes it (`compile.instances`): a launcher whose traits class is an alias of its template
    parameters, set by macros in that `.cu` (flash-attention's `REGISTER_FWD_LAUNCHER`), or a
    dispatch over torch's scalar types that offers no float (apex's softmax headers) is read as
    the compiler reads it. A source file that launches the kernel itself (`launched_here`) is its
    own unit: arguments deduced from what the launch passes (CuTe's layouts and tensors, built
    by `make_layout` in the launcher) are the compiler's too. Of the instances, the one agreeing
    with the most arguments that were not guessed, then with the guesses (the first such).
    (instantiate, a note) — unchanged and None where nothing was guessed, no toolkit is found, or
    the unit makes no instance. With `largest` (a first draft's output was constant), the guessed
    numbers are no evidence: of the instances agreeing with the rest, the one with the largest
    numeric arguments (sgl-kernel topkGatingSoftmax's first, `<float, 1, 1, 4, 4>`, has one expert,
    so its top-k indices are constant; `<float, 8, 256, 4, 16>` has 256)."""
    if not instantiate or path is None or not any(g in n for n in new_notes for g in _GUESSED):
        return instantiate, None
    from ..compile import headers, instances, toolkit
    from ..compile.project import ProjectContext
    ctx = context or ProjectContext()
    found = headers.includer(path, ctx)
    if found is None and not (launched_here and not path.endswith(headers.HEADER_SUFFIXES)):
        return instantiate, None
    tk = toolkit.find(ctx)
    if tk is None:
        return instantiate, None
    short = kernel.name.split("::")[-1]
    made = instances.of(short, path, ctx, toolkit=tk)
    guess = [" ".join(a.split()) for a in split(instantiate)]
    packs = any(is_pack(p) for p in kernel.template_params)
    fits = [m for m in made if (len(m) == len(guess) or (packs and len(m) >= len(guess) - 1)) and _valid(m)]
    if not fits and made.late:   # a guess the compiler's instance could have overruled: not given as known
        unit = os.path.basename(found[0] if found is not None else path)
        return instantiate, (f"{CANNOT}`{short}`'s template arguments were guessed (`<{', '.join(guess)}>`) and "
                             f"nvcc, reading the instance the project makes from `{unit}`, ran past its time limit "
                             f"(a loaded machine; ASTRA_COMPILER_TIMEOUT sets it in seconds): run it again")
    if not fits:
        return instantiate, None
    named = [n for n, _ in zip(kernel.template_param_names, guess)]
    # with `largest`, a number the first of several calls gives (one `case` of a switch) is a choice too
    guessed_names = {n for n in named if any(f"`{n}`" in note and ("no launch gives it" in note or
                                                                    (largest and CALLERS_CHOICE in note))
                                             for note in new_notes)}
    firm = [i for i, n in enumerate(named) if n not in guessed_names]

    def score(m: tuple[str, ...]) -> tuple[int, ...]:
        same = [i for i, (a, b) in enumerate(zip(m, guess)) if a.replace(" ", "") == b.replace(" ", "")]
        if largest:
            numbers = [int(a) for a in m if re.fullmatch(r"\d+", a.strip())]
            return (sum(1 for i in same if i in firm),
                    sum(1 for i in same if not re.fullmatch(r"\d+|true|false", guess[i].strip())), sum(numbers))
        return sum(1 for i in same if i in firm), len(same)
    best = max(fits, key=score)   # max keeps the first of equals
    chosen = "<" + ", ".join(best) + ">"
    where = f"{os.path.basename(found[0])}, which includes this header" if found is not None else "this file"
    why = " — the one with the largest numbers: the first draft's output was constant" if largest else ""
    return chosen, (f"instantiate: the project's own instance {short}{chosen} (of {len(made)} that nvcc's front end "
                    f"instantiates over {where}), not the guess {instantiate}{why}")
