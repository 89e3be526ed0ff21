"""Hand-written specs for suite kernels that inference cannot yet give, each in a part of the spec
format grown for them (issue 25, item 6), checked on the unedited public file: the comment pasted
above the kernel in a scratch copy of the cached repository (hard links; the edited file is a new
file), then `astra check` with the manifest's flags — exactly a user's path with a spec they wrote.

    python benchmarks/realworld/hand_specs.py [--backend cpu|gpu] [--only PATTERN] [--out FILE]

What each spec exercises: DeepSpeed's ragged descriptors as pointers to records (`records`), a
parameter (logits_gather) and fields of a struct passed by value (ragged_embed, BatchWrapperCPP);
FlashInfer's page append, a struct's field that is an object its constructor builds (`construct`).
The specs are written here from the launchers' code (sizes, the descriptors' meaning)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realworld import fetch  # noqa: E402
from realworld.manifest import load  # noqa: E402
from realworld.run import LIMITS, _find, astra, paste  # noqa: E402

HAND = {
    "logits_gather_cuda.cu:logits_gather_kernel": """/* @astra
grid = ["cdiv(embed_dim, 2048)", "n_seqs"]
block = [512]
instantiate = "<float>"
require = ["embed_dim % 4 == 0"]
[sizes]
n_seqs = [1, 7, 64]
tokens = [64, 300]
embed_dim = [128, 1000, 4096]
[bench]
n_seqs = [4096]
embed_dim = [8192]
[args]
final_token_acts = { type = "float", shape = ["n_seqs", "embed_dim"], output = true }
token_acts = { type = "float", shape = ["tokens", "embed_dim"] }
ragged_batch = { records = 1, n_sequences = "n_seqs", n_tokens = "tokens" }
inflight_batch = { records = "n_seqs", start_idx = { init = "randint(0, tokens)" }, n_tokens = 1 }
embed_dim = "embed_dim"
*/""",
    "embed_cuda.cu:ragged_embed_kernel": """/* @astra
grid = ["cdiv(embed_dim, 2048)", "tokens"]
block = [512]
instantiate = "<int32_t, float>"
require = ["embed_dim % 4 == 0"]
[sizes]
tokens = [1, 7, 300]
seqs = [1, 5]
vocab = [100, 1000]
positions = [512]
embed_dim = [128, 1000, 4096]
[bench]
tokens = [8192]
vocab = [32000]
embed_dim = [4096]
[args]
embedded_tokens = { type = "float", shape = ["tokens", "embed_dim"], output = true }
input_ids = { type = "int32", shape = ["tokens"], init = "randint(0, vocab)" }
embedding_weight = { type = "float", shape = ["vocab", "embed_dim"] }
position_weight = { type = "float", shape = ["positions + 1", "embed_dim"] }
batch_desc.batch_metadata = { records = 1, n_tokens = "tokens", n_sequences = "seqs" }
batch_desc.seq_metadata = { records = "seqs", start_idx = { init = "randint(0, tokens)" }, seen_tokens = { init = "randint(0, positions)" } }
batch_desc.tokens_to_seq = { type = "int32", shape = ["tokens"], init = "randint(0, seqs)" }
embed_dim = "embed_dim"
vocab_size = "vocab"
max_position_embed_idx = "positions"
position_embed_offset = 0
*/""",
    # FlashInfer's page append: `paged_kv.page_size` is a `uint_fastdiv` its launcher builds from the
    # page size (`paged_kv_t(..., page_size, ...)` initialises the member with it): an object a
    # constructor builds (`construct`). One request of `pages` pages (indptr = [0, pages]) in the NHD
    # layout the launcher's contiguous constructor sets up; each appended token a distinct slot.
    "page.cuh:flashinfer::AppendPagedKVCacheKernel": """/* @astra
grid = [4]
block = [16, "heads"]
instantiate = "<64, 4, float, int32_t>"
require = ["nnz <= pages * page_size"]
[sizes]
heads = [1, 4]
page_size = [1, 5, 16]
pages = [3, 8]
nnz = [1, 3, 24]
[bench]
heads = [32]
page_size = [16]
pages = [4096]
nnz = [32768]
[args]
paged_kv.page_size = { construct = "flashinfer::uint_fastdiv(page_size)" }
paged_kv.num_heads = "heads"
paged_kv.head_dim = 64
paged_kv.batch_size = 1
paged_kv.stride_page = "page_size * heads * 64"
paged_kv.stride_n = "heads * 64"
paged_kv.stride_h = 64
paged_kv.v_stride_page = "page_size * heads * 64"
paged_kv.v_stride_n = "heads * 64"
paged_kv.v_stride_h = 64
paged_kv.k_data = { type = "float", shape = ["pages", "page_size", "heads", 64], inout = true }
paged_kv.v_data = { type = "float", shape = ["pages", "page_size", "heads", 64], inout = true }
paged_kv.indices = { type = "int32", shape = ["pages"], init = "permutation" }
paged_kv.indptr = { type = "int32", shape = [2], init = "offsets(pages)" }
append_key = { type = "float", shape = ["nnz", "heads", 64] }
append_value = { type = "float", shape = ["nnz", "heads", 64] }
batch_indices = { type = "int32", shape = ["nnz"], init = "zeros" }
positions = { type = "int32", shape = ["nnz"], init = "permutation(pages * page_size)" }
nnz = "nnz"
append_k_stride_n = "heads * 64"
append_k_stride_h = 64
append_v_stride_n = "heads * 64"
append_v_stride_h = 64
*/""",
}


def check(k, spec: str, backend: str, cache: Path, scratch: Path) -> dict:
    work = scratch / re.sub(r"[^A-Za-z0-9_.-]+", "_", k.id)[:150]
    shutil.copytree(cache / k.repo.cache_name, work, copy_function=os.link)
    f = work / k.path
    listing = astra(["kernels", str(f)], LIMITS["kernels"], work)
    info = _find(listing.out or {}, k.kernel)
    if info is None:
        return {"id": k.id, "passed": False, "failure": listing.error or "kernel not listed"}
    line, col = info["range"]["start"]
    text = paste(f.read_text(errors="surrogateescape"), line, col, spec)
    f.unlink()   # a hard link to the cache: write a new file instead
    f.write_text(text, errors="surrogateescape")
    s = astra(["check", str(f), "--kernel", info["qualified_name"], "--backend", backend, *k.astra_flags(work)],
              LIMITS["check"], work)
    out = s.out or {}
    return {"id": k.id, "passed": bool(s.ok and out.get("passed")), "seconds": round(s.seconds, 1),
            "failure": None if s.ok and out.get("passed") else (s.error or json.dumps(out)[:600])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--only", help="kernels whose id contains this")
    ap.add_argument("--cache", default=str(fetch.CACHE))
    ap.add_argument("--out", help="results JSON")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    fetch.unpack_if_needed(cache)
    kernels = [(k, spec) for pattern, spec in HAND.items() for k in load().select(pattern)
               if not a.only or a.only in k.id]
    results = []
    with tempfile.TemporaryDirectory(prefix="astra-hand-") as scratch:
        for k, spec in kernels:
            r = check(k, spec, a.backend, cache, Path(scratch))
            results.append(r)
            print(f"{'PASS' if r['passed'] else 'FAIL'}  {r['id']}" + (f"  {r['failure']}" if r["failure"] else ""))
    print(f"{sum(r['passed'] for r in results)} of {len(results)} hand-written specs pass on the {a.backend}")
    if a.out:
        Path(a.out).write_text(json.dumps({"backend": a.backend, "kernels": results}, indent=1) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
