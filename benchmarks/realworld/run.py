"""Take every kernel of the suite through what a new user does, on a copy of the public file,
unedited, and record how far each gets.

    python benchmarks/realworld/run.py [--backend cpu|gpu] [--stage list|spec|check|profile|optimize]
                                       [--only PATTERN] [--jobs N] [--budget S] [--shard I/N] [--out PATH]

Per kernel, each step the `astra` command (a subprocess with its own time limit, so a hung or
crashing step costs that kernel only): `astra kernels FILE` -> `astra spec FILE --kernel K` with
the project's flags -> the proposed comment pasted directly above the kernel (or its `template`
line) -> `astra kernels` again (does Astra's own validator accept it?) -> `astra check` -> on a
GPU `astra profile` and `astra optimize --llm offline` with a bounded budget. Where Astra's compile
fails, nvcc is asked whether it compiles the file with the same flags (`nvcc --cubin`, confined
like every compiler of user code). Each run works in a scratch copy of the repository's cached
tree (hard links; the edited file is a new file), so `.astra/` pins and edits never reach the cache.

Writes the results JSON after every kernel (a run stopped halfway keeps what it measured) and
prints the summary tables at the end (`report.py` makes the README's).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Any
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realworld import classify, fetch, report, traffic  # noqa: E402
from realworld.manifest import Kernel, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
STAGES = ("list", "spec", "check", "profile", "optimize")
# Seconds per step (a CPU check of a large templated kernel compiles for a minute or more; `astra
# spec` of a PyTorch extension runs its first draft after an nvcc compile of torch's headers).
LIMITS = {"kernels": 60, "spec": 240, "check": 420, "nvcc": 240, "profile": 300, "optimize": 420}


@dataclass
class Record:
    id: str
    repo: str
    project: str
    source: str
    commit: str
    path: str
    kernel: str
    category: str
    memory_bound: bool
    fetched: bool = False
    listed: bool = False
    spec_proposed: bool = False
    spec_valid: bool = False
    compiled: bool | None = None      # None: the check never reached its compile
    compiler: str = ""                # which compiler judged (nvrtc, g++, nvcc)
    passed: bool = False
    failure: dict | None = None       # the first failure: stage, check, message
    failure_class: str = ""
    nvcc: dict | None = None          # whether nvcc compiles the file with the project's flags
    spec: str = ""                    # the comment Astra proposed (Astra's output, not the project's)
    spec_notes: list[str] = field(default_factory=list)
    bench_traffic: dict = field(default_factory=dict)   # per bench case the bytes the profiler's floor counts (traffic.py)
    gpu: dict = field(default_factory=dict)
    cpu_optimize: dict = field(default_factory=dict)   # --backend cpu --stage optimize: what applies and passes the gate
    seconds: dict = field(default_factory=dict)

    @classmethod
    def of(cls, k: Kernel) -> "Record":
        return cls(k.id, k.repo.key, k.repo.project, k.repo.source, k.repo.commit, k.path, k.kernel, k.category,
                   k.memory_bound)

    def fail(self, stage: str, message: str, check: str = "", **extra) -> "Record":
        self.failure = {"stage": stage, "check": check, "message": _short(message), **extra}
        return self


# Paths that differ from run to run or machine to machine: a kernel's scratch copy, the CUDA
# headers of the NVIDIA wheels (say where a message points, not where this machine keeps it).
_SCRATCH = re.compile(r"\S*astra-realworld-[A-Za-z0-9_]+/[^/\s]+(/|(?=[\s,)])|$)")
_WHEEL = re.compile(r"\S*/site-packages/nvidia/cu\d+/include/")


def _short(msg: str, limit: int = 600) -> str:
    msg = _WHEEL.sub("<cuda>/", _SCRATCH.sub("", msg or ""))
    msg = re.sub(r"\s+", " ", msg).strip()
    # head and tail: a compile message's head is the flags (torch's folders are long), its tail the error
    return msg if len(msg) <= limit else msg[:limit // 2 - 1] + " … " + msg[-(limit // 2 - 2):]


# ---- running one step -------------------------------------------------------------------------

@dataclass
class Step:
    ok: bool                 # exit code 0
    out: dict | None         # the JSON answer (errors are JSON too)
    error: str = ""          # why there is no usable answer
    timeout: bool = False
    crash: bool = False
    seconds: float = 0.0


def astra(args: list[str], limit: float, cwd: Path) -> Step:
    """One `astra` verb with --json in its own process group (killed whole on timeout)."""
    cmd = [sys.executable, "-m", "astra_cuda.cli", *args, "--json"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(p)
        return Step(False, None, f"`astra {args[0]}` did not finish in {limit:.0f} s", timeout=True,
                    seconds=time.monotonic() - t0)
    dt = time.monotonic() - t0
    try:
        data = json.loads(out)
    except ValueError:
        tail = " ".join((err or out).strip().splitlines()[-3:])
        return Step(False, None, f"`astra {args[0]}` exited {p.returncode} without an answer: {tail}",
                    crash=True, seconds=dt)
    return answer(data, p.returncode, dt)


def answer(data: Any, returncode: int, seconds: float) -> Step:
    """A verb's --json answer as a Step: the CLI's error answer ({"error": {"message", "diagnostics"}})
    fails it; an optimize result's own `error` (None or a sentence) is part of a result."""
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        e = data["error"]
        msgs = [d.get("message", "") if isinstance(d, dict) else str(d) for d in e.get("diagnostics") or []]
        return Step(False, data, "; ".join(msgs[:3]) or e.get("message", "error"), seconds=seconds)
    return Step(returncode == 0, data, seconds=seconds)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.communicate()


