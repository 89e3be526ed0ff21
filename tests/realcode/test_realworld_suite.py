"""Issue 23: the real-world suite's own machinery — the manifest, the fetch from mirrors into the
cache (and what it reports when a mirror, a commit or a file is missing), pasting the proposed
spec, the failure classes, and one kernel taken through every CPU stage. The suite's kernels
themselves are public code and run with `make realworld`, never here."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import needs_gxx

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
from realworld import classify, fetch, manifest, report, run  # noqa: E402

KEPT_OUT = ("karpathy/llm.c", "ggml-org/ggml", "ggml-org/llama.cpp", "ggerganov/llama.cpp", "Anjiang-Wei/Astra")


def test_the_manifest_holds_at_least_80_kernels_from_8_repositories_pinned_by_commit():
    m = manifest.load()
    assert len(m.kernels) >= 80
    assert len({k.repo.source for k in m.kernels}) >= 8
    for r in m.repos.values():
        assert len(r.commit) == 40 and r.flags_from
        assert not any(x.lower() in (r.project.lower(), r.source.lower()) for x in KEPT_OUT)
    assert {k.category for k in m.kernels} == set(manifest.CATEGORIES)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


KERNEL = """#include "../inc/common.cuh"
#include <lib/extra.h>
#if defined(NEVER) && \\
    defined(EVER)
#include "../inc/only_in_a_branch.cuh"
#include "generated/string_code.h"
#include <cuda_runtime.h>
#endif
__global__ void scale(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = SCALE * in[i];
}
void launch(float* out, const float* in, int n) { scale<<<(n + 255) / 256, 256>>>(out, in, n); }
"""


@pytest.fixture
def mirror(tmp_path):
    """A bare mirror `owner+demo/repo` of a tiny project: a kernel, its headers, an unrelated file."""
    work = tmp_path / "work"
    files = {"src/k.cu": KERNEL, "src/launcher.cpp": "// a sibling: where launchers often live\n",
             "inc/common.cuh": '#pragma once\n#include "detail/more.cuh"\n#include <lib/cmath>\n',
             "include/lib/cmath": "#pragma once\n", "src/README": "not a header\n",
             "CMakeLists.txt": "find_package(Torch)\n", "docs/CMakeLists.txt": "\n", "src/setup.py": "\n",
             "inc/detail/more.cuh": ("#pragma once\n#define SCALE 2.0f\n#define BEGIN_NS namespace demo {\n"
                                     "#define END_NS }\nBEGIN_NS\n\n#include <lib/gen.h>\n\nEND_NS\n"),
             "include/lib/gen.h": "#pragma once\n", "include/lib/extra.h": "#pragma once\n",
             "inc/only_in_a_branch.cuh": "#pragma once\n", "inc/unused.cuh": "#pragma once\n",
             "docs/unrelated/other.cu": "__global__ void x() {}\n"}
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work, "init", "-q")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "x")
    commit = _git(work, "rev-parse", "HEAD")
    mirrors = tmp_path / "mirrors"
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "owner+demo" / "repo"))
    toml = f"""
