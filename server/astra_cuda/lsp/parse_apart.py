"""A file's own parse made first in a process of its own, for the language server's large documents.

py-tree-sitter lets the GIL go while it parses (at each callback) but not while it frees what a
parse built: a parse stopped behind its pace (`parse_time`) frees its stacks, a tree past the
node ceiling its nodes, each holding the GIL for about a third of the parse (0.1-0.2 s of CPU,
0.5-0.9 s of the server's event loop at load 10). Here the same parse runs in a child first; a
text it refuses is refused with the same error, and never parsed in the server's process, where
what is parsed is then real-sized. The child dies with the thread that started it.

    python -m astra_cuda.model.parse_apart PARENT_PID WHAT < TEXT   ->  one JSON line
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from ..model import parse_time

log = logging.getLogger(__name__)
TIMEOUT_S = 60   # far beyond the pace's worst (1.5 s per MiB of a 4 MiB file, CPU), at any load


def check(text: str) -> None:
    """Raise what `source.parse(text)`'s own parse of the file would (`TooSlowToParse`,
    `TooManyNodes`, at their line), from a child's parse; return when the child read it, or could
    not say (then the server's own parse, under the same bounds, decides)."""
    from ..model import source
    data = text.encode("utf-8")
    what = "the file"   # as the diagnostic on it says
    try:
        r = subprocess.run([sys.executable, "-m", __name__, str(os.getpid()), what], input=data,
                           capture_output=True, timeout=TIMEOUT_S)
        said = json.loads(r.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        log.warning("the parse of %s in a process of its own said nothing (%s): read here", what, e)
        return
    if said.get("nodes") is not None:
        raise source.placed(parse_time.TooManyNodes(said["message"], said["nodes"]), data)
    if said.get("message"):
        raise source.placed(parse_time.TooSlowToParse(said["message"], said.get("offset")), data)


def _main(argv: list[str]) -> int:
    from ..compile import sandbox
    from ..model import source
    sandbox.die_with_parent(int(argv[0]))
    data = sys.stdin.buffer.read()
    out: dict[str, object] = {}
    try:
        with parse_time.reading(argv[1]):
            source.parser().parse(data)
    except parse_time.TooManyNodes as e:
        out = {"message": e.message, "nodes": e.nodes}
    except parse_time.TooSlowToParse as e:
        out = {"message": e.message, "offset": e.offset}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)   # the tree is not freed: the process ends


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
