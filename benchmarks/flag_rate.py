"""How often is a correct candidate's timing flagged implausible, and by which rule? The corpus'
div/mod embedding, coarsened to 4 vector steps a thread, evaluated as `astra optimize` does
(quick gate, then side-by-side timing) PROBE_N times at B = 32 and B = 128; the JSON to $OUT.

    PYTHONPATH=server python benchmarks/flag_rate.py     # on the GPU machine (PROBE_BACKEND=cpu: a dry run)
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
import corpus_bench as cb  # noqa: E402
import corpus as corpus_mod  # noqa: E402
from astra_cuda.model import source, spec as spec_mod  # noqa: E402
from astra_cuda.agents.offline import TRANSFORMS, context_from_text  # noqa: E402

K = "encoder_forward_kernel2"
out_dir = os.environ.get("OUT", ".")
res = []
for B in (32, 128)[:int(os.environ.get("PROBE_B", "2"))]:
    cb.BENCH[K]["B"] = [B]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        entries = [e for e in cb.manifest(ROOT / "benchmarks" / "corpus") if e.kernel == K]
        corpus_mod.with_inferred_specs(ROOT / "benchmarks" / "corpus", root, entries)
        path = root / entries[0].file
        text, _ = cb.prepared(path, K, "gather")
        path.write_text(text)
        m = source.parse(text)
        sp = spec_mod.load(m.kernel(K), m)
        rw = TRANSFORMS["coarsen"].apply(text, context_from_text(K, text, sp), {"width": 16, "steps": 4, "block": None})
        ev = cb.evaluator(str(path), K, sp, os.environ.get("PROBE_BACKEND", "gpu"), text, True)
        for i in range(int(os.environ.get("PROBE_N", "7"))):
            t0 = time.time()
            e = ev(rw.text)
            row = {"B": B, "i": i, "passed": e.passed, "summary": e.check.summary, "feedback": e.check.feedback[:600],
                   "speedup": e.speedup if e.measured else None, "s": round(time.time() - t0, 1)}
            res.append(row)
            print(json.dumps(row), flush=True)
json.dump(res, open(os.path.join(out_dir, "flag_rate.json"), "w"), indent=1)
print("flagged:", sum(1 for r in res if not r["passed"]), "of", len(res))
