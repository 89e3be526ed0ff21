"""Size values: test sizes and bench sizes for each size name."""
from __future__ import annotations

# LLaMA-7B/13B/70B-like sizes: (test sizes, bench sizes) by what a size name suggests.
_SIZE_HINTS = [
    (("token", "batch", "row", "seq", "m", "rows", "num_tokens", "bs", "b"), [1, 7, 333], [4096]),
    (("t", "seq_len", "seqlen"), [1, 64, 257], [1024]),
    (("head_dim", "headdim", "hd"), [64, 128], [128]),
    (("head", "heads", "nh"), [1, 32], [32, 40, 64]),
    (("v", "vocab", "vocab_size"), [64, 1000], [50304]),
    (("hidden", "d", "dim", "n", "cols", "size", "k", "len", "numel", "count", "c", "channels"),
     [128, 1001, 4096], [4096, 11008]),
]


def _size_values(name: str) -> tuple[list[int], list[int]]:
    low = name.lower()
    for keys, test, bench in _SIZE_HINTS:
        if low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys):
            return test, bench
    return [1, 100, 4096], [4096]