def nvcc_compiles(k: Kernel, work: Path, limit: float = LIMITS["nvcc"]) -> dict:
    """Whether nvcc compiles the unedited file with the project's flags (device code for sm_90),
    confined like every compiler of user code (astra_cuda.compile.confine). A header nvcc does not
    compile alone is compiled as the project's build compiles it: through the source file of its
    `launch_files` that includes it (apex's megatron softmax headers are not self-contained: the
    .cu including them brings torch's headers first)."""
    alone = _nvcc_once(k, work, work / k.path, limit)
    through = includer(k, work) if alone.get("ok") is False else None
    if through is None:
        return alone
    return {**_nvcc_once(k, work, through, limit), "through": str(through.relative_to(work)), "alone": alone["message"]}


def _nvcc_once(k: Kernel, work: Path, src: Path, limit: float) -> dict:
    from astra_cuda.compile import confine, project
    from astra_cuda.compile import toolkit, torch_ext
    tk = toolkit.find()
    if tk is None:
        return {"ok": None, "message": "no CUDA toolkit (nvcc) found"}
    dirs = k.include_dirs(work)
    incs = [f"-I{d}" for d in dirs]
    # a PyTorch extension is built by torch's cpp_extension, which adds torch's folders and defines
    ctx = project.from_flags([str(d) for d in dirs], origin="suite")
    ext = torch_ext.nvcc_flags(ctx) if torch_ext.uses_torch(src.read_text(errors="replace"), str(src), ctx) else None
    if ext is not None:
        incs += [f"-I{d}" for d in ext.include_dirs] + [f"-I{d}" for d in ext.system_dirs]
    # the library headers a compiler-only toolkit lacks, from NVIDIA's wheels, as Astra's own compiles
    incs += toolkit.library_headers(tk)
    cmd = [tk.nvcc, f"-std={ext.std if ext else k.standard}", "-arch=sm_90", "--cubin", "-x", "cu", *incs,
           *[f"-D{d}" for d in k.macro_defines], *(ext.defines + ext.flags if ext else ()), *k.repo.nvcc]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="astra-rw-nvcc-") as tmp:
        policy = confine.for_unit([f"-I{src.parent}", *incs], (tk.root, *tk.include_dirs, *torch_ext.read_dirs()),
                                  workdir=tmp, exec_dirs=(tk.root,))
        # the budget Astra's own nvcc gets (torch's headers run the front end out of 2 GiB)
        policy = dataclasses.replace(policy, memory=confine.compiler_memory(confine.heavy(incs)))
        try:
            p = confine.run([*cmd, "-o", str(Path(tmp) / "out.cubin"), str(src)], policy, limit)
        except subprocess.TimeoutExpired:
            return {"ok": None, "message": f"nvcc did not finish in {limit:.0f} s", "seconds": round(limit, 1)}
        except Exception as e:  # the sandbox is unavailable: say so, do not guess
            return {"ok": None, "message": f"nvcc not run: {e}"}
    log = (p.stdout + p.stderr).replace(str(work) + "/", "")
    first = next((ln for ln in log.splitlines() if re.search(r"\berror\b", ln)), log.strip()[-300:])
    return {"ok": p.returncode == 0, "message": "" if p.returncode == 0 else _short(first, 300),
            "seconds": round(time.monotonic() - t0, 1)}


