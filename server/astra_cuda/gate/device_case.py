"""A large case of the main suite drawn, run and judged where the buffers live (a backend with
`caps.device_arrays`: the GPU), so a timed size's ~10^8 elements never cross PCIe.

Before: each such case was drawn on the host, uploaded twice (reference, candidate), and every
buffer was downloaded after each run to be compared on the host. Here:
- its random inputs are drawn on the device by the backend's generator, seeded per case and
  argument, with the host draw's distributions and dtype conversions (`device_sample`); an
  input the device cannot draw (permutations, offsets, 8-bit floats, ...) is drawn on the host
  and uploaded once. The drawn (pristine) buffers are copied on the device for each run, into buffers with a guard
  after each (as uploads have: `backends/guard.py`), checked after every launch;
- before any kernel runs, a keyed digest (`backends/device_digest.py`) of each pristine input is
  taken and held on the host, with a key drawn here and never given to a kernel; the reference's
  outputs get one after its run, before the candidate's launch;
- after the candidate's launch: its read-only inputs must have the pristine digests (inputs
  unchanged), the reference's outputs their digests (a candidate that writes them through kept or
  guessed pointers fails: it writes memory not its own), and each written output must pass the
  gate's rule on the device (`Backend.within_tolerance`, never True where the host rule fails).
Anything else — a digest that differs, an output the device rule does not pass (or cannot tell:
a constant output) — is judged by the host's full rule on downloaded copies (`Judging.judge`:
messages, indices, rounding allowance), the pristine inputs first checked against their digests.
A reference output holding poison goes the host's whole way (`Judging.expected`)."""
from __future__ import annotations

import dataclasses
import secrets
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends.base import Backend, Buffer, LaunchError
from ..model.spec import ArgSpec, Spec
from . import suite as suites
from .checks import LAUNCH_TIMEOUT_S, POISONS, launch_args, launch_of, overran, written
from .state import Arrays, ReferenceFailed
from .verdict import CaseInfo

if TYPE_CHECKING:
    from .judging import Judging

DEVICE_MIN_ELEMENTS = suites.PARALLEL_MIN   # cases this large (all arguments) are drawn and judged on the device
DEVICE_KINDS = ("normal", "uniform", "randint")
DEVICE_FLOATS = ("float16", "bfloat16", "float32", "float64")


def eligible(g: "Judging", case: suites.Case) -> bool:
    """Cases of the main suite judged on the device: large ones, against a reference (with none,
    two runs of the candidate are compared on the host), whose reference is not itself on trial."""
    return (g.caps.device_arrays and g.ref is not None and not g.verify_reference
            and g.spec.elements(case.sizes) >= DEVICE_MIN_ELEMENTS)


