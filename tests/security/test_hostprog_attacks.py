"""The catalogue's constructor-program entries (kind "hostprog"), run through `hostprog.run` as
inference runs a program built of the user's unit: each tries what a program that computes and
prints never needs, and must be refused (a clear error where it is fatal) with no effect — no
connection, no file, no process, the parent alive — under the oldest Landlock ABI and the
kernel's (the system-call filter does not depend on it). Also: the programs Astra builds still
run, and where seccomp is missing the run is refused unless the user opted out."""
from __future__ import annotations

import socket
import subprocess
import time

import pytest

from astra_cuda.compile import confine, hostprog, sandbox
from astra_cuda.errors import BackendUnavailable, LaunchError

from . import catalogue
from .test_attacks import ABIS, PAYLOAD_HEADERS

pytestmark = pytest.mark.skipif(sandbox.problems() != [], reason="no sandbox on this machine")

EDGE_ABIS = sorted({ABIS[0], ABIS[-1]})
ATTACKS = [a for a in catalogue.ALL if a.kind == "hostprog"]
PROGRAM = PAYLOAD_HEADERS + """#include <sched.h>
#include <sys/mount.h>
int main(int argc, char** argv) {
  long r = 0;
  errno = 0;
  BODY
  std::printf("r=%ld errno=%d\\n", r, errno);
  return 0;
}
"""


def _build(tmp_path, body: str, subs: dict[str, str], headers: str = "") -> str:
    for k, v in subs.items():
        body = body.replace(k, v)
    src, exe = tmp_path / "prog.cpp", tmp_path / "prog"
    src.write_text(headers + PROGRAM.replace("BODY", body))
    subprocess.run(["g++", "-O1", "-w", "-pthread", "-o", str(exe), str(src)], check=True, capture_output=True)
    return str(exe)


@pytest.mark.parametrize("abi", EDGE_ABIS, ids=[f"abi{a}" for a in EDGE_ABIS])
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_constructor_program_contained(attack, abi, tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.ABI_CAP_ENV, str(abi))
    canary = tmp_path / "canary"
    canary.mkdir()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    tcp.setblocking(False)
    unix_path = str(tmp_path / "s.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(1)
    unix.setblocking(False)
    exe = _build(tmp_path, attack.body, {"CANARY": f'"{canary}"', "PORT": str(tcp.getsockname()[1]),
                                         "SOCK_Q": f'"{unix_path}"'})
    try:
        if attack.fatal:
            with pytest.raises(LaunchError, match="stopped by the sandbox: it made a system call"):
                hostprog.run(exe, [])
        else:
            out = hostprog.run(exe, [])   # the parent (the wrapper) alive: an ordinary result
            assert out.startswith("r=-1 errno=1"), out
        time.sleep(0.2)  # a child it might have started, given time to act
        assert list(canary.iterdir()) == []
        for listener in (tcp, unix):
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        tcp.close()
        unix.close()


def test_a_plain_program_still_computes_and_prints(tmp_path):
    """What a constructor program does — allocate, compute in a thread or not, print, read a file
    of its own folder — under the filter."""
    body = ('std::vector<int> v(1 << 20, 3); long s = 0; std::thread t([&] { for (int x : v) s += x; }); t.join(); '
            'FILE* f = std::fopen(argv[0], "r"); r = s + (f != 0);')
    exe = _build(tmp_path, body, {}, "#include <thread>\n#include <vector>\n")
    assert hostprog.run(exe, []).startswith(f"r={3 * (1 << 20) + 1} ")


def test_refused_where_seccomp_is_missing(tmp_path, monkeypatch):
    """Fail closed, as for Landlock: no seccomp, no constructor program — unless the user opted out."""
    exe = _build(tmp_path, "r = 7;", {})
    monkeypatch.setattr(sandbox, "seccomp_in_kernel", lambda: False)
    monkeypatch.delenv(sandbox.OPT_OUT_ENV, raising=False)
    with pytest.raises(BackendUnavailable, match="seccomp is not available in this kernel"):
        hostprog.run(exe, [])
    monkeypatch.setenv(sandbox.OPT_OUT_ENV, "1")
    assert hostprog.run(exe, []).startswith("r=7 ")


def test_the_filter_is_loaded_before_the_program_runs(tmp_path):
    """prctl(PR_GET_SECCOMP) of the program itself: 0 unfiltered; refused by the filter (EPERM)."""
    out = hostprog.run(_build(tmp_path, "r = prctl(PR_GET_SECCOMP);", {}, "#include <sys/prctl.h>\n"), [])
    assert out.startswith("r=-1 errno=1\n"), out
    assert confine.host_filter() is not None