def includer(k: Kernel, work: Path) -> Path | None:
    """For a kernel in a header, the source file among its `launch_files` that #includes it."""
    if k.path.endswith((".cu", ".cpp", ".cc", ".cxx")):
        return None
    name = Path(k.path).name
    for rel in k.launch_files:
        f = work / rel
        if rel.endswith(".cu") and f.is_file() and any(
                Path(inc).name == name for inc, _ in fetch.includes_of(f.read_bytes())):
            return f
    return None


# ---- one kernel -------------------------------------------------------------------------------

def _find(listing: dict, name: str) -> dict | None:
    ks = listing.get("kernels") or []
    for k in ks:
        if name in (k.get("qualified_name"), k.get("name")):
            return k
    short = name.split("::")[-1]
    hits = [k for k in ks if k.get("name") == short]
    return hits[0] if len(hits) == 1 else None


def paste(text: str, line: int, col: int, comment: str) -> str:
    """The comment directly above the kernel's first line (its `template` line, 1-based)."""
    lines = text.splitlines(keepends=True)
    head = "".join(lines[:line - 1])
    rest = "".join(lines[line - 1:])
    if col > 1:   # something else ends on the kernel's first line: start the comment on a line of its own
        head, rest = head + rest[:col - 1] + "\n", rest[col - 1:]
    return head + comment.rstrip("\n") + "\n" + rest


def run_kernel(k: Kernel, o: "Options") -> Record:
    r = Record.of(k)
    said = fetch.status(o.cache, k)
    if said != "ok":
        r.fail("fetch", said)
        return r
    r.fetched = True
    work = o.scratch / re.sub(r"[^A-Za-z0-9_.-]+", "_", k.id)[:150]
    shutil.copytree(o.cache / k.repo.cache_name, work, copy_function=os.link, dirs_exist_ok=False)
    try:
        _stages(k, r, o, work)
    finally:
        if not o.keep:
            shutil.rmtree(work, ignore_errors=True)
    return r


def _step(r: Record, name: str, args: list[str], o: "Options", work: Path) -> Step:
    s = astra(args, o.limit(name), work)
    r.seconds[name] = r.seconds.get(name, 0) + round(s.seconds, 2)
    return s


