"""Jobs the GPU tests run inside worker processes (never in the test process)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from astra_cuda.backends.base import Launch, LaunchError, Scalar
from astra_cuda.execution.jobs import CheckJob
from astra_cuda.execution.worker import Job

_backend = None


@dataclass(frozen=True)
class Call(Job[Any]):
    """One of this module's functions on a payload, as a worker job (the function travels by reference)."""

    func: Callable[[Any], Any]
    payload: Any = None

    def run(self) -> Any:
        return self.func(self.payload)


def backend():
    global _backend
    if _backend is None:
        from astra_cuda.backends.gpu import GpuBackend
        _backend = GpuBackend()
    return _backend


def pid(_=None):
    return os.getpid()


HANG = """
__global__ void hang(int* flag) {
  while (atomicAdd(flag, 0) == 0) { }
}
"""

ILLEGAL = """
__global__ void wild_store(float* p, long long offset) {
  p[offset + threadIdx.x] = 1.0f;
}
"""

ROUNDTRIP = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T>
__global__ void axpy(T* y, const T* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = T(a * float(x[i]) + float(y[i]));
}
"""


def hang(payload):
    b = backend()
    mod = b.compile(HANG, ["hang"])
    flag = b.upload(np.zeros(1, np.int32))
    b.launch(mod, "hang", Launch((1, 1, 1), (32, 1, 1)), [flag], timeout_s=payload["launch_timeout"])
    return "finished?!"


def illegal(_):
    b = backend()
    mod = b.compile(ILLEGAL, ["wild_store"])
    buf = b.upload(np.ones(4, np.float32))
    try:
        b.launch(mod, "wild_store", Launch((1, 1, 1), (32, 1, 1)), [buf, Scalar("long long", 1 << 38, "int64")])
    except LaunchError as e:
        return {"error": str(e), "poisoned": b.poisoned is not None, "pid": os.getpid()}
    return {"error": None, "pid": os.getpid()}


def roundtrip(_):
    """Upload/poison/launch/download for each floating type, templates through name expressions."""
    import ml_dtypes
    b = backend()
    names = ["axpy<__half>", "axpy<__nv_bfloat16>", "axpy<float>"]
    mod = b.compile(ROUNDTRIP, names)
    out = {}
    for name, dt in zip(names, [np.float16, ml_dtypes.bfloat16, np.float32]):
        n = 1000
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n).astype(np.float32).astype(dt)
        y = rng.standard_normal(n).astype(np.float32).astype(dt)
        bx, by = b.upload(x), b.upload(y)
        poisoned = b.upload(np.zeros(n, dt))
        b.fill_bytes(poisoned, 0xFF)
        p = b.download(poisoned)
        b.launch(mod, name, Launch((4, 1, 1), (256, 1, 1)), [by, bx, Scalar("float", 2.0, "float32"),
                                                             Scalar("int", n, "int32")])
        got = b.download(by).astype(np.float64)
        want = (2.0 * x.astype(np.float32) + y.astype(np.float32)).astype(dt).astype(np.float64)
        out[name] = {"max_err": float(np.max(np.abs(got - want))), "dtype": str(b.download(by).dtype),
                     "poison_nan": bool(np.all(np.isnan(p.astype(np.float32)))),
                     "x_unchanged": bool(np.array_equal(b.download(bx).view(np.uint8), x.view(np.uint8))),
                     "regs": b.resources(mod, name).registers}
    return out


def big_shared(_):
    """Dynamic shared memory above 48 KiB needs the opt-in attribute."""
    src = """
    __global__ void smem_sum(float* out, const float* in) {
      extern __shared__ float tile[];
      const int n = 96 * 1024 / 4;
      for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];
      __syncthreads();
      if (threadIdx.x == 0) { float s = 0; for (int i = 0; i < n; ++i) s += tile[i]; out[0] = s; }
    }
    """
    b = backend()
    mod = b.compile(src, ["smem_sum"])
    x = np.ones(96 * 1024 // 4, np.float32)
    out = b.upload(np.zeros(1, np.float32))
    b.launch(mod, "smem_sum", Launch((1, 1, 1), (256, 1, 1), 96 * 1024), [out, b.upload(x)])
    return float(b.download(out)[0])


def ceiling(_):
    b = backend()
    return {"cached": b.copy_ceiling(), "fresh": b.measure_copy_ceiling(), "device": b.props["name"],
            "l2": b.props["l2_bytes"]}


def profile_twice(payload):
    """The same kernel profiled twice in one process."""
    from astra_cuda import profiler
    b = backend()
    a = profiler.profile(None, payload["unit"], payload["spec"], b)
    c = profiler.profile(None, payload["unit"], payload["spec"], b)
    return a, c


def ncu_profile(payload):
    from astra_cuda import profiler
    from astra_cuda.backends.gpu import GpuBackend
    return profiler.run_ncu(payload["unit"], payload["spec"], payload["sizes"], GpuBackend)


OFF_BY_ONE = """
__global__ void shift(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i + 1];   // reads one element past the end
}
"""


def off_by_one(payload):
    """Under compute-sanitizer (sanitizer_pool): a one-element overread of an exact-size buffer."""
    b = backend()
    mod = b.compile(OFF_BY_ONE, ["shift"], sanitize=True)
    n = payload["n"]
    out, inp = b.upload(np.zeros(n, np.float32)), b.upload(np.arange(n, dtype=np.float32))
    try:
        b.launch(mod, "shift", Launch(((n + 127) // 128, 1, 1), (128, 1, 1)),
                 [out, inp, Scalar("int", n, "int32")])
    except LaunchError as e:
        return {"error": str(e), "sanitizer": b.sanitizer, "exact": b.exact_alloc}
    return {"error": None, "sanitizer": b.sanitizer, "exact": b.exact_alloc}


def sanitize_refused(_):
    from astra_cuda.backends.base import Unsupported
    try:
        backend().compile(OFF_BY_ONE, ["shift"], sanitize=True)
    except Unsupported as e:
        return str(e)
    return None


def hostile_includes(files):
    """Compile each (name, path, text) with the GPU backend (CuPy's NVRTC, confined): what it said."""
    from astra_cuda.compile import extract
    from astra_cuda.backends.base import CompileError
    from astra_cuda.compile.devicepp import PreprocessError
    out = {}
    for name, path, text in files:
        try:   # the device pass's preprocessor meets a hostile #include first (and refuses it)
            unit = extract.unit(text, path, "k")
        except PreprocessError as e:
            out[name] = {"ok": False, "said": str(e)}
            continue
        try:
            backend().compile(unit.source, [unit.name_expression], filename=unit.path, options=unit.options())
            out[name] = {"ok": True, "said": unit.source + "\n".join(unit.notes)}
        except CompileError as e:
            out[name] = {"ok": False, "said": unit.source + str(e) + (e.log or "")}
    return out


def launches(payload):
    """Compile `source` and run each (name, block, args) once in one block: the arrays after each."""
    b = backend()
    mod = b.compile(payload["source"], [name for name, _, _ in payload["launches"]])
    out = {}
    for name, block, args in payload["launches"]:
        bufs = [b.upload(a) if isinstance(a, np.ndarray) else a for a in args]
        b.launch(mod, name, Launch((1, 1, 1), (block, 1, 1)), bufs)
        out[name] = [b.download(x) for a, x in zip(args, bufs) if isinstance(a, np.ndarray)]
    return out


def gather_records(be, unit, spec, sizes):
    """Below the gate: the layouts the module's probe gives each pointer to records, then two
    launches (each poison) of a records-gathering kernel compared with the gather on the host —
    says whether the layout or the launch misplaces the records."""
    from astra_cuda.gate import checks, suite
    kern = checks.Compiled(be.compile_unit(unit), unit.name_expression, "candidate")
    ctypes = checks.arg_types(spec, be, kern, unit.param_types)
    layouts = {k: (v.size, {f: (x.offset, x.size) for f, x in v.fields.items()})
               for k, v in ctypes.items() if hasattr(v, "fields")}
    host = suite.inputs(spec, sizes, "spec", 1)
    n = sizes["seqs"]
    rows = (suite.record_values(spec.args["seqs_.start_idx"], n, sizes)
            + suite.record_values(spec.args["seqs_.n_tokens"], n, sizes) - 1).astype(np.int64)
    want = host["acts"][rows]
    outs = [checks.run_case(spec, be, kern, sizes, host, ctypes, p).after["out"] for p in checks.POISONS]
    return {"layouts": layouts, "compiler": getattr(kern.module, "compiler", ""),
            "match": [bool(np.array_equal(o, want)) for o in outs]}


def records_gather(payload):
    return gather_records(backend(), payload["unit"], payload["spec"], payload["sizes"])


@dataclass(frozen=True)
class PidCheck(CheckJob):
    """A CheckJob that also says which process ran its launches (its owner is the CheckJob's)."""

    def run(self):  # type: ignore[override]
        return os.getpid(), super().run()


def device_draws(cases):
    """gate/device_case.py on the device: for each (dtype, init, distribution), moments of CuPy's
    draw and of the host's, and whether the digest and the poison check on the device agree with
    NumPy's on the same bytes."""
    import dataclasses as dc

    from astra_cuda.backends import device_digest
    from astra_cuda.gate import device_case, suite as suites
    from astra_cuda.model import dtypes
    from astra_cuda.model.harness import parse_init
    from astra_cuda.model.spec import ArgSpec
    b = backend()
    out = []
    for dtype, kind, dist, proto in cases:
        a: ArgSpec = dc.replace(proto, dtype=dtypes.lookup(dtype), init=parse_init(kind))
        arr = device_case.device_sample(b.cp, b.generator(7), a, (1 << 20,), dist)
        if arr is None:
            out.append(None)
            continue
        dev = b.adopt(arr, a.dtype.np, (1 << 20,))
        got = b.download(dev)
        host = suites.sample(a, (1 << 20,), np.random.Generator(np.random.PCG64(7)), dist)
        key = (123, 456)
        same_digest = b.digest(dev, key) == device_digest.digest(np, got, key)
        same_poison = all(b.holds_byte(dev, p) == device_digest.holds_pattern(np, got, got.dtype.itemsize, p)
                          for p in (0xFF, 0xA5))
        stats = [(float(x.astype(np.float64).mean()), float(x.astype(np.float64).std()),
                  float(x.astype(np.float64).min()), float(x.astype(np.float64).max()), float((x == 0).mean()))
                 for x in (got, host)]
        out.append((stats, same_digest, same_poison, str(got.dtype)))
    return out


def device_case_check(payload):
    """`gate.check` on the GPU with every case of the main suite drawn, run and judged on the device
    (gate/device_case.py, its size threshold lowered in this worker only): (status, first failing
    check, its message)."""
    from astra_cuda import gate
    from astra_cuda.gate import device_case
    ref, cand, spec = payload
    before, device_case.DEVICE_MIN_ELEMENTS = device_case.DEVICE_MIN_ELEMENTS, 1
    try:
        v = gate.check(ref, cand, spec, backend(), quick=True)
    finally:
        device_case.DEVICE_MIN_ELEMENTS = before
    first = v.failures[0] if v.failures else None
    return v.status, first.check if first else "", first.message if first else "", \
        any("on the device" in n for n in v.coverage.notes)


# ---- the reference's module loaded afresh for each launch (tests/gpu/test_reference_module_afresh_gpu.py) ----

TABLE_REF = """
__device__ int table[4] = {3, 3, 3, 3};
__device__ int zeroed[4];   // no initialiser: zero at every load (.bss), as C++ static storage is
__global__ void lookup(int* y) { y[threadIdx.x] = table[threadIdx.x] + zeroed[threadIdx.x]; }
"""
# wrong (1 everywhere), and it writes 1 into the two arrays at the addresses it is given: the
# reference module's `table` and `zeroed` (here handed over, as a scan of the context would find them)
TABLE_REWRITE = """
__global__ void rewrite(int* y, unsigned long long a, unsigned long long b) {
  if (a) ((int*)a)[threadIdx.x] = 1;
  if (b) ((int*)b)[threadIdx.x] = 1;
  y[threadIdx.x] = 1;
}
"""


def _table_address(b, ref) -> tuple[int, int]:
    """The reference's `table` and `zeroed` in the module its last launch ran: its compiled module
    (on main), else its last fresh load."""
    loaded = getattr(b, "_loaded", None)
    if loaded is None:
        return int(ref.raw.get_global("table").ptr), int(ref.raw.get_global("zeroed").ptr)
    return int(loaded.raw.module.get_global_var("table")), int(loaded.raw.module.get_global_var("zeroed"))


def reference_module_afresh(_=None):
    """The attack on the backend: reference and candidate launched in turn in one context, the
    candidate writing the reference's table wherever it lies; what the reference read each time,
    what a fresh load costs, and the device memory 500 reference launches leave."""
    import time
    b = backend()
    ref = b.compile(TABLE_REF, ["lookup"], role="reference")
    cand = b.compile(TABLE_REWRITE, ["rewrite"], role="candidate")
    y = b.upload(np.zeros(4, np.int32))
    one = Launch((1, 1, 1), (4, 1, 1))
    seen = []
    for _ in range(20):
        b.launch(ref, "lookup", one, [y])
        seen.append(b.download(y).tolist())
        a, last = _table_address(b, ref)
        b.launch(cand, "rewrite", one, [y, Scalar("unsigned long long", a, "uint64"),
                                        Scalar("unsigned long long", last, "uint64")])
    from astra_cuda.backends.base import TimedLaunch
    b.time(ref, "lookup", one, [TimedLaunch([y]) for _ in range(5)], flush_l2=False)
    timed = b.download(y).tolist()
    free0 = b.cp.cuda.runtime.memGetInfo()[0]
    t = time.perf_counter()
    for _ in range(500):
        b.launch(ref, "lookup", one, [y])
    per_launch_ms = (time.perf_counter() - t) * 1000 / 500
    free1 = b.cp.cuda.runtime.memGetInfo()[0]
    t = time.perf_counter()
    for _ in range(500):
        b.launch(cand, "rewrite", one, [y, Scalar("unsigned long long", 0, "uint64"),
                                        Scalar("unsigned long long", 0, "uint64")])
    candidate_ms = (time.perf_counter() - t) * 1000 / 500
    return {"seen": seen, "timed": timed, "reference_launch_ms": per_launch_ms, "candidate_launch_ms": candidate_ms,
            "freed_bytes_lost": int(free0 - free1)}


# The whole gate, checked twice in one worker: a wrong rewrite (y = x) that writes 1 into the
# reference's `gain` through an address kept in its own `__device__` variable (set by the job to
# where the reference's compiled module holds `gain`, as a scan would find it).
# Above the spec (a spec comment belongs to the kernel right below it): the reference's `gain`, by address
GAIN_TARGET = "__device__ unsigned long long target;\n\n"
GAIN_BY_ADDRESS = """__global__ void scale_fast(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0 && target) *(float*)target = 1.0f;
  if (i < n) y[i] = x[i];
}
"""


def gate_with_reference_table_rewritten(payload):
    """`payload`: the file's units and spec (tests.security.reference_files.units)."""
    from astra_cuda import gate
    from astra_cuda.gate.building import Building
    Building.cut_check = lambda self: True   # this worker's only: the cut check is another entry's
    b = backend()
    ref_u, cand_u, spec = payload["ref"], payload["cand"], payload["spec"]
    ref = b.compile_unit(ref_u, role="reference")
    cand = b.compile_unit(cand_u, role="candidate")
    addr = np.array([int(ref.raw.get_global("gain").ptr)], np.uint64)
    cand.raw.get_global("target").copy_from_host(addr.ctypes.data, 8)
    out = []
    for _ in range(2):
        v = gate.check(ref_u, cand_u, spec, b, quick=True)
        out.append({"status": v.status, "checks": sorted({f.check for f in v.failures}), "human": v.human()})
    return out
