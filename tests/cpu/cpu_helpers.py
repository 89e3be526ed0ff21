"""Helpers shared by the CPU backend tests (a uniquely named module: several test folders
have a conftest.py, and `from conftest import ...` would pick whichever was imported first)."""
import numpy as np

from astra_cuda.backends.base import Launch, Scalar


def i32(v):
    return Scalar("int", int(v), "int32")


def f32(v):
    return Scalar("float", float(v), "float32")


def unit(src: str) -> str:
    """The source as an extracted unit of "user.cu", whose line 1 is the first non-blank line."""
    return '#line 1 "user.cu"\n' + src.lstrip("\n")


def run(be, src, name, grid, block, args, *, shmem=0, schedule=None, sanitize=False, races=False, timeout=30.0):
    """Compile `src` (line 1 of "user.cu" is its first line), launch it once and return the
    downloaded buffers (None for scalars)."""
    m = be.compile(unit(src), [name], filename="user.cu", sanitize=sanitize, races=races)
    bufs = [be.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    be.launch(m, name, Launch(grid, block, shmem), bufs, schedule=schedule, timeout_s=timeout)
    return [None if isinstance(b, Scalar) else be.download(b) for b in bufs]
