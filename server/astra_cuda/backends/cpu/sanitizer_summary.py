"""One line from a sanitizer's report of a launch: what went wrong, at which line of the user's
file, in which block and thread (ASan: an out-of-bounds access; TSan: a data race and the two
accesses). Pure text in, text out; isolation.py calls it on what a crashed launch wrote."""
from __future__ import annotations

_RUNTIME_FILES = ("astra_runtime.cpp", "astra_cuda_shim.h", "<astra launcher>", "libasan", "libtsan",
                  "/usr/", "<null>")


def _user_frame(frames: list[str], filename: str) -> str | None:
    """'file.cu:12' of the first stack frame in the user's code."""
    for s in frames:
        s = s.strip()
        if not (s.startswith("#") and " in " in s or s.startswith("#")):
            continue
        parts = s.split(" ")
        loc = next((p for p in parts[2:] if ":" in p and not p.startswith("(")), None)
        if loc is None or any(x in loc for x in _RUNTIME_FILES):
            continue
        file, _, rest = loc.partition(":")
        line = rest.split(":")[0]
        if filename and file.endswith("/" + filename.lstrip("/")):
            file = filename  # the symbolizer prefixes the build directory
        return f"{file}:{line}"
    return None


def tsan_summary(output: str, filename: str = "") -> str | None:
    """'data race on shared memory: write of 4 bytes at k.cu:4 by block (0,0,0) thread (1,0,0)
    and an earlier read at k.cu:8 by block (0,0,0) thread (0,0,0)' from a TSan report."""
    lines = output.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if "WARNING: ThreadSanitizer: data race" in l)
    except StopIteration:
        return None
    body = lines[start + 1:]
    end = next((i for i, l in enumerate(body) if l.startswith("SUMMARY:") or l.startswith("=====")), len(body))
    body = body[:end]
    names = {}
    for l in body:
        t = l.strip()
        if t.startswith("Thread T") and "'" in t:
            names[t.split()[1]] = t.split("'")[1]
    accesses = []  # (kind, size, thread, frames)
    for i, l in enumerate(body):
        t = l.strip()
        if (t.startswith(("Write of size", "Read of size", "Previous write of size", "Previous read of size",
                          "Atomic write of size", "Atomic read of size", "Previous atomic"))):
            words = t.rstrip(":").split()
            kind = " ".join(w for w in words[:words.index("of")] if w != "Previous").lower()
            size = words[words.index("size") + 1]
            thread = words[-1]
            frames = []
            for f in body[i + 1:]:
                if not f.strip().startswith("#") and "[failed" not in f:
                    break
                frames.append(f)
            accesses.append((kind, size, thread, frames))
    where = "memory"
    text = "\n".join(body)
    if "dl-tls" in text or "tls_get_addr" in text:
        where = "shared memory"
    elif "memfd:astra-buf" in text:
        where = "global memory (between blocks)"
    elif "astra_runtime.cpp" in text.split("Location is", 1)[-1]:
        where = "dynamic shared memory"
    parts = []
    for n, (kind, size, thread, frames) in enumerate(accesses[:2]):
        loc = _user_frame(frames, filename)
        who = names.get(thread, "another thread")
        parts.append(f"{'an earlier ' if n else ''}{kind} of {size} bytes"
                     + (f" at {loc}" if loc else "") + f" by {who}")
    why = ("lanes of one warp stored different values there in one instruction (which lane's value stays is "
           "undefined)" if "astra: lanes of one warp stored different values" in output
           else "nothing orders them (a missing __syncthreads() or __syncwarp()?)")
    return f"data race on {where}: " + " and ".join(parts) + f" — {why} (ThreadSanitizer)"


def asan_summary(output: str, filename: str = "") -> str | None:
    """'out-of-bounds read of 4 bytes at file.cu:12 in block (..) thread (..)' from an ASan report
    (of a static shared array: which, and the element reached)."""
    lines = output.splitlines()
    err = next((l for l in lines if "ERROR: AddressSanitizer:" in l), None)
    if err is None:
        return None
    kind = err.split("AddressSanitizer:", 1)[1].strip().split(" on ")[0]
    access = next((l.strip() for l in lines if l.startswith(("READ of size", "WRITE of size"))), "")
    rw, size = "", ""
    if access:
        parts = access.split()
        rw, size = parts[0].lower(), parts[3]
    frame = None
    for l in lines:
        s = l.strip()
        if s.startswith("#") and " in " in s:
            loc = s.rsplit(" ", 1)[-1]
            if any(x in loc for x in ("astra_runtime.cpp", "astra_cuda_shim.h", "libasan", "/usr/", "<null>")):
                continue
            if ":" in loc and not loc.startswith("("):
                parts = loc.split(":")
                frame = ":".join(parts[:2]) if len(parts) >= 2 else loc
                if filename and frame.split(":")[0].endswith("/" + filename.lstrip("/")):
                    frame = filename + ":" + parts[1]  # the symbolizer prefixes the build dir
                break
    where = next((l.strip()[len("astra: "):] for l in lines if l.startswith("astra: in block")), "")
    # a static __shared__ array's redzone (the runtime names the array and the element reached)
    shared = next((l.strip()[len("astra: "):] for l in lines if l.startswith("astra: shared memory ")), "")
    what = "out-of-bounds" if "overflow" in kind or shared else kind
    msg = f"{what} {rw} of {size} bytes".replace("  ", " ") if rw else what
    if shared:
        msg += f" ({shared})"
    if frame:
        msg += f" at {frame}"
    if where:
        msg += f" {where}"
    return msg + f" (AddressSanitizer: {kind})"