def _stages(k: Kernel, r: Record, o: "Options", work: Path) -> None:
    f = work / k.path
    flags = k.astra_flags(work)
    s = _step(r, "kernels", ["kernels", str(f)], o, work)
    if s.out is None or "error" in s.out:
        r.fail("list", s.error, timeout=s.timeout, crash=s.crash)
        return
    info = _find(s.out, k.kernel)
    if info is None:
        names = [x.get("qualified_name") for x in s.out.get("kernels", [])]
        short = k.kernel.split("::")[-1]
        where = "" if re.search(rf"\b{re.escape(short)}\b", f.read_text(errors="replace")) else \
            " (the name is not in the file: renamed upstream?)"
        r.fail("list", f"{k.kernel} is not among the {len(names)} kernels listed{where}: {', '.join(names[:8])}")
        return
    r.listed = True
    name = info["qualified_name"]
    s = _step(r, "spec", ["spec", str(f), "--kernel", name, *flags], o, work)
    if not s.ok or s.out is None or not s.out.get("comment"):
        # why: what inference cannot know, or which part of the draft Astra's own validator refuses
        problems = [str(x) for x in (s.out or {}).get("problems") or []]
        why = f"no spec proposed: {'; '.join(problems[:2])}" if problems \
            else "no spec proposed"
        r.fail("spec", s.error or why, timeout=s.timeout, crash=s.crash)
        return
    r.spec_proposed, r.spec, r.spec_notes = True, s.out["comment"], list(s.out.get("notes") or [])
    (line, col) = info["range"]["start"]
    text = paste(f.read_text(errors="surrogateescape"), line, col, r.spec)
    f.unlink()   # a hard link to the cache: write a new file instead
    f.write_text(text, errors="surrogateescape")
    s = _step(r, "kernels", ["kernels", str(f)], o, work)
    pasted = _find(s.out or {}, name)
    if pasted is None:
        r.fail("spec-valid", s.error or "the kernel is not listed once its spec is pasted", timeout=s.timeout,
               crash=s.crash)
        return
    errors = pasted.get("spec_errors") or []
    if errors or not pasted.get("has_spec"):
        r.fail("spec-valid", "; ".join(e.get("message", str(e)) for e in errors[:3]) or
               f"the pasted comment is not read as {name}'s spec")
        return
    r.spec_valid = True
    r.bench_traffic = traffic.of_text(text, str(f), name, r.spec_notes)   # from the spec alone: no compile, no run
    if o.stage == "spec":
        return
    s = _step(r, "check", ["check", str(f), "--kernel", name, "--backend", o.backend, *flags], o, work)
    if not _judge(r, s):
        if _compile_failure(r):
            r.nvcc = _missing_header(o.nvcc_verdict(k, lambda: nvcc_compiles(k, _unedited(k, o, work),
                                                                               o.limit("nvcc"))), k, o)
        return
    if o.stage == "check":
        return
    if o.backend != "gpu":   # the optimize stage on the CPU: which rewrites apply and pass the gate (no timing)
        s = _step(r, "optimize", ["optimize", str(f), "--kernel", name, "--backend", "cpu", "--llm", "offline",
                                  "--rounds", str(o.rounds), *flags], o, work)
        res = s.out or {}
        r.cpu_optimize = {"error": _short(s.error or str((res.get("error") or {}).get("message", "no answer")))} \
            if "rounds" not in res else {"improved": res.get("improved"), **_tried(res)}
        return
    _gpu(k, r, o, work, f, name, flags)


def _missing_header(verdict: dict, k: Kernel, o: "Options") -> dict:
    """Where nvcc stops at a header it cannot find, which one, and whether the repository holds it
    at all: one it does not (TransformerEngine's generated string_code_*.h, a submodule's
    cudnn_frontend.h, a header CMake downloads) is outside what the suite can compile."""
    m = re.search(r"fatal error: (\S+): No such file or directory", verdict.get("message") or "")
    if verdict.get("ok") is not False or m is None:
        return verdict
    header = m.group(1)
    out = {**verdict, "missing_header": header, "outside_repository": fetch.outside_repository(o.cache, k, header)}
    made_by = _build_file_naming(o.cache / k.repo.cache_name, header)
    return {**out, "made_by_build": made_by} if made_by else out


def _build_file_naming(root: Path, header: str) -> str | None:
    """The repository's build file that names a header it does not hold (TransformerEngine's CMake
    writes `string_code_transpose_rtc_transpose_cu.h` from its RTC sources): the file needs the
    project's build step before any compiler can read it. None where no build file names it."""
    stem = Path(header).stem
    if not stem or not root.is_dir():
        return None
    # its name without the extension handed to the build (`make_string_header_from_file(… NAME)`),
    # in a build file that writes files; a dependency's header is named whole (`cudnn_frontend.h`)
    named = re.compile(rf"(?<![\w.]){re.escape(stem)}(?![\w.])")
    for f in sorted(root.rglob("CMakeLists.txt")) + sorted(root.rglob("*.cmake")):
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        if named.search(text) and re.search(r"configure_file|OUTPUT|file\s*\(\s*WRITE", text):
            return str(f.relative_to(root))
    return None