[repo.demo]
project = "owner/demo"
source = "owner/demo"
commit = "{commit}"
include = ["include"]
flags_from = "a test"
[repo.gone]
project = "owner/gone"
source = "owner/gone"
commit = "{'0' * 40}"
flags_from = "a test"
[[kernel]]
repo = "demo"
path = "src/k.cu"
kernel = "scale"
category = "elementwise"
memory_bound = true
[[kernel]]
repo = "demo"
path = "src/renamed.cu"
kernel = "scale"
category = "elementwise"
memory_bound = true
[[kernel]]
repo = "gone"
path = "k.cu"
kernel = "k"
category = "elementwise"
memory_bound = true
"""
    (tmp_path / "manifest.toml").write_text(toml)
    return manifest.load(tmp_path / "manifest.toml"), mirrors, tmp_path / "cache"


def test_fetch_writes_the_kernels_file_and_every_header_it_reaches_and_reports_what_is_missing(mirror):
    m, mirrors, cache = mirror
    index = fetch.fetch(m, m.kernels, mirrors, cache, log=lambda *_: None)
    root = cache / m.repos["demo"].cache_name
    got = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    # a header without an extension only where an #include reaches it (libcu++'s <cuda/cmath>); the
    # build files Astra reads for flags on the kernel's way up (astra_cuda.buildfiles)
    assert got == {"src/k.cu", "src/launcher.cpp", "inc/common.cuh", "inc/detail/more.cuh", "include/lib/extra.h",
                   "inc/only_in_a_branch.cuh", "include/lib/cmath", "CMakeLists.txt", "src/setup.py",
                   "include/lib/gen.h"}   # included after a macro tree-sitter cannot read (libcu++'s)
    assert (root / ".git").is_dir()
    kernels = index["kernels"]
    assert kernels["demo:src/k.cu:scale"] == "ok"
    assert kernels["demo:src/renamed.cu:scale"].startswith("not fetched: src/renamed.cu is not in owner/demo@")
    assert kernels["gone:k.cu:k"].startswith("not fetched: no mirror at")
    assert fetch.status(cache, m.kernels[2]).startswith("not fetched")
    # the #includes no file of the repository can be: a generated header, not one it holds elsewhere
    assert fetch.outside_repository(cache, m.kernels[0], "generated/string_code.h") is True
    assert fetch.outside_repository(cache, m.kernels[0], "cuda_runtime.h") is True
    assert fetch.outside_repository(cache, m.kernels[0], "unused.cuh") is False
    # a header's reference compile goes through the launch file that includes it (apex megatron)
    header = dataclasses.replace(m.kernels[0], path="inc/common.cuh", launch_files=("src/launcher.cpp", "src/k.cu"))
    assert run.includer(header, root) == root / "src/k.cu" and run.includer(m.kernels[0], root) is None
    # a kernel whose include folders changed in the manifest since is stale (DeepSpeed's v2 kernels)
    assert fetch.status(cache, m.kernels[0]) == "ok"
    moved = dataclasses.replace(m.kernels[0], include=("include", "inc"))
    assert fetch.status(cache, moved).startswith("not fetched: the cache was filled for other include folders")


# A build that writes a header from a source file (TransformerEngine's string_code_*.h): a CMake
# function configuring a template with the file's text, one call commented out.
BUILD_CMAKE = """project(demo)
function(make_code file_ NAME)   # the project's own rule
    file(READ "${file_}" STRING)
    configure_file(tmpl.h.in "made/${NAME}.h" @ONLY)
endfunction()
make_code(rtc/k.cu
          code_rtc_k_cu)
# make_code(rtc/gone.cu code_gone)
message(FATAL_ERROR "a configure step needs the toolkit; the suite runs only the calls above")
"""


def test_fetch_runs_the_projects_header_generation_and_copies_the_packages_its_build_passes(tmp_path, monkeypatch):
    if fetch.cmake_program() is None:
        pytest.skip("no cmake (make realworld-env installs it)")
    site = tmp_path / "site"   # an installed package with an include folder (nvidia-cudnn-frontend's shape)
    (site / "demo_headers-1.0.dist-info").mkdir(parents=True)
    (site / "demo_headers-1.0.dist-info" / "METADATA").write_text("Name: demo-headers\nVersion: 1.0\n")
    (site / "include").mkdir()
    (site / "include" / "pkg_api.h").write_text("#pragma once\n")
    monkeypatch.syspath_prepend(str(site))
    work = tmp_path / "work"
    for rel, text in {"lib/CMakeLists.txt": BUILD_CMAKE, "lib/tmpl.h.in": 'const char @NAME@[] = R"x(@STRING@)x";\n',
                      "lib/rtc/k.cu": "__global__ void k() {}  // ${not a variable} @NAME@\n",
                      "lib/k.cu": '#include "code_rtc_k_cu.h"\n#include <pkg_api.h>\n'}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work, "init", "-q")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "x")
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(tmp_path / "mirrors" / "owner+gen" / "repo"))
    (tmp_path / "manifest.toml").write_text(f"""
