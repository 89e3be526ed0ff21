"""What an offline search found, remembered per kernel content, sizes and GPU model in
`.astra/tuning/`, so that a rerun (or a batch meeting the same kernel) starts from it.

One file per kernel content and size ladder; inside, one entry per GPU model: the chain of
transformations with the parameters the tuning stage settled on (empty when nothing beat the
original), the speedup it had, the run that found it. A rerun replays the chain on the file as it
is now and sends the result through the same gate and timing as any candidate: a remembered
entry is a starting point, never a verdict, so a stale, edited or hostile file costs one
evaluation, not a wrong result. Timings differ between GPU models, so an entry is used only on
its own model; an entry of another model is named in the result, never used silently.

The key is the kernel's own text and its spec comment (what the transformations read); a helper
it calls is not in the key: a changed helper is caught by re-verifying, not by the key.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1
MAX_BYTES = 256 * 1024      # a tuning file is a few hundred bytes; anything larger is not ours
MAX_STEPS = 32


@dataclass(frozen=True)
class Remembered:
    gpu: str                        # the GPU model that timed it
    chain: list[tuple[str, dict[str, Any]]]   # [(idea, params)] from the original to the best ([]: nothing helped)
    speedup: float                  # geomean over the bench sizes, then
    run_id: str
    saved: float                    # epoch seconds

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved))
        what = " → ".join(idea for idea, _ in self.chain) or "no rewrite beat the original"
        return f"{what} ({self.speedup:.3f}× on {self.gpu}, run {self.run_id}, {when})"


@dataclass(frozen=True)
class Memory:
    """Where one kernel's tuning is kept, and the GPU model this run times on."""

    folder: Path
    kernel: str
    content: str                    # the kernel's text and spec comment
    sizes: list[dict[str, int]]               # the sizes candidates are timed at (the ladder, or the bench sizes)
    gpu: str
    fresh: bool = False             # search anyway (the result is kept all the same)

    @property
    def file(self) -> Path:
        digest = hashlib.sha256(json.dumps([self.content, self.sizes], sort_keys=True).encode()).hexdigest()
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in self.kernel)[:64]
        return self.folder / f"{name}-{digest[:16]}.json"

    def _read(self) -> tuple[dict[str, Any], str]:
        """(the file's entries by GPU model, a problem reading it)."""
        p = self.file
        try:
            if p.is_symlink() or not p.is_file():
                return {}, ""
            if p.stat().st_size > MAX_BYTES:
                return {}, f"{p.name} is larger than {MAX_BYTES} bytes: ignored"
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return {}, f"{p.name} could not be read ({type(e).__name__}): ignored"
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("gpus"), dict):
            return {}, f"{p.name} is not a tuning file of this Astra: ignored"
        return data["gpus"], ""

    def recall(self) -> tuple[Remembered | None, str]:
        """The entry for this GPU model, else None with a note: another model's entries (not used),
        or a file that could not be read."""
        gpus, problem = self._read()
        if problem:
            return None, f"the remembered tuning {problem}"
        if self.fresh:
            return None, "--fresh: remembered tuning not used; what this search finds is remembered" \
                if gpus else ""
        entry = _entry(gpus.get(self.gpu), self.gpu)
        if entry is not None:
            return entry, ""
        if self.gpu in gpus:
            return None, (f"the tuning remembered for {self.gpu} in {self.file.name} names steps this Astra "
                          f"cannot replay: ignored")
        others = sorted(g for g in gpus if isinstance(g, str) and g != self.gpu)
        if others:
            return None, (f"tuning remembered for {', '.join(others)} is not reused on {self.gpu} "
                          f"(another GPU model times differently): searching afresh")
        return None, ""

    def keep(self, chain: list[tuple[str, dict[str, Any]]], speedup: float, run_id: str) -> None:
        """Remember this run's result for this GPU model (other models' entries stay)."""
        from .. import workspace
        gpus, _ = self._read()
        gpus = {g: e for g, e in gpus.items() if _entry(e, g) is not None}
        gpus[self.gpu] = {"chain": [[idea, dict(params)] for idea, params in chain], "speedup": speedup,
                          "run_id": run_id, "saved": time.time()}
        data = {"format": FORMAT, "kernel": self.kernel, "sizes": self.sizes, "gpus": gpus}
        workspace.write_own(self.file, json.dumps(data, indent=1, sort_keys=True))


def _entry(e: object, gpu: str) -> Remembered | None:
    """A stored entry, checked for shape (the file may have been edited, or committed by anyone)."""
    from .offline import TRANSFORMS
    if not isinstance(e, dict):
        return None
    chain, speedup = e.get("chain"), e.get("speedup")
    if not isinstance(chain, list) or len(chain) > MAX_STEPS or not isinstance(speedup, (int, float)):
        return None
    steps: list[tuple[str, dict[str, Any]]] = []
    for step in chain:
        if not (isinstance(step, list) and len(step) == 2 and step[0] in TRANSFORMS and isinstance(step[1], dict)
                and all(isinstance(k, str) and (v is None or isinstance(v, (int, float, str, bool)))
                        for k, v in step[1].items())):
            return None
        steps.append((step[0], dict(step[1])))
    saved = e.get("saved")
    return Remembered(gpu, steps, float(speedup), str(e.get("run_id", ""))[:100],
                      float(saved) if isinstance(saved, (int, float)) else 0.0)