def _unedited(k: Kernel, o: "Options", work: Path) -> Path:
    """nvcc reads the file as published: the scratch tree with the cached original restored."""
    f = work / k.path
    f.unlink()
    os.link(o.cache / k.repo.cache_name / k.path, f)
    return work


def _judge(r: Record, s: Step) -> bool:
    """Record the check's verdict; True when it passed."""
    if s.out is None or "verdicts" not in s.out:
        r.fail("check", s.error, timeout=s.timeout, crash=s.crash)
        return False
    v = (s.out.get("verdicts") or [{}])[0]
    comp = next((c for c in v.get("checks", []) if c.get("name") == "compile"), None)
    if comp is not None:
        r.compiled = bool(comp.get("passed"))
        # on a GPU the verdict names what judged (issue 24: nvcc on the file wherever a toolkit is);
        # on the CPU g++ builds the cut as well, which `_compiler` adds
        said = str(v.get("compiler") or "").split(", flags")[0] if v.get("backend") != "cpu" else ""
        r.compiler = said or _compiler(v.get("backend", ""), comp.get("details", ""), r.compiled)
    r.passed = v.get("status") == "passed"
    if not r.passed:
        fs = v.get("failures") or []
        if fs:
            r.fail("check", fs[0].get("message", ""), check=fs[0].get("check", ""))
        else:
            r.fail("check", v.get("summary") or v.get("log") or v.get("status", "failed"), check=v.get("status", ""))
    return r.passed


def _compiler(backend: str, details: str, passed: bool) -> str:
    """Which compiler judged, where the verdict does not say (an older verdict): a failure names it
    ("does not compile for the GPU (nvcc 13.0, ...)", or g++ building the cut unit for the CPU); a
    pass does not, so it is what Astra picks here — on the CPU backend nvcc on the file where a CUDA
    toolkit is found (else NVRTC on the cut unit), then g++ on the cut unit; on a GPU, the same
    toolkit's nvcc, else NVRTC through CuPy."""
    if not passed:
        m = re.search(r"for the GPU \((nvcc [\d.]+|nvrtc [\d.]+|NVRTC [\d.]+)", details)
        return m.group(1) if m else "g++ (the cut unit, for the CPU)"
    if backend != "cpu":
        from astra_cuda.compile import toolkit as tk_mod
        found = tk_mod.find()
        return found.describe() if found else "nvrtc (CuPy)"
    from astra_cuda.compile import toolkit
    tk = toolkit.find()
    return f"{tk.describe() if tk else 'nvrtc'} + g++"


def _compile_failure(r: Record) -> bool:
    f = r.failure or {}
    return f.get("check") == "compile" or bool(classify.ASTRA_COMPILE.search(f.get("message", "")))


def _gpu(k: Kernel, r: Record, o: "Options", work: Path, f: Path, name: str, flags: list[str]) -> None:
    """The timed stages, each when the GPU is free (a profile before a waiting optimization)."""
    late = "not timed: the run's budget was spent while it waited for the GPU"
    with o.timing.turn(PROFILE):
        if o.deadline and time.monotonic() > o.deadline - 60:   # waited past the run's budget for the GPU
            r.gpu["profile"] = {"error": late}
            return
        _profile(r, o, work, f, name, flags)
    if o.stage == "profile":
        return
    with o.timing.turn(OPTIMIZE):
        if o.deadline and time.monotonic() > o.deadline - 60:
            r.gpu["optimize"] = {"error": late}
            return
        _optimize(r, o, work, f, name, flags)