[repo.gen]
project = "owner/gen"
source = "owner/gen"
commit = "{_git(work, "rev-parse", "HEAD")}"
flags_from = "a test"
packages = ["demo-headers", "no-such-package-here"]
[repo.gen.generate]
cmake = "lib/CMakeLists.txt"
function = "make_code"
into = "made"
[[kernel]]
repo = "gen"
path = "lib/k.cu"
kernel = "k"
category = "elementwise"
memory_bound = true
""")
    m = manifest.load(tmp_path / "manifest.toml")
    index = fetch.fetch(m, m.kernels, tmp_path / "mirrors", tmp_path / "cache", log=lambda *_: None)
    root = tmp_path / "cache" / m.repos["gen"].cache_name
    made = root / manifest.GENERATED
    assert sorted(p.name for p in made.iterdir()) == ["code_rtc_k_cu.h"]   # the commented-out call is not run
    assert (made / "code_rtc_k_cu.h").read_text() == \
        'const char code_rtc_k_cu[] = R"x(__global__ void k() {}  // ${not a variable} @NAME@\n)x";\n'
    k = m.kernels[0]
    packages = root / manifest.PACKAGES
    assert k.include_dirs(root) == [made, packages / "demo-headers", packages / "no-such-package-here"]
    assert (packages / "demo-headers" / "pkg_api.h").read_text() == "#pragma once\n"
    problems = index["repos"]["gen"]["problems"]
    assert problems == ["the package no-such-package-here is not installed (make realworld-env)"]
    assert fetch.cmake_calls(BUILD_CMAKE, "make_code")[1] == ["make_code(rtc/k.cu\n          code_rtc_k_cu)"]


def rec(name, before, after, per_size=(), passed=True, bottleneck="memory", improved=True, memory_bound=None):
    return {"repo": "r", "kernel": name, "passed": passed, **({} if memory_bound is None else {"memory_bound": memory_bound}),
            "gpu": {"optimize": {
        "speedup": 2.0, "improved": improved, "share_before": before, "share_after": after, "bottleneck": bottleneck,
        "device": "NVIDIA H200", "per_size": [{"role": role, "sizes": {"n": n}, "speedup": sp, "copy_share": None}
                                              for role, n, sp in per_size]}}}


def test_the_speed_summary_gives_issue_29s_measures_from_given_answers():
    s = report.speed([
        rec("a", 0.5, 0.9), rec("b", 0.3, 0.65, [("decode", 1, 0.95), ("bench", 4096, 2.0)]),
        rec("c", 0.8, 0.85, [("decode", 1, 0.98)]), rec("d", 0.1, 0.2, passed=False),       # failed check: not counted
        rec("e", 0.2, 0.3, bottleneck="compute"),                                          # compute-bound: not counted
        rec("f", 0.55, 0.8, bottleneck="latency"),
        rec("h", 0.1, 0.1, memory_bound=False), rec("i", 0.2, 0.95, bottleneck="compute", memory_bound=True),  # the manifest's word
        rec("g", 0.4, 0.4, [("decode", 1, 0.5)], improved=False)])                          # kept the original
    assert s["memory_bound"] == 6 and s["devices"] == ["NVIDIA H200"]
    assert s["median_final_share"] == pytest.approx(0.825)        # of 0.4, 0.65, 0.8, 0.85, 0.9, 0.95
    assert s["start_below_60_end_below_70"] == ["r: b", "r: g"]
    assert s["slower_at_a_size"] == ["r: b at decode n=1 (0.95×)"]  # 0.98× is within 3%; g adopted nothing
    md = "\n".join(report.speed_markdown([rec("a", 0.5, 0.9), rec("b", 0.3, 0.65, [("decode", 1, 0.95)])]))
    assert "median final share of the copy ceiling 78%" in md and "r: b at decode n=1 (0.95×)" in md


def test_a_packed_cache_unpacks_where_the_cache_is_absent(mirror, tmp_path):
    m, mirrors, cache = mirror
    fetch.fetch(m, m.kernels[:1], mirrors, cache, log=lambda *_: None)
    packed = tmp_path / "cache.tar.xz"
    fetch.pack(cache, packed)
    elsewhere = tmp_path / "gpu" / cache.name
    elsewhere.parent.mkdir()
    assert fetch.unpack_if_needed(elsewhere, packed)
    assert fetch.status(elsewhere, m.kernels[0]) == "ok"


def test_the_spec_goes_directly_above_the_kernel_or_its_template_line():
    text = "int a;\ntemplate <class T>\n__global__ void k(T* x) {}\n"
    assert run.paste(text, 2, 1, "/* @astra */\n") == "int a;\n/* @astra */\ntemplate <class T>\n__global__ void k(T* x) {}\n"
    assert run.paste("} __global__ void k() {}\n", 1, 3, "/* c */") == "} \n/* c */\n__global__ void k() {}\n"


@pytest.mark.parametrize("record, expected", [
    ({"passed": True}, "passed"),
    ({"failure": {"stage": "fetch", "message": "not fetched: no mirror"}}, "not fetched"),
    ({"failure": {"stage": "list", "message": "k is not among the 0 kernels listed"}}, "listing"),
    ({"failure": {"stage": "spec-valid", "message": "parameter 'x': unknown type '?'"}}, "inference"),
    ({"failure": {"stage": "check", "check": "compile", "message": "does not compile"}, "nvcc": {"ok": True}},
     "compile"),
    ({"failure": {"stage": "check", "check": "compile", "message": "does not compile"}, "nvcc": {"ok": False}},
     "nvcc fails too"),
    # a header the repository does not hold at its pin (generated or downloaded by the build), and one it does
    ({"failure": {"stage": "check", "check": "compile", "message": "does not compile"},
      "nvcc": {"ok": False, "missing_header": "string_code_t.h", "outside_repository": True}}, "external header"),
    ({"failure": {"stage": "check", "check": "compile", "message": "does not compile"},
      "nvcc": {"ok": False, "missing_header": "ds_kernel_utils.h", "outside_repository": False}}, "nvcc fails too"),
    ({"failure": {"stage": "check", "check": "launch", "message": "the kernel crashed (SIGSEGV)"}}, "inference"),
    # template arguments the proposal chose that the file's own code refuses (one context, or nvcc's list)
    ({"failure": {"stage": "check", "check": "compile", "message": "error: static assertion failed (detected during:) "
                  "(instantiation of class \"cub::BlockLoad<T, BLOCK_DIM_X> [with BLOCK_DIM_X=1]\")"},
      "nvcc": {"ok": True}}, "inference"),
    ({"failure": {"stage": "check", "check": "compile", "message": "error: x (detected during instantiation of k<1>)"},
      "nvcc": {"ok": True}}, "inference"),
    # Astra's instantiation fails in a file nvcc refuses anyway (xformers sparse24 against another torch)
    ({"failure": {"stage": "check", "check": "compile", "message": "in Astra's instantiation of `k<float>` (the "
                  "spec's `instantiate`): cannot determine which instance of function template \"k\" is intended"},
      "nvcc": {"ok": False, "message": "identifier \"xf_getCurrentCUDAStream\" is undefined"}}, "nvcc fails too"),
    ({"failure": {"stage": "check", "check": "determinism", "message": "two runs differ"}}, "check failed"),
    ({"failure": {"stage": "check", "message": "`astra check` did not finish in 420 s", "timeout": True}},
     "timeout"),
])
def test_each_first_failure_gets_one_class(record, expected):
    assert classify.classify(record) == expected


def test_a_hand_confirmed_class_holds_only_while_the_failure_still_matches():
    rec = {"id": "r:k.cu:k", "failure": {"stage": "check", "check": "races", "message": "a race on out[3]"}}
    triage = [{"id": "r:k.cu:k", "match": "a race on", "class": "false refusal", "reason": "atomics"}]
    assert classify.classify(rec, triage) == "false refusal"
    rec["failure"]["message"] = "something else"
    assert classify.classify(rec, triage) == "check failed"


@needs_gxx
def test_one_kernel_through_every_cpu_stage_and_a_missing_one_reported(mirror, tmp_path):
    m, mirrors, cache = mirror
    fetch.fetch(m, m.kernels, mirrors, cache, log=lambda *_: None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    o = run.Options("cpu", "check", cache, scratch)
    r = run.run_kernel(m.kernels[0], o)
    assert (r.fetched, r.listed, r.spec_proposed, r.spec_valid, r.compiled) == (True,) * 5, r.failure
    assert r.passed and r.compiler.endswith(" + g++") and r.compiler.split()[0] in ("nvcc", "nvrtc")
    assert "@astra" in r.spec
    assert "@astra" not in (cache / m.repos["demo"].cache_name / "src/k.cu").read_text()  # the cache stays unedited
    gone = run.run_kernel(m.kernels[2], o)
    assert not gone.fetched and gone.failure["stage"] == "fetch"
    s = report.summary([json.loads(json.dumps(x.__dict__)) for x in (r, gone)])
    assert s["stages"]["passed"] == 1 and s["total"] == 2


def test_the_gpu_stages_read_the_profile_and_the_optimize_answers(monkeypatch, tmp_path):
    """No GPU here: the answers of `astra profile` and `astra optimize` (their --json shapes) are
    given, and what the runner records from them is checked."""
    answers = {
        "profile": {"passed": True, "profiles": [{"measured": True, "device": "NVIDIA H100", "errors": [], "sizes": [
            {"label": "n=128", "bytes_moved": 1, "candidate": {"median_us": 1.0, "gbps": 1.0, "ceiling_share": 0.01}},
            {"label": "n=4096", "bytes_moved": 9, "candidate": {"median_us": 9.0, "gbps": 900.0, "ceiling_share": 0.3}}]}]},
        "optimize": {"speedup": 1.8, "improved": True, "measured": True, "error": None, "seconds": 42.0,
                     "baseline": {"profile": {"sizes": [{"copy_share": 0.3}], "bottleneck": "memory"}},
                     "best": {"profile": {"device": "NVIDIA H100", "sizes": [
                         {"role": "decode", "sizes": {"n": 1}, "speedup": 0.96, "copy_share": 0.01},
                         {"role": "bench", "sizes": {"n": 4096}, "speedup": 1.8, "copy_share": 0.54}]}},
                     "rounds": [{"plan": {"idea": "vectorize", "skipped": ["transpose: no 2-D tile access"]},
                                 "outcome": "kept", "reason": "1.8x at the bench sizes"},
                                {"plan": {"idea": "coarsen"}, "outcome": "slower", "reason": "0.97x"}]},
    }
    monkeypatch.setattr(run, "astra", lambda args, limit, cwd: run.Step(True, answers[args[0]], seconds=1.0))
    m = manifest.load()
    r = run.Record.of(m.kernels[0])
    o = run.Options("gpu", "optimize", tmp_path, tmp_path)
    run._gpu(m.kernels[0], r, o, tmp_path, tmp_path / "k.cu", "k", [])
    assert r.gpu["profile"]["ceiling_share"] == 0.3 and r.gpu["profile"]["sizes"] == "n=4096"
    per_size = [{"role": "decode", "sizes": {"n": 1}, "speedup": 0.96, "copy_share": 0.01},
                {"role": "bench", "sizes": {"n": 4096}, "speedup": 1.8, "copy_share": 0.54}]
    assert r.gpu["optimize"] == {"speedup": 1.8, "improved": True, "measured": True, "error": None,
                                 "share_before": 0.3, "share_after": 0.54, "per_size": per_size,
                                 "bottleneck": "memory", "device": "NVIDIA H100",
                                 "rounds": 3, "tune": 2, "seconds": 42.0,
                                 "tried": [{"idea": "vectorize", "outcome": "kept", "reason": "1.8x at the bench sizes"},
                                           {"idea": "coarsen", "outcome": "slower", "reason": "0.97x"}],
                                 "passed_over": ["transpose: no 2-D tile access"]}
    table = report.markdown({"kernels": [json.loads(json.dumps(r.__dict__))], "backend": "gpu"})
    assert "| memory | 30% | 1.80× | 54% | decode n=1: 0.96× at 1%; bench n=4096: 1.80× at 54% |" in table
    assert "Speed on NVIDIA H100" in table
    monkeypatch.setattr(run, "astra", lambda args, limit, cwd: run.Step(False, None, "`astra optimize` did not finish "
                                                                        "in 420 s", timeout=True))
    run._gpu(m.kernels[0], r, o, tmp_path, tmp_path / "k.cu", "k", [])
    assert r.gpu["optimize"] == {"error": "`astra optimize` did not finish in 420 s"}
    # a run with a budget: the optimization gets what is left of it, so no round starts past it
    asked = []
    monkeypatch.setattr(run, "astra", lambda args, limit, cwd: asked.append(args) or run.Step(True, answers[args[0]]))
    o.deadline = run.time.monotonic() + 200
    run._gpu(m.kernels[0], r, o, tmp_path, tmp_path / "k.cu", "k", [])
    opt = asked[-1]
    assert opt[0] == "optimize" and 190 <= float(opt[opt.index("--time-budget") + 1]) <= 200


def test_an_optimize_result_with_no_error_is_a_result_and_the_clis_error_is_not():
    """An H200 run crashed on every kernel that reached `astra optimize`: its result's own
    `"error": null` was read as the CLI's error answer."""
    ok = run.answer({"speedup": 1.2, "error": None}, 0, 1.0)
    assert ok.ok and ok.out == {"speedup": 1.2, "error": None}
    said = run.answer({"speedup": 1.0, "error": "the original kernel does not pass the gate"}, 0, 1.0)
    assert said.ok and said.out["error"].startswith("the original")
    bad = run.answer({"error": {"message": "no such file", "diagnostics": [{"message": "k.cu: not found"}, "x"]}}, 2, 1.0)
    assert not bad.ok and bad.error == "k.cu: not found; x"