def device_sample(xp: Any, rng: Any, arg: ArgSpec, shape: tuple[int, ...], distribution: str) -> Any | None:
    """`suite.sample` on the device (`arg.init` already at the case's sizes): the same
    distributions, ranges and conversions, in `xp`'s storage types (bfloat16 as its uint16 bits,
    rounded to nearest even as the host's cast rounds). None where the host must draw it."""
    dt, init = arg.dtype.np, arg.init
    if init.kind not in DEVICE_KINDS or not (dt.name in DEVICE_FLOATS or dt.kind in "iu"):
        return None
    if arg.dtype.is_float != (dt.name in DEVICE_FLOATS) or (dt.kind in "iu" and dt.itemsize > 4):
        return None   # 64-bit integers: the host's clip to their whole range, exactly
    ft = np.float64 if dt.itemsize > 4 else suites.F32
    if distribution in suites.DISTRIBUTIONS and arg.dtype.is_float and init.kind == "normal" and not init.params:
        vals = suites.DISTRIBUTIONS[distribution](rng, shape, ft)
    elif init.kind == "normal":
        mean, std = init.params if init.params else (0.0, 1.0)
        vals = suites.draw_normal(rng, shape, ft) * ft(std) + ft(mean)
        if not arg.dtype.is_float:
            vals = xp.rint(vals * (8.0 if not init.params else 1.0))
            if dt.kind == "u":
                vals = xp.abs(vals)
    elif init.kind == "uniform":
        lo, hi = init.params
        vals = suites.draw_uniform(rng, lo, hi, shape, ft)
        if not arg.dtype.is_float:
            vals = xp.floor(vals)
    else:   # randint: [lo, hi)
        lo, hi = (int(p) for p in init.params)
        vals = rng.integers(lo, max(hi, lo + 1), shape)
    if dt.name == "bfloat16":
        bits = vals.astype(np.float32).view(np.uint32)
        return ((bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)
    if arg.dtype.is_float:
        return vals.astype(ft).astype(dt)
    info = np.iinfo(dt)
    return xp.clip(vals, int(info.min), int(info.max)).astype(dt)


def arg_seed(seed: int, name: str) -> int:
    """Each argument's own stream, from the case's seed."""
    return zlib.crc32(f"{seed}|{name}".encode())


def draw(backend: Backend, spec: Spec, sizes: dict[str, int], distribution: str, seed: int) -> dict[str, Buffer]:
    """The pristine device buffers of a case's read inputs (inputs and in-place arguments)."""
    xp = backend.array_module()
    out: dict[str, Buffer] = {}
    for a in spec.args.values():
        if not a.pointer or a.output:
            continue
        a = dataclasses.replace(a, init=a.init.at(sizes))
        shape = spec.shape(a.name, sizes)
        try:
            arr = device_sample(xp, backend.generator(arg_seed(seed, a.name)), a, shape, distribution)
        except (AttributeError, TypeError, NotImplementedError):   # a generator without the method: the host's
            arr = None
        if arr is not None:
            out[a.name] = backend.adopt(arr, a.dtype.np, shape)
            continue
        rng = np.random.Generator(np.random.PCG64(arg_seed(seed, a.name)))
        large = int(np.prod(shape)) >= suites.PARALLEL_MIN and a.init.kind in DEVICE_KINDS
        out[a.name] = backend.upload((suites.sample_large if large else suites.sample)(a, shape, rng, distribution))
    return out


def _buffers(spec: Spec, backend: Backend, sizes: dict[str, int], pristine: dict[str, Buffer],
             poison: int) -> dict[str, Buffer]:
    """One run's buffers: each read input a device copy of its pristine buffer, each output
    poisoned — nothing through the host; each with a guard after it where the backend places
    them (`Backend.guarded`, as its uploads have), checked after the launch (`_launch`)."""
    out: dict[str, Buffer] = {}
    for a in spec.args.values():
        if not a.pointer:
            continue
        shape = spec.shape(a.name, sizes)
        buf = backend.guarded(a.dtype.np, shape)
        if a.output:
            backend.fill_bytes(buf, poison)
        else:
            backend.copy(buf, pristine[a.name])
        out[a.name] = buf
    return out


def _launch(spec: Spec, backend: Backend, kernel: Any, sizes: dict[str, int], bufs: dict[str, Buffer],
            ctypes: dict[str, Any]) -> None:
    backend.launch(kernel.module, kernel.name, launch_of(spec, sizes), launch_args(spec, bufs, sizes, ctypes),
                   timeout_s=LAUNCH_TIMEOUT_S)
    overran(backend, bufs)   # a write past a buffer's end: a LaunchError naming it, as for uploads


def run(g: "Judging", case: suites.Case, info: CaseInfo, poison: int) -> Arrays | None:
    """Case `case` of the main suite on the device, judged (None), or the host inputs when the
    host must judge it the usual way (a reference output holding poison: `Judging.expected`
    decides). A LaunchError is the candidate's; the reference's raises ReferenceFailed."""
    be, sizes = g.backend, case.sizes
    key = (secrets.randbits(64), secrets.randbits(64))   # held here only: no kernel sees it
    pristine = draw(be, g.spec, sizes, case.distribution, case.seed)
    digests = {n: be.digest(b, key) for n, b in pristine.items()}
    outs = written(g.rspec)
    # The reference's outputs, every element written: an element holding the poison's bytes may be
    # a real value (16-bit floats meet 0xA5A5 often); a run over the other poison that holds none of
    # its bytes anywhere wrote everything. Else the host decides (`Judging.reference_writes_everything`).
    for p in (poison, POISONS[1] if poison == POISONS[0] else POISONS[0], None):
        if p is None:
            host = _host_inputs(g, pristine, digests, key, info)
            if host is None:
                raise ReferenceFailed(f"the reference kernel wrote outside its buffers on {info.describe()}: the "
                                      f"case's pristine inputs changed while it ran")
            return host
        ref = _buffers(g.rspec, be, sizes, pristine, p)
        try:
            _launch(g.rspec, be, g.reference, sizes, ref, g.ctypes)
        except LaunchError as e:
            raise ReferenceFailed(f"the reference kernel failed on {info.describe()}: {e}") from None
        if not any(g.rspec.args[n].output and be.holds_byte(ref[n], p) for n in outs):
            break
    ref_digests = {n: be.digest(ref[n], key) for n in outs}
    cand = _buffers(g.spec, be, sizes, pristine, poison)
    _launch(g.spec, be, g.candidate, sizes, cand, g.ctypes)
    if any(be.digest(ref[n], key) != d for n, d in ref_digests.items()):
        g.fail("compare", "the reference's outputs of this case changed while the candidate ran: it writes memory "
                          "that is not its own (through a kept or guessed pointer); nothing it computed can be trusted",
               info)
        return None
    reads = [a.name for a in g.spec.args.values() if a.pointer and not a.written]
    unchanged = all(be.digest(cand[n], key) == digests[n] for n in reads)
    if unchanged and all(be.within_tolerance(cand[n], ref[n], *g.tol(n)) is True for n in written(g.spec)):
        if reads:   # what `Judging.judge` counts for a launch that passes
            g.count("inputs_unchanged")
        for n in written(g.spec):
            g.count("compare")
            if g.spec.args[n].output:
                g.count("poison")
                g.count("not_constant")
        return None
    host = _host_inputs(g, pristine, digests, key, info)
    if host is None:
        return None
    expected = {n: be.download(ref[n]) for n in outs}
    after = {n: be.download(b) for n, b in cand.items()}
    g.judge("compare", info, host, after, expected, poison)
    return None


def _host_inputs(g: "Judging", pristine: dict[str, Buffer], digests: dict[str, int], key: tuple[int, int],
                 info: CaseInfo) -> Arrays | None:
    """The pristine inputs on the host, after their digests say no launch wrote them (None, and the
    candidate failed, when one did)."""
    be = g.backend
    if any(be.digest(b, key) != digests[n] for n, b in pristine.items()):
        g.fail("compare", "the case's pristine inputs changed while the kernels ran: the candidate writes memory "
                          "that is not its own (through a kept or guessed pointer)", info)
        return None
    return {n: be.download(b) for n, b in pristine.items()}
