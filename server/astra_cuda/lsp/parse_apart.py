"""Large texts parsed first in a process of their own, for the language server.

py-tree-sitter lets the GIL go while it parses (at each callback) but not while it frees what a
parse built: a parse stopped behind its pace (`parse_time`) frees its stacks, a tree past the
node ceiling its nodes, each holding the GIL for about a third of the parse (0.1-0.2 s of CPU,
0.5-0.9 s of the server's event loop at load 10). The server runs its work
`parse_time.apart_first(check_data)`: every text over `parse_time.APART_BYTES` it parses — a large document,
and as much a project header or an expanded unit met by a check (a hostile header stalled the
loop 533 ms at load 11 when the header digest parsed it in a pool thread) — is parsed in a child
first; a text it refuses is refused with the same error and never parsed in the server's
process, where what is parsed is then real-sized. What a child said is remembered per content,
so the text's parses here (the snapshot's, the digest's, the cut's) start one child between them.
The child dies with the thread that started it.

    python -m astra_cuda.lsp.parse_apart PARENT_PID MAX_NODES MAX_TOKENS WHAT < DATA   ->  one JSON line
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from collections import OrderedDict

from ..model import parse_time

log = logging.getLogger(__name__)
TIMEOUT_S = 60   # far beyond the pace's worst (1.5 s per MiB of a 4 MiB file, CPU), at any load
REMEMBERED = 64  # contents whose child's answer is kept

_said: OrderedDict[tuple[bytes, str, int, int], dict[str, object]] = OrderedDict()
_said_lock = threading.Lock()


def check_data(data: bytes, what: str, max_nodes: int, max_tokens: int) -> None:
    """Raise what `parse_time.Parser().parse(data, max_nodes, max_tokens)` would within
    `reading(what)` (`TooSlowToParse` at the byte it stopped, `TooManyNodes`, `TooManyTokens`),
    from a child's parse; return when the child read it, or could not say (then this process's
    parse, under the same bounds, decides)."""
    key = (hashlib.sha256(data).digest(), what, max_nodes, max_tokens)
    with _said_lock:
        said = _said.get(key)
        if said is not None:
            _said.move_to_end(key)
    if said is None:
        try:
            r = subprocess.run([sys.executable, "-m", __name__, str(os.getpid()), str(max_nodes), str(max_tokens), what],
                               input=data, capture_output=True, timeout=TIMEOUT_S)
            said = json.loads(r.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
            log.warning("the parse of %s in a process of its own said nothing (%s): read here", what, e)
            return
        with _said_lock:
            _said[key] = said
            while len(_said) > REMEMBERED:
                _said.popitem(last=False)
    nodes, tokens, offset = said.get("nodes"), said.get("tokens"), said.get("offset")
    if isinstance(tokens, int):
        raise parse_time.TooManyTokens(str(said["message"]), tokens)
    if isinstance(nodes, int):
        raise parse_time.TooManyNodes(str(said["message"]), nodes)
    if said.get("message"):
        raise parse_time.TooSlowToParse(str(said["message"]), offset if isinstance(offset, int) else None)


def check(text: str) -> None:
    """Raise what `source.parse(text)`'s own parse of the file would, at its line, from a child's
    parse (`check_data`); return when the child read it."""
    from ..model import source
    data = text.encode("utf-8")
    try:
        check_data(data, "the file", parse_time.MAX_NODES, parse_time.MAX_TOKENS)   # as the diagnostic says
    except parse_time.TooSlowToParse as e:
        raise source.placed(e, data) from None


def _main(argv: list[str]) -> int:
    from ..compile import sandbox
    from ..model import source
    sandbox.die_with_parent(int(argv[0]))
    data = sys.stdin.buffer.read()
    out: dict[str, object] = {}
    try:
        with parse_time.reading(argv[3]):
            source.parser().parse(data, max_nodes=int(argv[1]), max_tokens=int(argv[2]))
    except parse_time.TooManyTokens as e:
        out = {"message": e.message, "tokens": e.nodes}
    except parse_time.TooManyNodes as e:
        out = {"message": e.message, "nodes": e.nodes}
    except parse_time.TooSlowToParse as e:
        out = {"message": e.message, "offset": e.offset}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)   # the tree is not freed: the process ends


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
