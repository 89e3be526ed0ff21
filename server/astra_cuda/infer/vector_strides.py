"""Strides that must keep a vector access aligned. A kernel that moves a buffer W elements at a
time (`vec_t<float, 4>::memcpy(dst + page * stride_page + i * 4, …)`, a `float4` copy) reaches an
address that is a multiple of the vector's bytes only where every stride that moves it is a whole
number of vectors: a stride of 1 or 100 puts the second page's vector off its boundary, a
misaligned-address fault on a GPU. Which strides move which buffer is measured, not read off the
text: a stride whose change moves a buffer's reach moves that buffer; one that moves no buffer of
known reach is taken to move those the walk could not bound (FlashInfer's paged cache, addressed
through a page number a `divmod` gives)."""
from __future__ import annotations

import math
from collections.abc import Callable


def vector_strides(strides: list[str], vectors: dict[str, int], self_aligned: set[str],
                   before: dict[str, list[int] | None],
                   moved: Callable[[str], dict[str, list[int] | None] | None]) -> dict[str, int]:
    """Stride -> the width (elements) it must be a multiple of. `vectors`: pointer -> elements one
    access moves (> 1); `self_aligned`: pointers whose code aligns its vectors itself (needing
    nothing of the sizes); `before`: each pointer's reach at the probes; `moved(s)`: the reach with
    stride `s` set far from every probe (None where that launch is invalid)."""
    needing = {p: w for p, w in vectors.items() if w > 1 and p not in self_aligned}
    if not needing:
        return {}
    unbounded = [p for p in needing if before.get(p) is None]
    out: dict[str, int] = {}
    for s in strides:
        after = moved(s)
        if after is None:
            continue
        deps = [p for p, reach in before.items() if reach is not None and after.get(p) != reach]
        targets = [p for p in deps if p in needing] if deps else unbounded
        width = math.lcm(*(needing[p] for p in targets)) if targets else 1
        if width > 1:
            out[s] = width
    return out
