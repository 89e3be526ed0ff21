"""Secrets out of everything Astra writes or shows: run logs, reports, the editor's progress and
messages, the server's log, and the gate's feedback a model is sent (the kernel's own code goes
to the model as it is).

Hidden: the password (and user) in a URL, the values of query parameters with key-like names,
`Bearer …` tokens, OpenAI-style `sk-…` keys, and every key Astra was configured with (from the
environment or settings, `remember`ed by the LLM client) wherever it appears, e.g. echoed back in
an endpoint's error message.

Compiler messages are a second way out: a file that does `#include ".env"` makes the compiler
quote the included file's tokens (`identifier "sk" is undefined`) and echo its lines. `included`
keeps a message only where it stands in the unit's own file or in a file that is source
(`.cuh`, `.hpp`, a standard header under an `include` folder); from any other file (a dotfile,
`.json`, `.pem`, `.git/config`…) only its place is kept. Applied to diagnostics, to the logs a
check keeps and to what is sent to a model.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
KEY_ENV = ("ASTRA_API_KEY", "OPENAI_API_KEY", "ASTRA_LLM_API_KEY")
SECRET_PARAMS = {"key", "api_key", "apikey", "api-key", "token", "access_token", "auth", "secret",
                 "password", "sig", "signature", "code", "client_secret", "refresh_token"}
MIN_SECRET = 6  # shorter configured "keys" (e.g. 'none') would mask ordinary words

_remembered: set[str] = set()
_lock = threading.Lock()

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")
_BEARER = re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_SK = re.compile(r"\bsk-[A-Za-z0-9_-]{12,}")
_HEADER = re.compile(r"((?:api[-_]?key|x-api-key|authorization)\s*[:=]\s*)([^\s,;\"']+)", re.IGNORECASE)
_HEADER_WORDS = ("apikey", "api-key", "api_key", "authorization")   # in every _HEADER match, lower-cased


def remember(secret: str | None) -> None:
    """A key to hide wherever it appears from now on."""
    if secret and len(secret) >= MIN_SECRET:
        with _lock:
            _remembered.add(secret)


def _secrets() -> list[str]:
    found = {v for k in KEY_ENV if len(v := os.environ.get(k, "")) >= MIN_SECRET}
    with _lock:
        found |= _remembered
    return sorted(found, key=len, reverse=True)


def url(u: str | None) -> str | None:
    """The URL without its password/user and with key-like query values masked."""
    if not u:
        return u
    try:
        parts = urlsplit(u)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, MASK if k.lower() in SECRET_PARAMS else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def text(s: str) -> str:
    """`s` with every secret this module knows of masked."""
    if not s:
        return s
    for secret in _secrets():
        s = s.replace(secret, MASK)
    # Each pattern is run only where the text holds the literal every match of it contains: a
    # pattern scans the whole text from every position (0.2-0.3 s each on the 10 MB that
    # `astra kernels --json` prints for a file at the token limit), a substring test takes
    # milliseconds. Lower-casing stands for IGNORECASE only on ASCII text (JSON's, by default):
    # other text is scanned by every pattern as before. `low` is taken after the URLs are
    # rewritten: their query is decoded and encoded again (`%2D` becomes `-`).
    if "://" in s:
        s = _URL.sub(lambda m: url(m.group(0)) or "", s)
    low = s.lower() if s.isascii() else None
    if low is None or "bearer" in low:
        s = _BEARER.sub(lambda m: m.group(1) + MASK, s)
    if low is None or any(w in low for w in _HEADER_WORDS):
        s = _HEADER.sub(lambda m: m.group(1) + MASK, s)
    return _SK.sub("sk-" + MASK, s) if "sk-" in s else s


_SOURCE_SUFFIXES = frozenset((".h", ".hh", ".hpp", ".hxx", ".h++", ".cuh", ".cu", ".c", ".cc", ".cpp", ".cxx",
                              ".c++", ".inc", ".inl", ".ipp", ".tcc", ".tpp", ".def", ".ptx"))
NOT_SHOWN = "(its text is not shown: a message from an included file that is not source may quote its secrets)"
# A message's first line: EDG (nvcc, NVRTC) `path(12): error: …`; GCC, clang, the host
# preprocessor `path:12:5: error: …`.
_EDG = re.compile(r"^(?P<path>[^\s(][^()]*?)\((?P<line>\d+)\): (?P<sev>(?:catastrophic |fatal )?error|warning|remark|note)"
                  r"(?: #[\w-]+)?: ")
_GCC = re.compile(r"^(?P<path>[^:\s][^:]*?):(?P<line>\d+):(?:\d+:)? (?P<sev>fatal error|error|warning|note): ")
_INCLUDED_FROM = re.compile(r"^(?:In file included from|\s+from) ")


_TOOLS = frozenset(("cc1plus", "cc1", "gcc", "g++", "c++", "cpp", "clang", "clang++", "nvcc", "cicc", "ptxas",
                    "nvlink", "fatbinary", "cudafe++", "collect2", "ld", "as", "nvrtc"))


def quotable(path: str, own: str = "") -> bool:
    """Whether a compiler's message located in `path` may be shown as it is: the unit's own
    file, a compiler's pseudo-file (`<built-in>`) or its own name (`cc1plus: fatal error`), or
    a file whose name says it is source."""
    if path == own or (path.startswith("<") and path.endswith(">")) or path in _TOOLS:
        return True
    if own and os.path.basename(path) == os.path.basename(own) and os.path.realpath(path) == os.path.realpath(own):
        return True
    name = os.path.basename(path.rstrip("/"))
    if name.startswith(".") or not name:
        return False
    suffix = os.path.splitext(name)[1].lower()
    if suffix:
        return suffix in _SOURCE_SUFFIXES
    return "include" in os.path.normpath(path).split(os.sep)[:-1]  # <vector>, cuda/std/cstdint


def included(log: str, own: str = "") -> str:
    """A compiler's log (or one message) with the text of every message located in a file that
    is not `quotable` replaced by NOT_SHOWN, and the lines it echoes from there dropped."""
    if not log:
        return log
    out: list[str] = []
    hiding = False
    for line in log.splitlines():
        m = _EDG.match(line) or _GCC.match(line)
        if m is not None:
            hiding = not quotable(m.group("path"), own)
            out.append(line[:m.end()] + NOT_SHOWN if hiding else line)
        elif _INCLUDED_FROM.match(line):
            hiding = False
            out.append(line)
        elif not hiding:
            out.append(line)
    return "\n".join(out) + ("\n" if log.endswith("\n") else "")


def value(v: Any) -> Any:
    """JSON-like data with every string redacted (keys too)."""
    if isinstance(v, str):
        return text(v)
    if isinstance(v, dict):
        return {value(k): value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [value(x) for x in v]
    return v


class LogFilter(logging.Filter):
    """Redacts log records (message and arguments) on their way out."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = text(record.getMessage())
            record.args = None
        except Exception:  # a malformed record: keep it as it is rather than lose it
            pass
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    target = logger or logging.getLogger()
    for h in target.handlers:
        if not any(isinstance(f, LogFilter) for f in h.filters):
            h.addFilter(LogFilter())
