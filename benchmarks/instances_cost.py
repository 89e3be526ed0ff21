"""What reading a file's own kernel instances (compile.instances: the device preprocessor and cicc's
front end) and compiling it (compile.nvcc: a cubin) cost, first with an empty cache and then
repeated — wall seconds and the CPU seconds of the compiler processes (the fair measure on a shared
machine, where wall time follows the load).

    python benchmarks/instances_cost.py FILE KERNEL [-I DIR ...] [-D NAME[=VALUE] ...] [--std c++17]
        [--flag --use_fast_math ...] [--json out.json]

KERNEL is the template kernel's unqualified name. A header is read through the `.cu` beside it
that includes it, as inference reads it.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from astra_cuda.compile import instances, nvcc, project, toolkit  # noqa: E402


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(call) -> tuple[object, dict[str, float]]:
    t, c = time.perf_counter(), _children_cpu()
    out = call()
    return out, {"wall_s": round(time.perf_counter() - t, 2), "compiler_cpu_s": round(_children_cpu() - c, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("kernel")
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("-D", dest="define", action="append", default=[])
    ap.add_argument("--std")
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="astra-instances-cost-")   # an empty cache
    ctx = project.from_flags(a.include, a.define, a.std, flags=a.flag, origin="command line")
    tk = toolkit.find(ctx)
    if tk is None:
        print("no CUDA toolkit found", file=sys.stderr)
        return 2
    path = os.path.abspath(a.file)
    text = Path(path).read_text()
    out: dict[str, object] = {"file": path, "kernel": a.kernel, "nvcc": tk.version}
    for name, call in (("instances", lambda: instances.of(a.kernel, path, ctx, toolkit=tk)),
                       ("compile", lambda: nvcc.compile(text, path, ctx, toolkit=tk))):
        instances._ran.clear()
        found, first = _timed(call)
        instances._ran.clear()   # as a later process: only the disk cache
        _, again = _timed(call)
        out[name] = {"first": first, "repeated": again}
        if name == "instances":
            out["instances_found"] = len(found)   # type: ignore[arg-type]
        print(f"{name:9s} first {first['wall_s']:7.2f} s wall {first['compiler_cpu_s']:7.2f} s compiler CPU; "
              f"repeated {again['wall_s']:6.2f} s wall {again['compiler_cpu_s']:5.2f} s")
    print(f"instances found: {out['instances_found']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