def _profile(r: Record, o: "Options", work: Path, f: Path, name: str, flags: list[str]) -> None:
    s = _step(r, "profile", ["profile", str(f), "--kernel", name, "--backend", "gpu", *flags], o, work)
    prof = ((s.out or {}).get("profiles") or [None])[0]
    if prof is None:
        r.gpu["profile"] = {"error": s.error}
    else:
        bench = [x for x in prof.get("sizes") or [] if x.get("role", "") in ("", "bench")] or prof.get("sizes") or [{}]
        big = max(bench, key=lambda x: x.get("bytes_moved", 0))
        cand = big.get("candidate") or {}
        r.gpu["profile"] = {"measured": prof.get("measured"), "device": prof.get("device"), "sizes": big.get("label"),
                            "median_us": cand.get("median_us"), "gbps": cand.get("gbps"),
                            "ceiling_share": cand.get("ceiling_share"), "errors": prof.get("errors", [])[:2]}


def _optimize(r: Record, o: "Options", work: Path, f: Path, name: str, flags: list[str]) -> None:
    # within the run's budget: no round starts past its deadline (a lane's step limit kills what runs on)
    left = ["--time-budget", f"{max(30.0, o.deadline - time.monotonic()):.0f}"] if o.deadline else []
    s = _step(r, "optimize", ["optimize", str(f), "--kernel", name, "--backend", "gpu", "--llm", "offline",
                              "--rounds", str(o.rounds), "--tune", str(o.tune), *left, *flags], o, work)
    res = s.out or {}
    if "speedup" not in res:   # no result: a step that timed out or crashed, or the CLI's error answer
        r.gpu["optimize"] = {"error": _short(s.error or str((res.get("error") or {}).get("message", "no answer")))}
        return

    def share(ev: dict | None) -> float | None:   # at the largest bench size (the ladder's others are per_size)
        sizes = ((ev or {}).get("profile") or {}).get("sizes") or []
        bench = [t for t in sizes if t.get("role", "") in ("", "bench")] or sizes
        return bench[-1].get("copy_share") if bench else None

    def per_size(ev: dict | None) -> list[dict]:
        return [{"role": t.get("role", ""), "sizes": t.get("sizes"), "speedup": t.get("speedup"),
                 "copy_share": t.get("copy_share")} for t in ((ev or {}).get("profile") or {}).get("sizes") or []]
    r.gpu["optimize"] = {"speedup": res.get("speedup"), "improved": res.get("improved"),
                         "measured": res.get("measured"), "error": _short(res.get("error") or "") or None,
                         "share_before": share(res.get("baseline")), "share_after": share(res.get("best")),
                         "per_size": per_size(res.get("best")),
                         "bottleneck": ((res.get("baseline") or {}).get("profile") or {}).get("bottleneck"),
                         "device": ((res.get("best") or {}).get("profile") or {}).get("device"),
                         "rounds": o.rounds, "tune": o.tune, "seconds": res.get("seconds"), **_tried(res)}


def _tried(res: dict) -> dict:
    """What the planner tried and what became of each idea, and what it passed over at the first
    round (or, where no round ran, when it found nothing left) and why (why a family did or did not
    fire on this kernel)."""
    rounds = res.get("rounds") or []
    return {"tried": [{"idea": (x.get("plan") or {}).get("idea"), "outcome": x.get("outcome"),
                       "reason": _short(x.get("reason") or "", 300)} for x in rounds],
            "passed_over": [_short(w, 160) for w in ((rounds[0].get("plan") or {}).get("skipped") if rounds
                                                     else res.get("passed_over")) or []]}


# ---- the run ----------------------------------------------------------------------------------

PROFILE, OPTIMIZE = 0, 1   # turns on the GPU, most urgent first


