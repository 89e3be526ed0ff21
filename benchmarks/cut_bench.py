"""How many real kernels' CPU units compile: the unit Astra cuts for each kernel of unedited
public files, compiled by the CPU backend (g++ over the shim: screen and build) and by nvcc
(device code, `--ptx`), with the file itself compiled by nvcc beside it.

    .venv/bin/python benchmarks/cut_bench.py [--out results.json]
    PYTHONPATH=/path/to/other/checkout/server .venv/bin/python benchmarks/cut_bench.py   # another version

The files come from the mirrored repositories (/work/.mirror, `fetch`), unpacked into a cache
outside the repository; only this manifest and the numbers are kept here. Template kernels are
instantiated as Astra's inference proposes (their launch's template arguments); kernels it
cannot instantiate are counted apart.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIRROR = Path(os.environ.get("ASTRA_MIRROR", "/work/.mirror"))
CACHE = Path(os.environ.get("ASTRA_REALWORLD_CACHE", Path(tempfile.gettempdir()) / "astra-realworld"))

# repository -> (include folders as the project's build gives them, files)
MANIFEST = {
    "local-inference-lab+vllm": (["csrc"], [
        "csrc/activation_kernels.cu", "csrc/layernorm_kernels.cu", "csrc/layernorm_quant_kernels.cu",
        "csrc/cache_kernels.cu", "csrc/fused_qknorm_rope_kernel.cu", "csrc/moe/topk_softmax_kernels.cu",
        "csrc/pos_encoding_kernels.cu", "csrc/sampler.cu"]),
    "microsoft+DeepSpeed": (["csrc/includes", "csrc/transformer/inference/includes"], [
        "csrc/transformer/inference/csrc/gelu.cu", "csrc/transformer/inference/csrc/layer_norm.cu",
        "csrc/transformer/inference/csrc/rms_norm.cu", "csrc/transformer/inference/csrc/softmax.cu",
        "csrc/transformer/inference/csrc/relu.cu", "csrc/transformer/inference/csrc/apply_rotary_pos_emb.cu"]),
    "NVIDIA+apex": (["csrc"], [
        "csrc/layer_norm_cuda_kernel.cu", "csrc/multi_tensor_scale_kernel.cu", "csrc/multi_tensor_adam.cu",
        "csrc/multi_tensor_l2norm_kernel.cu", "csrc/update_scale_hysteresis.cu"]),
    "bitsandbytes-foundation+bitsandbytes": (["csrc"], ["csrc/kernels.cu"]),
    "NVIDIA+cuda-samples": (["Common"], [
        "Samples/0_Introduction/vectorAdd/vectorAdd.cu", "Samples/0_Introduction/matrixMul/matrixMul.cu",
        "Samples/2_Concepts_and_Techniques/reduction/reduction_kernel.cu",
        "Samples/6_Performance/transpose/transpose.cu", "Samples/0_Introduction/simpleAtomicIntrinsics/simpleAtomicIntrinsics_kernel.cuh",
        "Samples/2_Concepts_and_Techniques/histogram/histogram256.cu",
        "Samples/2_Concepts_and_Techniques/scan/scan.cu"]),
    "flashinfer-ai+flashinfer": (["include"], [
        "csrc/norm.cu", "csrc/activation.cu", "csrc/sampling.cu", "csrc/page.cu", "csrc/rope.cu"]),
}


def unpack(repo: str, paths: list[str], includes: list[str]) -> Path:
    """The repository's tree at its stored HEAD, under the cache (headers included)."""
    dest = CACHE / repo
    if (dest / ".complete").exists():
        return dest
    git = MIRROR / repo / "repo"
    dest.mkdir(parents=True, exist_ok=True)
    # the listed files' folders and the include folders (a snapshot lacks files of 4 MiB and more)
    tops = {"csrc" if p.startswith("csrc/") else os.path.dirname(p) for p in paths} | set(includes)
    if any(p.startswith("csrc/") for p in paths):
        tops.add("include")  # FlashInfer's csrc includes include/
    listed = subprocess.run(["git", f"--git-dir={git}", "ls-tree", "-r", "--name-only", "HEAD", "--", *sorted(tops)],
                            capture_output=True, text=True).stdout.split()
    for name in listed:   # sources only, one by one (a snapshot lacks some large files)
        if not name.endswith((".h", ".cuh", ".cu", ".hpp", ".cpp", ".inl", ".c", ".hh")):
            continue
        blob = subprocess.run(["git", f"--git-dir={git}", "show", f"HEAD:{name}"], capture_output=True)
        if blob.returncode == 0:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(blob.stdout)
    (dest / ".git").mkdir(exist_ok=True)   # a workspace root, as a clone would have
    (dest / ".complete").write_text("")
    return dest


