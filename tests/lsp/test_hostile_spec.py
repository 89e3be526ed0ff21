"""A hostile document must never stall the language server: hovers answer within 100 ms while
its specs are evaluated, and after the worker running its checks is killed."""
from __future__ import annotations

import asyncio
import os
import signal
import time

from conftest import EXAMPLES, Doc, until

# (top-level line, extra [sizes] line, the scalar's value): one hostile spec each
HOSTILE = [
    ("", "", '"10**10**10"'),                         # froze the server for 60 s before expressions were bounded
    ("", "", '"1 << 10**12"'),
    ("", "", '"' + "+".join(["d"] * 5_000) + '"'),    # a sum of 5,000 terms
    ("", "", '"d % 0"'),
    ("seeds = 1000000000", "", '"d"'),                # grew a worker to 16-20 GB
    ("", "\n".join(f"s{i} = [{', '.join(map(str, range(1, 41)))}]" for i in range(10)), '"d"'),  # 40**10 cases
    ("\n".join(f"u{i} = 1" for i in range(20_000)), "", '"d"'),  # 103 s for a hover: each key searched per error
    ("", "\n".join(f"a{i}=[1]" for i in range(1500)), '"d"'),    # every edge case copies every size name
    ("z = " + "[" * 10_000, "", '"d"'),                             # a RecursionError in the TOML parser
]


def _hostile_kernel(i: int, top: str, sizes: str, value: str) -> str:
    return (f'/* @astra\ngrid = ["n"]\nblock = [32]\n{top}\n[sizes]\nn = [1, 7]\nd = [2, 3]\n{sizes}\n'
            f'[args]\nx = {{ type = "float", shape = ["n"], output = true }}\nd = {value}\n*/\n'
            f'__global__ void hostile{i}(float* x, int d) {{ if (threadIdx.x == 0) x[0] = 1.0f; }}\n\n')


def _children(pid: int, needle: bytes) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and needle in cmd:
            out.append(int(d))
    return out


async def _p90_hover(doc: Doc, line: int, col: int, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await doc.hover(line, col)
        times.append(time.perf_counter() - t0)
        await asyncio.sleep(0.02)
    print("hover ms:", [round(t * 1000, 1) for t in times])
    # Nine hovers in ten within 100 ms, the latency target (about 1.5 ms each when idle; at load 16
    # on CI's 2 shared cores the tenth slowest of a round was 2-63 ms, once 196 ms while the
    # snapshot was read, under the old 300 ms bound), and none stalls: a spec that blocked the
    # server made every hover time out (60 s) before expressions were bounded. The first hover of a
    # version waits for its snapshot (a 21,000-line file read: 0.5-0.7 s on 2 shared cores at load
    # 11), so the stall guard is generous — 10 s — as a hang guard on shared CI cores must be.
    assert max(times) < 10, times
    return sorted(times)[int(0.9 * len(times)) - 1]


async def test_hover_stays_fast_on_hostile_specs_and_after_a_killed_worker(client, tmp_path):
    # the server's own first-request cost (imports, first parse) is not what this measures
    warm = tmp_path / "warm.cu"
    warm.write_text((EXAMPLES / "silu_and_mul.cu").read_text())
    wdoc = Doc(client, warm)
    await wdoc.hover(wdoc.line_of("__global__ void silu_and_mul"), 20)

    text = "".join(_hostile_kernel(i, *h) for i, h in enumerate(HOSTILE)) + (EXAMPLES / "silu_and_mul.cu").read_text()
    path = tmp_path / "hostile.cu"
    path.write_text(text)
    doc = Doc(client, path)
    line = doc.line_of("__global__ void silu_and_mul")
    col = doc.text.splitlines()[line].index("silu_and_mul")

    # while the specs are parsed and evaluated (open, then a save that starts the checks)
    assert await _p90_hover(doc, line, col) < 0.1
    doc.save()
    assert await _p90_hover(doc, line, col) < 0.1
    diags = await doc.diagnostics_where(lambda ds: sum(1 for d in ds if d.code == "spec") >= len(HOSTILE))
    said = " | ".join(d.message for d in diags if d.code == "spec")
    for expected in ("exceeds 64 bits", "too long", "modulo by zero", "`seeds` must be", "combinations",
                     "characters long", "(at most 16)", "nested too deeply"):
        assert expected in said, said

    # a worker killed in the middle of the file's checks
    server = next(p for p in _children(os.getpid(), b"astra_cuda.lsp"))
    await until(lambda: _children(server, b"astra_cuda.execution.worker"), 120)
    for pid in _children(server, b"astra_cuda.execution.worker"):
        os.kill(pid, signal.SIGKILL)
    assert await _p90_hover(doc, line, col) < 0.1
    # and the server goes on: the next save is checked by a fresh worker
    doc.save(doc.text + "\n")
    await until(lambda: _children(server, b"astra_cuda.execution.worker"), 120)
    # twenty hovers as in every round: of ten, the "tenth slowest" is the second slowest, and a
    # fresh worker's start on CI's 2 shared cores (107 ms, 165 ms) made two of ten
    assert await _p90_hover(doc, line, col) < 0.1


async def test_a_file_refused_before_analysis_gets_its_line_and_no_traceback(client, tmp_path):
    """A file tree-sitter reads too slowly is refused where the parse stopped (line 3 here), as the
    CLI says it (`k.cu:3:`), and the server logs no traceback for the user's input problem."""
    path = tmp_path / "slow.cu"
    path.write_text("__global__ void k(float* x) { x[0] = 1; }\n\nint z = " + "a<" * 100_000 + "1;\n")
    doc = Doc(client, path)
    diags = await doc.diagnostics_where(lambda ds: any("takes too long to parse" in d.message for d in ds))
    said = next(d for d in diags if "takes too long to parse" in d.message)
    assert said.range.start.line == 2, said
    assert not any("Traceback" in m.message for m in client.log_messages), \
        [m.message[:200] for m in client.log_messages if "Traceback" in m.message]
