"""tree-sitter's parser with a CPU-time limit that holds while it parses.

tree-sitter reads real code fast: at most 0.6 s of CPU per MiB on every file of the real-world
suite's repositories and on the cut's expanded units of CUTLASS and flash-attention (4 MiB), most
at 0.1-0.2 s (benchmarks/parse_time.py). Some texts it reads 10-40 times slower: 4 MB of `a<a<...`,
under the 4 MiB file limit, took 16 s of CPU per parse, and Astra parses a file more than once.

So every parse must keep the pace of `S_PER_MIB` seconds of CPU per MiB it has read; the time
it takes beyond that pace, summed over all the parses made for one input (`reading`: the source
model parses the file, then each macro body and each launch through a macro again), may be at
most `SLACK_S`. Past that, `TooSlowToParse` (exit 2): checked in tree-sitter's progress callback,
which stops the parse there, and measured in the parsing thread's CPU time (tree-sitter's own),
so a loaded machine does not make real code look slow. Real code never falls behind the pace
(0.0001 s at most); a hostile text is stopped after ~0.3 s of CPU. The slack is small because
freeing a stopped parse holds the language server's GIL for about a third of its time. Any
input's parses take at most `SLACK_S` plus `S_PER_MIB` per MiB they read.
A parse outside any `reading` is an input of its own.
"""
from __future__ import annotations

import gc
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import tree_sitter

from ..errors import AstraError

S_PER_MIB = 1.5    # the pace every parse keeps: CPU seconds per MiB read (real code: at most 0.6)
SLACK_S = 0.1      # CPU seconds one input's parses may take beyond that pace, together (real code: 0.0001)
_MIB = 1 << 20
_FIRST = 64        # bytes handed to tree-sitter by a read that does not follow the last one
# Syntax nodes one parse may build (tree-sitter counts them as it builds; 65 bytes each). The
# largest real file of the suite's repositories has 945,895 (CUTLASS `mma_sm90_gmma_sparse_ext.hpp`,
# 2.8 MiB), the cut's largest expanded unit 1.21 million; everything Astra does with a tree walks
# it in Python, a few microseconds a node: 4 MB of `a;` made 5.9 million nodes, 15 s of the
# source model's walk and 1.4 GB before the cut's ceiling refused it.
MAX_NODES = 1_800_000
# Tokens a file's own parse may read (a header's, a model's code block's: every parse without a
# bound of its caller's), counted before tree-sitter sees the text, in linear time (~0.1 s of CPU
# per MiB; a comment or a string counts one). The largest real file of the suite's 5,062 has
# 568,009 (that CUTLASS header); everything after a parse costs per node, ~1.5-1.7 nodes a token
# in real code and floods alike: 1.18 million tokens of `a;` (1.77 million nodes, under the node
# ceiling) took `astra check` 13 s of CPU, 79 s of wall time at load 14; 0.8 million took 9 s (the source
# model of 0.8 million, in 12,106 small kernels: 14 s before it used queries and an index, now ~3 s).
MAX_TOKENS = 800_000
_TOKEN = re.compile(rb'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_]\w*|\d[\w.]*|\S',
                    re.S)
# Freeing what a parse built holds py-tree-sitter's GIL (a stopped parse's stacks, a tree past the
# ceiling: 0.1-0.2 s of CPU, up to 0.9 s of a loaded machine's wall time). A caller that must keep
# answering meanwhile (the language server) runs its work `apart_first(check)` (`parse_apart.check_data`):
# every text over `APART_BYTES` parsed there is then parsed by it first, in another process, which
# raises what the parse here would; a text it passes is real-sized. Smaller texts make at most ~0.5
# million nodes, freed in ~0.02 s of CPU. The choice is the caller's context's (a `ContextVar`, so
# the threads it hands work to are handed it with `contextvars.copy_context`), never the process's:
# a CLI or a test in the same process parses here unless it asks.
APART_BYTES = 256 << 10
_apart: ContextVar[Callable[[bytes, str, int, int], None] | None] = ContextVar("astra_parse_apart", default=None)


@contextmanager
def apart_first(check: Callable[[bytes, str, int, int], None] | None) -> Iterator[None]:
    """Inside, `check(data, what, max_nodes, max_tokens)` sees every text over `APART_BYTES` before
    this process counts its tokens or parses it (None: here only): it raises `TooSlowToParse`,
    `TooManyNodes` or `TooManyTokens` as `Parser.parse` would, or returns."""
    token = _apart.set(check)
    try:
        yield
    finally:
        _apart.reset(token)


