"""Index arrays that copy within one buffer: the values of one array choose both where the kernel
stores into a buffer and where it loads from that same buffer (vLLM's `copy_blocks`: the pair
`block_mapping[2 * i]`, `block_mapping[2 * i + 1]` a source and a destination block of one cache).
Drawn with repeats, two pairs can store into one block, or one pair's destination be another's
source, and what the buffer holds after depends on which block ran first: two runs disagree, and a
draft that copies one pair only is all that stays. Drawn as distinct values of the buffer's rows
(`permutation(V)`, `V` at least the array's length), sources and destinations are all different
blocks, and the copy is the same in any order. Separate because it is one reading of the access
walk (`roles` asks it per index array) and one decision of the draft; pure."""
from __future__ import annotations

from ..model import exprs
from ..model.access_values import Use
from .shape_fits import TABLE


def copies_within(bounded: dict[str, Use], unbounded: dict[str, Use] | None, index: str) -> set[str]:
    """The buffers whose plain stores and plain loads both move with the values of `index`: bounded
    where its loads are indices below the table (`bounded`), unbounded where they are not
    (`unbounded`, the same walk with `index` loading unknown values). An atomic or a `+=` (a read
    and a write in one access) counts as neither: repeats are what such a kernel is written for."""
    if unbounded is None:
        return set()
    return {q for q, u in bounded.items() if q != index and q in unbounded and u.written and u.read
            and not u.stored_unknown and not u.loaded_unknown
            and unbounded[q].stored_unknown and unbounded[q].loaded_unknown}


def drawn(shapes: dict[str, list[str]], distinct: set[str], equal: dict[str, str], placed: str | None,
          notes: list[str]) -> tuple[dict[str, str], list[str]]:
    """(each such index array's init, the requirements): `permutation(V)` of the table's rows,
    `V >= n` for its n elements. Only where the table is its own size (not taken equal to a row's)
    and the array is not already the draft's scatter (`placed`, drawn distinct by its own rule)."""
    inits: dict[str, str] = {}
    require: list[str] = []
    for index in sorted(distinct):
        shape = shapes.get(index)
        if index == placed or TABLE in equal or not shape or any(TABLE in exprs.names(d) for d in shape):
            continue
        count = shape[0] if len(shape) == 1 else " * ".join(d if d.isidentifier() or d.isdigit() else f"({d})"
                                                            for d in shape)
        inits[index] = f', init = "permutation({TABLE})"'
        require.append(f"{TABLE} >= {count}")
        notes.append(f"`{index}` chooses both the rows the kernel copies from and those it copies to in one buffer: "
                     f"drawn as {count} distinct rows (`permutation({TABLE})`, `{TABLE} >= {count}` required), so "
                     f"no row is written twice or read after another block wrote it — CHECK")
    return inits, require