def test_a_mounted_librarys_include_folder_is_fetched_whole(tmp_path):
    # FlashInfer's vendored CCCL: its headers include one another through macros, and one missing
    # in the cache would be taken from the toolkit's older copy
    def bare(name: str, files: dict[str, str]) -> str:
        work = tmp_path / name
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        _git(work, "init", "-q")
        _git(work, "add", ".")
        _git(work, "commit", "-q", "-m", "x")
        _git(tmp_path, "clone", "-q", "--bare", str(work), str(tmp_path / "mirrors" / f"owner+{name}" / "repo"))
        return _git(work, "rev-parse", "HEAD")
    lib = bare("lib", {"include/cuda/cmath": "#pragma once\n#include _LIB_HEADER(detail)\n",
                       "include/cuda/detail": "#pragma once\n", "docs/readme.md": "not copied\n"})
    app = bare("app", {"k.cu": "#include <cuda/cmath>\n__global__ void k() {}\n"})
    (tmp_path / "manifest.toml").write_text(f"""
[repo.app]
project = "owner/app"
source = "owner/app"
commit = "{app}"
include = ["third/lib/include"]
flags_from = "a test"
[repo.app.mounts]
"third/lib" = "owner/lib@{lib}"
[[kernel]]
repo = "app"
path = "k.cu"
kernel = "k"
category = "elementwise"
memory_bound = true
""")
    m = manifest.load(tmp_path / "manifest.toml")
    fetch.fetch(m, m.kernels, tmp_path / "mirrors", tmp_path / "cache", log=lambda *_: None)
    root = tmp_path / "cache" / m.repos["app"].cache_name
    got = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert got == {"k.cu", "third/lib/include/cuda/cmath", "third/lib/include/cuda/detail"}


