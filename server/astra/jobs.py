"""The work that runs inside a worker process (`astra.worker`): compile, check, profile.

Each job takes a picklable payload and returns a picklable result. Backends are created once per
worker process and reused, so compiled modules and the GPU context stay warm between jobs; a job
that crashes the process takes only the worker with it.
"""
from __future__ import annotations

import shutil

_backends: dict[str, object] = {}


def backend(name: str, arch: str = "sm_90"):
    if name not in _backends:
        if name == "gpu":
            from .backends.gpu import GpuBackend
            _backends[name] = GpuBackend()
        elif name == "cpu":
            from .backends.cpu import CpuBackend
            _backends[name] = CpuBackend()
        else:
            raise ValueError(f"unknown backend {name!r}")
    return _backends[name]


def backends_job(payload: dict) -> dict:
    """Which backends can run here, and why not."""
    out = {}
    try:
        from .backends.gpu import GpuBackend
        ok, why = GpuBackend.probe()
        out["gpu"] = {"available": ok, "reason": why}
    except Exception as e:  # noqa: BLE001 - any import/driver problem means "no GPU here"
        out["gpu"] = {"available": False, "reason": f"CuPy/GPU unavailable ({e.__class__.__name__}: {e})"}
    cxx = shutil.which("g++") or shutil.which("clang++")
    out["cpu"] = {"available": bool(cxx), "reason": "" if cxx else "no C++ compiler (g++ or clang++) on PATH"}
    return out


def static_job(payload: dict) -> list[dict]:
    from . import static
    results = []
    for unit in payload["units"]:
        r = static.compile_unit(unit, arch=payload.get("arch", "sm_90"))
        results.append({"kernel": unit.kernel, "ok": r.ok, "diagnostics": r.diagnostics,
                        "resources": r.resources, "seconds": r.seconds})
    return results


def check_job(payload: dict):
    from . import gate
    b = backend(payload["backend"], payload.get("arch", "sm_90"))
    return gate.check(payload["reference"], payload["candidate"], payload["spec"], b,
                      quick=payload.get("quick", False), reference_spec=payload.get("reference_spec"))


def profile_job(payload: dict):
    from . import profiler
    # 'static' runs no kernel: the profiler then reports resources only.
    b = backend(payload["backend"], payload.get("arch", "sm_90")) if payload["backend"] in ("gpu", "cpu") else None
    return profiler.profile(payload["reference"], payload["candidate"], payload["spec"], b,
                            ncu=payload.get("ncu", False), arch=payload.get("arch", "sm_90"),
                            reference_spec=payload.get("reference_spec"))


_evaluators: dict[tuple, object] = {}


def _evaluator(payload: dict):
    """evaluate(file_text) for one kernel: the gate against the reference, then the profiler."""
    from .agents.evaluators import local_evaluator
    return local_evaluator(payload["path"], payload["kernel"], payload["spec"],
                           backend(payload["backend"], payload.get("arch", "sm_90")), payload["reference_text"],
                           quick=payload.get("quick", False), arch=payload.get("arch", "sm_90"),
                           reference_kernel=payload["reference_kernel"], context=payload.get("context"))


def evaluate_job(payload: dict):
    """Gate (then profile) one candidate file text for the orchestrator. The evaluator — with
    its reference — is kept per worker, so later rounds reuse its compiled modules."""
    key = (payload["backend"], payload["path"], payload["kernel"], payload["reference_kernel"],
           hash(payload["reference_text"]), payload.get("quick", False), payload.get("context"))
    if key not in _evaluators:
        _evaluators.clear()  # one kernel at a time per worker keeps memory bounded
        _evaluators[key] = _evaluator(payload)
    return _evaluators[key](payload["text"])


def gpu_facts_job(payload: dict) -> str:
    """One line of facts about the GPU for the planning agent."""
    info = backend("gpu").device_info()
    return ", ".join(f"{k}: {v}" for k, v in info.items())