class Turns:
    """The GPU, one timing at a time, a profile before any waiting optimization: a profile takes
    seconds and an optimization a minute or more, so when the run's budget ends the kernels that
    passed have at least their share of the copy ceiling measured."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._waiting = [0, 0]

    @contextlib.contextmanager
    def turn(self, rank: int):
        with self._cv:
            self._waiting[rank] += 1
            while self._busy or any(self._waiting[:rank]):
                self._cv.wait()
            self._waiting[rank] -= 1
            self._busy = True
        try:
            yield
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()


@dataclass
class Options:
    backend: str
    stage: str
    cache: Path
    scratch: Path
    keep: bool = False
    rounds: int = 3
    tune: int = 2
    limit_scale: float = 1.0
    deadline: float = 0.0      # time.monotonic() after which no step may run on (0: none)
    _nvcc_lock: threading.Lock = field(default_factory=threading.Lock)
    # One kernel at a time is timed (profile, optimize): with --jobs N on a GPU the other kernels'
    # listing, inference and checks go on meanwhile, but never two timings on one GPU.
    timing: "Turns" = field(default_factory=lambda: Turns())

    def limit(self, step: str) -> float:
        """The step's time limit, cut short where the run's deadline comes first."""
        own = LIMITS[step] * self.limit_scale
        return min(own, max(5.0, self.deadline - time.monotonic())) if self.deadline else own

    def nvcc_verdict(self, k: Kernel, compute) -> dict:
        """nvcc's answer for a pinned file and its flags, remembered in the cache (it is a fact
        about the published file, not about Astra, and the slowest step of a CPU run)."""
        from astra_cuda.compile import toolkit
        tk = toolkit.find()
        libs = toolkit.library_headers(tk) if tk else []
        extras = sorted(os.listdir(libs[0][2:])) if libs else []
        key = json.dumps([k.repo.source, k.repo.commit, k.path, k.includes, k.macro_defines, k.standard,
                          k.repo.nvcc, _nvcc_version(), extras, _torch_version(), fetch.inputs(k),
                          [(p, _torch_version(p)) for p in k.repo.packages],
                          "a header alone, else through its includer"])
        path = self.cache / "nvcc.json"
        with self._nvcc_lock:
            known = json.loads(path.read_text()) if path.exists() else {}
        if key in known:
            return {**known[key], "remembered": True}
        verdict = compute()
        if verdict.get("ok") is not None:
            with self._nvcc_lock:
                known = json.loads(path.read_text()) if path.exists() else {}
                known[key] = verdict
                tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
                tmp.write_text(json.dumps(known, indent=1) + "\n")
                os.replace(tmp, path)
        return verdict


@functools.cache
def _torch_version(package: str = "torch") -> str:
    """The version of the torch whose headers a PyTorch extension compiles with, or of another
    package whose headers a build passes ('' for none), read from its installed metadata
    (importing torch takes seconds)."""
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


@functools.cache
def _nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return ""
    r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def machine_name(backend: str) -> str:
    if backend != "gpu":
        return "cpu"
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "gpu"
    m = re.search(r"\b([A-Z]\d{2,4}[A-Za-z]?)\b", name)
    return m.group(1) if m else "gpu"


def _environment(backend: str) -> dict:
    def out(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    nv = out(["nvcc", "--version"]).splitlines()
    # A copied working tree (the device machine's) may carry stale git metadata: the caller that
    # knows the commit says it.
    commit = os.environ.get("ASTRA_COMMIT") or out(["git", "rev-parse", "HEAD"])
    dirty = False if os.environ.get("ASTRA_COMMIT") else bool(out(["git", "status", "--porcelain", "--", "server",
                                                                   "benchmarks/realworld"]))
    return {"astra_commit": commit, "astra_dirty": dirty,
            "nvcc": nv[-1] if nv else "none", "python": sys.version.split()[0], "cores": os.cpu_count(),
            "device": out(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) if backend == "gpu" else ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run the real-world suite through the new-user path.")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--stage", choices=STAGES, help="the last stage to run (default: check on the CPU, "
                    "optimize on a GPU; optimize on the CPU says which rewrites apply and pass the gate, untimed)")
    ap.add_argument("--only", help="kernels whose id (repo:path:kernel) contains this; comma-separated alternatives")
    ap.add_argument("--shard", help="I/N: only the I-th of N equal parts of the selection (for one device call each)")
    ap.add_argument("--jobs", type=int, default=1, help="kernels at once (default 1)")
    ap.add_argument("--budget", type=float, default=0, help="start no kernel after this many seconds (0: no limit)")
    ap.add_argument("--rounds", type=int, default=3, help="optimize: rounds of the offline team (default 3)")
    ap.add_argument("--tune", type=int, default=2, help="optimize: tuning points (default 2)")
    ap.add_argument("--cache", default=str(fetch.CACHE))
    ap.add_argument("--out", help="results JSON (default benchmarks/results/realworld-<machine>[-shardIofN].json)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies (to look at a failure)")
    ap.add_argument("--slower", type=float, default=1.0, metavar="F",
                    help="multiply every step's time limit by F (a loaded machine; default 1)")
    a = ap.parse_args(argv)
    stage = a.stage or ("optimize" if a.backend == "gpu" else "check")
    if a.backend == "cpu" and stage == "profile":
        ap.error("profile needs --backend gpu (on the CPU, --stage optimize says which rewrites apply and pass the gate)")
    cache = Path(a.cache)
    fetch.unpack_if_needed(cache)
    m = load()
    kernels = m.select(a.only)
    suffix = ""
    if a.shard:
        i, n = (int(x) for x in a.shard.split("/"))
        kernels = kernels[i - 1::n]
        suffix = f"-shard{i}of{n}"
    machine = machine_name(a.backend)
    out = Path(a.out) if a.out else RESULTS / f"realworld-{machine}{suffix}.json"
    scratch = Path(tempfile.mkdtemp(prefix="astra-realworld-"))
    o = Options(a.backend, stage, cache, scratch, a.keep, a.rounds, a.tune, limit_scale=max(a.slower, 0.1))
    t0, started = time.monotonic(), time.time()
    if a.budget:   # a kernel under way when the budget is spent gets another minute, no more
        o.deadline = t0 + a.budget + 60
    triage = classify.load_triage()
    head = {"suite": "realworld", "machine": machine, "backend": a.backend, "stage": stage, "jobs": a.jobs,
            "only": a.only, "shard": a.shard, "limits_s": {k: v * o.limit_scale for k, v in LIMITS.items()},
            **_environment(a.backend)}
    records: dict[str, Record] = {}
    lock = threading.Lock()
    print(f"realworld: {len(kernels)} kernels, backend {a.backend}, through {stage}, {a.jobs} at once; "
          f"scratch {scratch}", flush=True)

    def one(k: Kernel) -> Record:
        if a.budget and time.monotonic() - t0 > a.budget:
            return Record.of(k).fail("budget", f"not started: the run's budget of {a.budget:.0f} s was spent")
        try:
            return run_kernel(k, o)
        except Exception as e:  # the runner's own failure on one kernel never stops the others
            where = " <- ".join(f"{Path(fr.filename).name}:{fr.lineno} {fr.name}"
                                for fr in reversed(traceback.extract_tb(e.__traceback__)[-3:]))
            return Record.of(k).fail("runner", f"{type(e).__name__}: {e} (at {where})", crash=True)

    def save() -> None:
        recs = [asdict(records[k.id]) for k in kernels if k.id in records]
        data = {**head, "started": round(started, 1), "wall_s": round(time.monotonic() - t0, 1), "complete": len(recs) == len(kernels),
                "summary": report.summary(recs), "kernels": recs}
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, out)

    try:
        with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            # saved as each ends: a run stopped from outside keeps every kernel that finished
            for r in (fu.result() for fu in cf.as_completed([pool.submit(one, k) for k in kernels])):
                r.failure_class = classify.classify(asdict(r), triage)
                with lock:
                    records[r.id] = r
                    save()
                f = r.failure or {}
                print(f"{r.failure_class:>14}  {r.id}  ({sum(r.seconds.values()):.0f} s)"
                      + (f"  [{f.get('stage')}{'/' + f['check'] if f.get('check') else ''}] {f.get('message', '')[:160]}"
                         if not r.passed else ""), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    save()
    print()
    print(report.markdown(json.loads(out.read_text())))
    print(f"\nresults: {out} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