def nvcc_ptx(text: str, path: str, options: list[str], extra: list[str]) -> tuple[bool, str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False, "no nvcc"
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "unit.cu"
        cu.write_text(f'#line 1 "{path}"\n{text}')
        r = subprocess.run([nvcc, "--ptx", "-arch=sm_90", f"-I{os.path.dirname(path)}", *options, *extra,
                            "-o", str(Path(tmp) / "o.ptx"), str(cu)], capture_output=True, text=True, timeout=300)
        errors = [ln for ln in (r.stdout + r.stderr).splitlines() if "error" in ln]
        return r.returncode == 0, (errors[0] if errors else (r.stderr.strip().splitlines() or [""])[-1])[:240]


def probe(expr: str) -> str:
    return (f"\ntemplate <class T, T F> __device__ int __astra_bench_probe = 0; "
            f"template __device__ int __astra_bench_probe<decltype(&{expr}), &{expr}>;\n")


def _instantiation(infer, kernel, model, path: str, ctx) -> str | None:
    """The `instantiate` of the spec Astra's inference proposes for a template kernel."""
    import tomllib
    try:
        comment = infer.infer(kernel, model, path=path, context=ctx).comment
        body = comment.split("@astra", 1)[1].rsplit("*/", 1)[0]
        return tomllib.loads(body).get("instantiate")
    except Exception:  # an inference that fails leaves the kernel uninstantiated: counted apart
        return None


def main() -> int:
    from astra_cuda.compile import extract
    from astra_cuda import infer
    from astra_cuda.model import source
    from astra_cuda.compile import project as proj
    from astra_cuda.backends.base import CompileError, Unsupported
    from astra_cuda.backends.cpu import unit_build
    from astra_cuda.errors import AstraError

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--limit", type=int, default=0, help="kernels at most (0: all)")
    ap.add_argument("--instantiations-from", default="", help="a results JSON whose instantiations to reuse "
                    "(so that two versions compile the same kernels)")
    args = ap.parse_args()
    known = {f"{r['repo']}|{r['file']}|{r['kernel']}": r.get("instantiate") for r in
             json.loads(Path(args.instantiations_from).read_text())["rows"]} if args.instantiations_from else {}
    rows = []
    whole_ok: dict[str, bool] = {}
    for repo, (includes, files) in MANIFEST.items():
        if not (MIRROR / repo / "repo").exists():
            print(f"{repo}: not mirrored here", file=sys.stderr)
            continue
        root = unpack(repo, files, includes)
        ctx = proj.from_flags([str(root / d) for d in includes], origin="bench", base=str(root))
        for rel in files:
            f = root / rel
            if not f.is_file():
                continue
            text = f.read_text(errors="replace")
            model = source.parse(text)
            for k in model.kernels:
                if args.limit and len(rows) >= args.limit:
                    break
                row = {"repo": repo, "file": rel, "kernel": k.qualified_name}
                inst = known.get(f"{repo}|{rel}|{k.qualified_name}") if known else \
                    (_instantiation(infer, k, model, str(f), ctx) if k.is_template else None)
                row["instantiate"] = inst
                if k.is_template and not inst:
                    row["status"] = "no instantiation"
                    rows.append(row)
                    continue
                t0 = time.perf_counter()
                try:
                    u = extract.unit(text, str(f), k.name, instantiate=inst, context=ctx)
                except AstraError as e:
                    row.update(status="cut refused", why=e.message[:240])
                    rows.append(row)
                    continue
                row["cut_s"] = round(time.perf_counter() - t0, 3)
                expr = u.name_expression
                key = str(f) + "|" + expr
                if key not in whole_ok:
                    whole_ok[key], why = nvcc_ptx(text + probe(expr), str(f), ctx.options(), [])
                    row["file_why"] = why if not whole_ok[key] else ""
                row["file_nvcc"] = whole_ok[key]
                row["cut_nvcc"], why = nvcc_ptx(u.source + probe(expr), str(f), ctx.options(), [])  # as the CPU sees it: host headers out
                if not row["cut_nvcc"]:
                    row["cut_nvcc_why"] = why
                t0 = time.perf_counter()
                try:
                    unit_build.compile_module(u.source, [expr], str(f), u.options(), "")
                    row["cut_gxx"] = "ok"
                except Unsupported as e:
                    row["cut_gxx"], row["cut_gxx_why"] = "needs a GPU", str(e)[:240]
                except CompileError as e:
                    row["cut_gxx"], row["cut_gxx_why"] = "error", str(e)[:240]
                row["gxx_s"] = round(time.perf_counter() - t0, 2)
                try:
                    from astra_cuda.compile import cutcheck
                    c = cutcheck.check(u)
                    row["check"] = "ok" if c.ok and c.checked else ("not checked" if not c.checked else "changed")
                    if row["check"] != "ok":
                        row["check_why"] = c.message[:240]
                except ImportError:
                    pass
                row["status"] = "measured"
                rows.append(row)
                print(json.dumps(row), flush=True)
    measured = [r for r in rows if r["status"] == "measured"]
    nv = [r for r in measured if r.get("file_nvcc")]
    summary = {
        "kernels": len(rows), "measured": len(measured),
        "not instantiated": sum(r["status"] == "no instantiation" for r in rows),
        "cut refused": sum(r["status"] == "cut refused" for r in rows),
        "cut compiles with g++ (CPU backend)": sum(r["cut_gxx"] == "ok" for r in measured),
        "CPU backend: needs a GPU": sum(r["cut_gxx"] == "needs a GPU" for r in measured),
        "cut compiles with nvcc": sum(r["cut_nvcc"] for r in measured),
        "files nvcc compiles: kernels": len(nv),
        "  of which the cut compiles with nvcc": sum(r["cut_nvcc"] for r in nv),
        "  of which the cut compiles with g++": sum(r["cut_gxx"] == "ok" for r in nv),
        "cut check ok": sum(r.get("check") == "ok" for r in measured),
        "cut check: changed": sum(r.get("check") == "changed" for r in measured),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