def test_shards_run_side_by_side_report_the_span_not_the_sum():
    side = [{"shard": "1/2", "started": 1000.0, "wall_s": 400.0, "kernels": []},
            {"shard": "2/2", "started": 1005.0, "wall_s": 460.0, "kernels": []}]
    assert report.merge(side)["wall_s"] == 465.0 and report.merge(side)["shard_wall_s"] == [400.0, 460.0]
    apart = [{k: v for k, v in p.items() if k != "started"} for p in side]   # older files: one call each
    assert report.merge(apart)["wall_s"] == 860.0


def test_a_waiting_profile_takes_the_gpu_before_a_waiting_optimization():
    import threading
    import time
    turns, order = run.Turns(), []
    holding = threading.Event()
    release = threading.Event()

    def first():
        with turns.turn(run.OPTIMIZE):
            holding.set()
            release.wait(5)

    def later(rank, name):
        with turns.turn(rank):
            order.append(name)
    t0 = threading.Thread(target=first)
    t0.start()
    holding.wait(5)
    opt = threading.Thread(target=later, args=(run.OPTIMIZE, "optimize"))
    opt.start()
    time.sleep(0.1)   # the optimization waits first
    prof = threading.Thread(target=later, args=(run.PROFILE, "profile"))
    prof.start()
    time.sleep(0.1)
    release.set()
    for t in (t0, opt, prof):
        t.join(5)
    assert order == ["profile", "optimize"]


