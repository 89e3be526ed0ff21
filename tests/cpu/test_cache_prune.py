"""The module cache is shared by every Astra process on the machine: pruning must tolerate files
that vanish under it and must never take a module another process may be loading or building."""
import os
import time

from astra_cuda.backends.cpu import toolchain, unit_build


def _make(d, name, age_s):
    p = d / name
    p.write_bytes(b"x")
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def test_prune_keeps_recent_and_in_flight_and_survives_vanished_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "MAX_MODULES", 8)
    d = toolchain.cache_dir()
    old = [_make(d, f"mod-old{i}.so", 3600 + i) for i in range(8)]
    recent = [_make(d, f"mod-new{i}.so", 5) for i in range(4)]
    in_flight = _make(d, "mod-new0.so.abc123.tmp", 3600)   # another process's build
    stale_tmp = _make(d, "mod-gone.so.zzz.tmp", 2 * 86400)  # left by a killed process
    (d / "mod-vanished.so").symlink_to(d / "does-not-exist")  # stat() fails as if pruned meanwhile

    toolchain.prune_cache()

    assert all(p.exists() for p in recent), "recently used modules may be loading elsewhere"
    assert in_flight.exists() and not stale_tmp.exists()
    left = sorted(p.name for p in d.glob("mod-old*.so"))
    # 13 candidates > 8: shrink to 6, oldest first, but only from those not used lately
    assert left == sorted(p.name for p in old[:2]), left


def test_prune_does_nothing_under_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "MAX_MODULES", 8)
    d = toolchain.cache_dir()
    mods = [_make(d, f"mod-{i}.so", 86400 * 3) for i in range(8)]
    toolchain.prune_cache()
    assert all(p.exists() for p in mods)


def test_a_cached_module_pruned_away_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    src = '__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }'
    first = unit_build.compile_module(src, ["k"], "k.cu", [], "")
    first.unlink()  # as another process's prune would
    again = unit_build.compile_module(src, ["k"], "k.cu", [], "")
    assert again == first and again.exists()
    assert not list(toolchain.cache_dir().glob("*.tmp"))


def test_precompiled_shims_are_kept_to_their_quota(tmp_path, monkeypatch):
    """A day of several checkouts left 312 precompiled-shim sets (20 GB): over MAX_PCH_BYTES the
    least recently used go, never one used in the last minutes nor the running version's."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "MAX_PCH_BYTES", 4 << 20)
    d = toolchain.cache_dir()
    current = toolchain.runtime_digest()

    def pch(name, age_s):
        p = d / name
        p.mkdir()
        with open(p / "astra_cuda_shim.h.gch", "wb") as f:
            f.truncate(1 << 20)  # sparse: no disk used
        t = time.time() - age_s
        os.utime(p, (t, t))
        return p
    old = [pch(f"pch-old{i}-x", 7200 + 60 * i) for i in range(6)]  # old[5] the least recently used
    mine = pch(f"pch-{current}-x", 9000)
    recent = pch("pch-recent-x", 5)
    toolchain.prune_cache()
    left = {p.name for p in d.glob("pch-*")}
    assert mine.name in left and recent.name in left
    assert left == {mine.name, recent.name, old[0].name}, left  # 8 MiB -> at most 3 MiB