class _Collections(threading.local):
    """CPU seconds this thread has spent in Python's garbage collector (`gc.callbacks`): a
    collection of the whole process that a parse's callbacks happen to trigger is not the parse's."""
    spent = 0.0
    start = 0.0


_collections = _Collections()


def _count_collection(phase: str, _info: dict[str, int]) -> None:
    if phase == "start":
        _collections.start = time.thread_time()
    else:
        _collections.spent += time.thread_time() - _collections.start


gc.callbacks.append(_count_collection)


class TooSlowToParse(AstraError):
    """tree-sitter fell behind the pace on a text: it is not read further. `offset`: the byte of
    the parse that raised it where tree-sitter was stopped (None: it had finished that parse)."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset


@dataclass
class Account:
    """What tree-sitter has spent on one input."""
    what: str
    spent: float = 0.0   # CPU seconds of its parses
    read: int = 0        # bytes they read
    behind: float = 0.0  # CPU seconds its finished parses took beyond the pace, summed


_open: ContextVar[Account | None] = ContextVar("astra_parse_account", default=None)


@contextmanager
def reading(what: str) -> Iterator[Account]:
    """Every parse inside is charged to one account for `what` ('the file', 'the model's code
    block'), named by its error; inside an open account, that one keeps counting."""
    outer = _open.get()
    if outer is not None:
        yield outer
        return
    account = Account(what)
    token = _open.set(account)
    try:
        yield account
    finally:
        _open.reset(token)


class TooManyNodes(TooSlowToParse):
    """The text's tree holds more syntax nodes than Astra walks (`MAX_NODES`, or the caller's
    own bound): refused as soon as tree-sitter has built it, before any walk. `nodes`: its count."""

    def __init__(self, message: str, nodes: int):
        super().__init__(message)
        self.nodes = nodes


class TooManyTokens(TooManyNodes):
    """The text holds more tokens than Astra reads (`MAX_TOKENS`): refused before it is parsed.
    `nodes`: its token count."""


def tokens(data: bytes) -> int:
    """C-like tokens in `data` (a comment, a string or a character literal counts one)."""
    return _TOKEN.subn(b"", data)[1]


# tree-sitter-cuda's scanner reads a raw string's delimiter up to 15 characters where C++ allows 16
# (TransformerEngine's generated headers hold kernels as `R"__STRING_DELIM__(...)__STRING_DELIM__"`):
# it read such a literal as code, so the declarations in the string were the file's (`using IType =
# __ITYPE__;` cut into a unit, an alias named twice). Each is handed to it with a 15-character
# delimiter and the same bytes inside, one blank before the literal and one after it, so every other
# node keeps its bytes and offsets. Linear: one search per literal, each from where the last ended.
_RAW16 = re.compile(rb'(?<![A-Za-z0-9_])(?:u8|[uUL])?R"([^ ()\\\t\v\f\r\n"]{16})\(')


def readable_raw_strings(data: bytes) -> bytes:
    """`data` with every raw string literal of a 16-character delimiter rewritten, at the same
    length, to one of 15 that tree-sitter reads as a string (its content unchanged)."""
    if b'R"' not in data:
        return data
    buf: bytearray | None = None
    at = 0
    while (m := _RAW16.search(data, at)) is not None:
        delim = m.group(1)
        close = data.find(b")" + delim + b'"', m.end())
        if close < 0:
            break
        body = data[m.end():close]
        short = next((d for d in (delim[:15], delim[1:], delim[:14] + b"~", delim[:14] + b"!")
                      if b")" + d + b'"' not in body), None)
        at = close + len(delim) + 2
        if short is None:
            continue
        buf = buf if buf is not None else bytearray(data)
        prefix = data[m.start():data.index(b'R"', m.start())]
        buf[m.start():m.end()] = b" " + prefix + b'R"' + short + b"("
        buf[close:at] = b")" + short + b'" '
    return bytes(buf) if buf is not None else data


class _Source:
    """What tree-sitter reads a text through: the parse, then every node's text (py-tree-sitter
    reads a node's text of a tree parsed from a callable by calling it until it has the node's
    bytes, then counts their lines). A read where the last one ended gets twice the last one's
    bytes, any other `_FIRST`: a node's text costs a few calls and O(its length), the parse
    reads in growing chunks. Two threads reading texts of one tree only make this guess worse."""

    __slots__ = ("_view", "_next", "_size")

    def __init__(self, data: bytes):
        self._view = memoryview(data)
        self._next = -1
        self._size = _FIRST

    def __call__(self, at: int, _point: object) -> bytes:
        size = self._size * 2 if at == self._next else _FIRST
        self._next, self._size = at + size, size
        return bytes(self._view[at:at + size])   # bytes: py-tree-sitter 0.26.1 reads a node's text as such


class Parser:
    """tree-sitter's `Parser` for one language, whose `parse` keeps the pace and the node ceiling."""

    def __init__(self, language: tree_sitter.Language):
        self._language = language

    def parse(self, data: bytes, max_nodes: int | None = None, max_tokens: int | None = None) -> tree_sitter.Tree:
        """The tree of `data` (UTF-8); `TooSlowToParse` once its input is too far behind the pace,
        `TooManyNodes` where the tree holds more than `max_nodes` (default `MAX_NODES`),
        `TooManyTokens` before any parse where `data` holds more than `max_tokens` tokens (default:
        `MAX_TOKENS` where the caller sets no `max_nodes`, else none; 0: none).

        One parse, through a callable: py-tree-sitter holds the GIL for the whole of a parse from
        bytes, but lets it go whenever it calls back into Python (the progress callback runs every
        few dozen bytes), so the language server answers while a large file is read."""
        account = _open.get() or Account("the text")
        limit = MAX_NODES if max_nodes is None else max_nodes
        token_limit = max_tokens if max_tokens is not None else MAX_TOKENS if max_nodes is None else 0
        apart = _apart.get()
        if apart is not None and len(data) > APART_BYTES:
            apart(data, account.what, limit, token_limit)
        elif 0 < token_limit < len(data) and (count := tokens(data)) > token_limit:   # a token is a byte at least
            raise TooManyTokens(
                f"{account.what} is too large to read: {_amount(len(data))} hold {count:,} tokens, more than the "
                f"{token_limit:,} Astra reads (the largest real CUDA file has 568,009: a file made to be slow?)", count)
        # tree-sitter's own CPU time: the callbacks' is left out (Python code), as is every garbage
        # collection of the whole process run meanwhile (triggered by the reads' or the callbacks'
        # objects, it was charged to a small file: 0.1 s for 61 bytes of FlashInfer's sampling.cuh)
        took, resumed, stopped_at = 0.0, time.thread_time(), -1
        collected = _collections.spent

        def progress(offset: int, _has_error: bool) -> bool:
            nonlocal took, resumed, stopped_at, collected
            took += time.thread_time() - resumed - (_collections.spent - collected)
            collected = _collections.spent
            stop = account.behind + took - S_PER_MIB * offset / _MIB > SLACK_S
            if stop:
                stopped_at = offset   # tree-sitter stops here
            resumed = time.thread_time()
            return stop

        tree: tree_sitter.Tree | None = None
        try:
            # a fresh parser each time: one stopped midway would resume its old parse on the next call
            tree = tree_sitter.Parser(self._language).parse(_Source(readable_raw_strings(data)),
                                                            progress_callback=progress)
        except ValueError:    # what py-tree-sitter raises for a stopped parse
            if stopped_at < 0:
                raise
        took += time.thread_time() - resumed - (_collections.spent - collected)   # the end, a stopped one's cleanup
        read = len(data) if tree is not None else stopped_at
        account.spent += took
        account.read += read
        account.behind += max(0.0, took - S_PER_MIB * read / _MIB)
        if tree is None or account.behind > SLACK_S:
            raise TooSlowToParse(
                f"{account.what} takes too long to parse: tree-sitter fell {SLACK_S} s of CPU time behind a pace of "
                f"{S_PER_MIB} s per MiB, where real CUDA code needs at most 0.6 ({account.spent:.1f} s for "
                f"{_amount(account.read)} read); Astra reads no further",
                offset=None if tree is not None else stopped_at)
        nodes = tree.root_node.descendant_count   # kept by tree-sitter: no walk
        if nodes > limit:
            del tree   # freed here, before the error travels
            raise TooManyNodes(
                f"{account.what} is too large to read: {_amount(len(data))} make {nodes:,} syntax nodes, more than "
                f"the {limit:,} Astra reads (the largest real CUDA file has under a million: a file made to be "
                f"slow?)", nodes)
        return tree


def _amount(n: int) -> str:
    return f"{n / _MIB:.1f} MiB" if n >= _MIB else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


__all__ = ["APART_BYTES", "MAX_NODES", "MAX_TOKENS", "S_PER_MIB", "SLACK_S", "Account", "Parser", "TooManyNodes",
           "TooManyTokens", "TooSlowToParse", "apart_first", "readable_raw_strings", "reading", "tokens"]