def test_issue_24s_measure_counts_only_kernels_whose_file_nvcc_compiles():
    recs = [{"id": "a", "compiled": True, "nvcc": None},                     # Astra's nvcc compiled it
            {"id": "b", "compiled": False, "nvcc": {"ok": True}},            # nvcc compiles it, Astra did not
            {"id": "c", "compiled": False, "nvcc": {"ok": False, "outside_repository": True,   # a generated header
                                                    "made_by_build": "common/CMakeLists.txt"}},
            {"id": "d", "compiled": False, "nvcc": {"ok": False}},           # nvcc refuses the file
            {"id": "e", "compiled": False, "nvcc": None}]                    # stopped before its compile
    c = report.nvcc_compilable(recs)
    assert (c["compiled"], c["of"]) == (1, 2) and c["not_compiled"] == ["b"]
    assert (c["external"], c["build_step"], c["refused"], c["unmeasured"]) == (["c"], ["c"], ["d"], ["e"])
    assert "compiled by Astra where nvcc compiles the file: 1/2 (50%)" in report._compilable_line(c)


def test_a_header_the_build_files_name_needs_the_projects_build_step(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common/CMakeLists.txt").write_text(
        'function(make_string_header file_ NAME)\n  configure_file(h.in "string_headers/${NAME}.h" @ONLY)\nendfunction()\n'
        "make_string_header(rtc/transpose.cu string_code_rtc_transpose_cu)\n"
        'if(NOT EXISTS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend.h")\n  message(FATAL_ERROR "no cudnn_frontend.h")\n'
        "endif()\n")
    assert run._build_file_naming(tmp_path, "string_code_rtc_transpose_cu.h") == "common/CMakeLists.txt"
    assert run._build_file_naming(tmp_path, "cudnn_frontend.h") is None
