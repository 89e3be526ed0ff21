"""Materialise the suite's repositories from local mirrors into a git-ignored cache.

    python benchmarks/realworld/fetch.py [--only PATTERN] [--mirrors DIR] [--cache DIR]

A mirror is a bare git directory, `<mirrors>/<owner>+<name>/repo` (the `fetch` tool's layout;
default /work/.mirror or $ASTRA_MIRRORS). Only what the suite reads is written: each kernel's
file, every project header it reaches through `#include` (read with tree-sitter, every branch of
every `#if`, resolved like the project's build: the including file's folder, then its -I
folders), the source files beside it (where a user's workspace keeps its launchers), the
manifest's `launch_files` and the build files Astra reads for the project's flags (`CMakeLists.txt`,
`setup.py`, from the kernel's folder up: astra_cuda.compile.buildfiles). A kernel whose cache entry was
filled for other inputs (include folders, files, mounts) is "not fetched" until fetched again. That keeps the cache small enough to travel to the GPU machine as one
`carry` path. Files are written read-only; each repository's tree gets an empty `.git` so Astra
takes it as the workspace root. A missing mirror, commit or file is recorded per kernel in
`<cache>/fetch.json` ("not fetched: ...") and never stops the rest.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realworld.manifest import GENERATED, PACKAGES, Kernel, Manifest, Repo, load, package_include  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
PACKED = HERE / "cache.tar.xz"    # the cache packed for the GPU machine (git-ignored, carried)
SOURCE_EXT = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl", ".inc", ".ipp", ".tcc", ".def")
MAX_FILE = 4 << 20       # a generated 4 MB table is not a header the suite needs
# The build files Astra reads for a project's flags (astra_cuda.compile.buildfiles), from the kernel's
# folder up to the repository's root.
BUILD_FILES = ("CMakeLists.txt", "setup.py")
# Bumped when what a kernel's fetch copies changes: a cache filled before is refetched.
FETCH_VERSION = 4


def mirror_dir(mirrors: Path, source: str) -> Path:
    return mirrors / source.replace("/", "+") / "repo"


def _git(git_dir: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=text, timeout=300)


@dataclass
class Tree:
    """One pinned repository (with its mounted submodules): path -> (git dir, blob id, size)."""
    files: dict[str, tuple[Path, str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)   # mounts that could not be read

    def read(self, paths: list[str]) -> dict[str, bytes]:
        """The contents of `paths` (those whose blobs the mirror has)."""
        out: dict[str, bytes] = {}
        by_dir: dict[Path, list[str]] = {}
        for p in paths:
            by_dir.setdefault(self.files[p][0], []).append(p)
        for git_dir, ps in by_dir.items():
            ids = "".join(self.files[p][1] + "\n" for p in ps).encode()
            r = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch"], input=ids,
                               capture_output=True, timeout=600)
            data, pos = r.stdout, 0
            for p in ps:
                nl = data.index(b"\n", pos)
                head = data[pos:nl].split()
                pos = nl + 1
                if len(head) < 3 or head[1] == b"missing":
                    continue
                n = int(head[2])
                out[p] = data[pos:pos + n]
                pos += n + 1
        return out


def _ls_tree(git_dir: Path, commit: str, prefix: str, tree: Tree) -> str | None:
    if not git_dir.is_dir():
        return f"no mirror at {git_dir}"
    if _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return f"commit {commit[:12]} is not in the mirror {git_dir}"
    r = _git(git_dir, "ls-tree", "-r", "-l", commit)
    if r.returncode != 0:
        return f"git ls-tree failed: {r.stderr.strip()[:200]}"
    for line in r.stdout.splitlines():
        meta, _, path = line.partition("\t")
        mode, typ, sha, size = meta.split()
        if typ == "blob" and _wanted(path) and size != "-" and int(size) <= MAX_FILE:
            tree.files[posixpath.join(prefix, path) if prefix else path] = (git_dir, sha, int(size))
    return None


def _wanted(path: str) -> bool:
    """A source file, a build file, or a header without an extension (libcu++'s <cuda/cmath>,
    reached only through an #include)."""
    name = posixpath.basename(path)
    return path.endswith(SOURCE_EXT) or name in BUILD_FILES or "." not in name


def open_tree(repo: Repo, mirrors: Path) -> tuple[Tree | None, str | None]:
    tree = Tree()
    why = _ls_tree(mirror_dir(mirrors, repo.source), repo.commit, "", tree)
    if why:
        return None, why
    for m in repo.mounts:
        why = _ls_tree(mirror_dir(mirrors, m.source), m.commit, m.path, tree)
        if why:
            tree.problems.append(f"{m.path} ({m.source}@{m.commit[:12]}): {why}")
    return tree, None


def includes_of(text: bytes) -> list[tuple[str, bool]]:
    """(path, quoted) of every `#include` in the text, in every preprocessor branch."""
    from astra_cuda.model import source, syntax
    tree = source.parser().parse(text)
    out = []
    for node in syntax.of_type(tree.root_node, ("preproc_include",)):
        path = node.child_by_field_name("path")
        if path is None:
            continue
        t = syntax.text(path).strip()
        if path.type == "string_literal" and len(t) >= 2:
            out.append((t[1:-1], True))
        elif path.type == "system_lib_string" and len(t) >= 2:
            out.append((t[1:-1], False))
    # An #include after a macro tree-sitter cannot read as a statement (libcu++'s
    # `_CCCL_BEGIN_NAMESPACE_CUDA_PTX` then `#include <cuda/__ptx/instructions/generated/…>`) is an
    # ERROR `#include` followed by the path read as something else.
    for node in syntax.of_type(tree.root_node, ("ERROR",)):
        nxt = node.next_sibling
        if syntax.text(node).strip() != "#include" or nxt is None:
            continue
        t = syntax.text(nxt).strip()
        if len(t) >= 2 and (t[0], t[-1]) in (("<", ">"), ('"', '"')) and "\n" not in t:
            out.append((t[1:-1], t[0] == '"'))
    return out


def resolve(inc: str, quoted: bool, including: str, include_dirs: tuple[str, ...], tree: Tree) -> list[str]:
    """Every file the include may name: the folders are the union of several kernels' -I lists, so
    the first hit is not necessarily the one a given kernel reads (DeepSpeed has two ds_kernel_utils.h)."""
    dirs = ([posixpath.dirname(including)] if quoted else []) + list(include_dirs)
    hits = (posixpath.normpath(posixpath.join(d, inc)) for d in dirs)
    return list(dict.fromkeys(p for p in hits if not p.startswith("../") and p in tree.files))


def needed_files(kernels: list[Kernel], tree: Tree, outside: set[str] | None = None) -> set[str]:
    """Every file the suite reads for these kernels (see the module's docstring); headers are
    resolved with the union of their -I folders (an over-approximation costs a few files).
    `outside` receives the #includes no file of the repository (with its mounts) can be: the
    toolkit's, a framework's, and the headers its build generates or downloads."""
    names = {posixpath.basename(p) for p in tree.files}
    dirs = tuple(dict.fromkeys(d for k in kernels for d in k.includes))
    todo: list[str] = []
    for k in kernels:
        todo += [p for p in (k.path, *k.launch_files) if p in tree.files]
        folder = posixpath.dirname(k.path)
        todo += [p for p in tree.files if posixpath.dirname(p) == folder and p.endswith(SOURCE_EXT)]
    # An include folder of a mounted library (FlashInfer's vendored CCCL) is copied whole: its
    # headers include one another through macros a reading cannot follow, and a header missing
    # there would be taken from the toolkit's older copy instead (a mix that does not compile).
    mounts = {m.path for k in kernels for m in k.repo.mounts}
    for d in dirs:
        if any(d == m or d.startswith(m + "/") for m in mounts):
            todo += [p for p in tree.files if p.startswith(d + "/")]
    seen: set[str] = set()
    while todo:
        batch = [p for p in dict.fromkeys(todo) if p not in seen]
        seen.update(batch)
        texts = tree.read(batch)
        todo = []
        for p in batch:
            for inc, quoted in includes_of(texts.get(p, b"")):
                hits = resolve(inc, quoted, p, dirs, tree)
                todo += [q for q in hits if q not in seen]
                if not hits and outside is not None and posixpath.basename(inc) not in names:
                    outside.add(inc)
    for k in kernels:
        d = posixpath.dirname(k.path)
        while True:
            seen.update(f for f in (posixpath.join(d, b) if d else b for b in BUILD_FILES) if f in tree.files)
            if not d:
                break
            d = posixpath.dirname(d)
    return seen


def cmake_calls(text: str, name: str) -> tuple[str, list[str]]:
    """The definition of the CMake function `name` (`function(name …)` … `endfunction()`) and
    every call of it, each as written, out of a CMake file's text (comments left out: a call
    commented out is not run)."""
    code, i, quote = [], 0, False
    while i < len(text):   # the text without its comments (`# …` and `#[[ … ]]` outside strings)
        c = text[i]
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            quote = not quote
        elif c == "#" and not quote:
            end = text.find("]]", i) + 2 if text.startswith("#[[", i) else text.find("\n", i)
            i = len(text) if end < 2 or end == -1 else end
            continue
        code.append(c)
        i += 1
    plain = "".join(code)
    commands = []   # (the name in lower case, the whole command, the name as written)
    for m in re.finditer(r"(?m)^[ \t]*([A-Za-z_]\w*)[ \t]*\(", plain):
        depth, j, q = 0, m.end() - 1, False
        while j < len(plain):
            ch = plain[j]
            if ch == '"' and plain[j - 1] != "\\":
                q = not q
            elif not q and ch == "(":
                depth += 1
            elif not q and ch == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        commands.append((m.group(1).lower(), plain[m.start():j + 1].strip(), m.group(1)))
    definition, calls, inside = [], [], False
    for low, whole, spelled in commands:
        if low == "function" and re.match(rf"function\s*\(\s*{re.escape(name)}[\s)]", whole, re.I):
            inside = True
        if inside:
            definition.append(whole)
            inside = low != "endfunction"
        elif spelled == name:
            calls.append(whole)
    return "\n".join(definition), calls


def cmake_program() -> str | None:
    """CMake: the environment's own first (pyproject's [realworld] installs one beside this Python)."""
    import shutil
    return shutil.which("cmake", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def generate(repo: Repo, mirrors: Path, root: Path) -> str | None:
    """Run the project's build step that writes headers (`repo.generate`) into `root`/GENERATED:
    CMake, in script mode, runs the project's own function on every call the project's CMake
    file makes of it, over the pinned checkout of that file's folder (its sources and the
    templates they are configured into, as a user's clone holds them). None when done (or done
    before), else why not."""
    import io
    import shutil
    import tarfile
    import tempfile
    g = repo.generate
    out = root / GENERATED
    if g is None or out.is_dir():
        return None
    cmake = cmake_program()
    if cmake is None:
        return "no cmake to run the project's build step (make realworld-env installs it)"
    folder = posixpath.dirname(g.cmake)
    with tempfile.TemporaryDirectory(prefix="astra-rw-generate-") as tmp:
        r = _git(mirror_dir(mirrors, repo.source), "archive", repo.commit, folder or ".", text=False)
        if r.returncode != 0:
            return f"git archive failed: {r.stderr.decode(errors='replace').strip()[:200]}"
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        here = Path(tmp) / folder
        definition, calls = cmake_calls((Path(tmp) / g.cmake).read_text(errors="replace"), g.function)
        if not definition or not calls:
            return f"{g.cmake} defines or calls no function {g.function}"
        (here / "astra-generate.cmake").write_text(definition + "\n" + "\n".join(calls) + "\n")
        done = subprocess.run([cmake, "-P", "astra-generate.cmake"], cwd=here, capture_output=True, text=True,
                              timeout=300)
        made = here / g.into
        if done.returncode != 0 or not made.is_dir():
            return f"cmake -P failed: {(done.stderr or done.stdout).strip()[-300:]}"
        files = {str(p.relative_to(made)): p.read_bytes() for p in made.rglob("*") if p.is_file()}
        staged = out.with_name(out.name + ".part")
        shutil.rmtree(staged, ignore_errors=True)
        _write(staged, files)
        os.replace(staged, out)
    return None


def copy_packages(repo: Repo, root: Path) -> list[str]:
    """Copy the include folder of each installed package the build passes (`repo.packages`) into
    `root`/PACKAGES/<package>, as the cache carries everything a kernel reads; what could not be."""
    import shutil
    problems = []
    for name in repo.packages:
        dest = root / PACKAGES / name
        if dest.is_dir():
            continue
        found = package_include(name)
        if found is None:
            problems.append(f"the package {name} is not installed (make realworld-env)")
            continue
        staged = dest.with_name(dest.name + ".part")
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(found, staged)
        for p in staged.rglob("*"):
            if p.is_file():
                p.chmod(0o444)
        os.replace(staged, dest)
    return problems


def inputs(k: Kernel) -> str:
    """What decides which files a kernel's fetch copies: a cache filled for other inputs is stale."""
    key = [FETCH_VERSION, k.repo.commit, [(m.path, m.source, m.commit) for m in k.repo.mounts], k.path,
           list(k.includes), list(k.launch_files)]
    if k.repo.generate is not None or k.repo.packages:   # (a kernel of a repository without them keeps its key)
        key.append([list(dataclasses.astuple(k.repo.generate)) if k.repo.generate else None, list(k.repo.packages)])
    return hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]


def _write(root: Path, files: dict[str, bytes]) -> int:
    n = 0
    for rel, data in files.items():
        dest = root / rel
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(data)
        tmp.chmod(0o444)   # runs work on hard-linked copies: nothing may write through them
        os.replace(tmp, dest)
        n += len(data)
    return n


def fetch(m: Manifest, kernels: list[Kernel], mirrors: Path, cache: Path = CACHE, log=print) -> dict:
    """Fetch what `kernels` need; returns (and merges into <cache>/fetch.json) the status of
    each repository and kernel."""
    cache.mkdir(parents=True, exist_ok=True)
    index_path = cache / "fetch.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"repos": {}, "kernels": {}}
    index.setdefault("inputs", {})
    by_repo: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_repo.setdefault(k.repo.key, []).append(k)
    for key, ks in by_repo.items():
        repo = m.repos[key]
        tree, why = open_tree(repo, mirrors)
        entry: dict = {"source": repo.source, "commit": repo.commit, "cache": repo.cache_name}
        if tree is None:
            entry["status"] = f"not fetched: {why}"
            for k in ks:
                index["kernels"][k.id] = entry["status"]
            index["repos"][key] = entry
            log(f"{key}: {entry['status']}")
            continue
        outside: set[str] = set()
        needed = needed_files(ks, tree, outside)
        root = cache / repo.cache_name
        (root / ".git").mkdir(parents=True, exist_ok=True)
        files = tree.read(sorted(p for p in needed if not (root / p).exists()))
        written = _write(root, files)
        built = generate(repo, mirrors, root)   # headers the project's build writes (none: None)
        if built is not None:
            tree.problems.append(f"the build step ({repo.generate.function} in {repo.generate.cmake}): {built}")
        tree.problems += copy_packages(repo, root)
        have = {p for p in needed if (root / p).exists()}
        entry.update(status="ok", files=len(have), bytes=sum(tree.files[p][2] for p in have), problems=tree.problems,
                     outside=sorted(outside))
        index["repos"][key] = entry
        for k in ks:
            if k.path not in tree.files:
                index["kernels"][k.id] = f"not fetched: {k.path} is not in {repo.source}@{repo.commit[:12]}"
            elif k.path not in have:
                index["kernels"][k.id] = f"not fetched: the mirror lacks the contents of {k.path}"
            else:
                index["kernels"][k.id] = "ok"
                index["inputs"][k.id] = inputs(k)
        log(f"{key}: {len(have)} files ({entry['bytes'] / 1e6:.1f} MB, {written / 1e6:.1f} MB new) in {root}"
            + (f"; not fetched: {'; '.join(tree.problems)}" if tree.problems else ""))
    tmp = index_path.with_name(index_path.name + ".part")   # a run reading it meanwhile sees old or new
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, index_path)
    return index


def status(cache: Path, k: Kernel) -> str:
    """'ok' or why this kernel's file is not in the cache."""
    index_path = cache / "fetch.json"
    if not index_path.exists():
        return f"not fetched: no {index_path} (run benchmarks/realworld/fetch.py)"
    index = json.loads(index_path.read_text())
    said = index.get("kernels", {}).get(k.id)
    if said is None:
        return "not fetched: not in the cache index (run benchmarks/realworld/fetch.py)"
    if said == "ok" and index.get("inputs", {}).get(k.id) != inputs(k):
        # DeepSpeed's v2 kernels ran without the include folders the manifest had gained since
        return ("not fetched: the cache was filled for other include folders, files or fetch rules than the "
                "manifest's now (run benchmarks/realworld/fetch.py)")
    if said == "ok" and not (cache / k.repo.cache_name / k.path).is_file():
        return f"not fetched: {k.path} is missing from the cache"
    return said


def outside_repository(cache: Path, k: Kernel, header: str) -> bool | None:
    """Whether `header` (as an #include names it) is none of the repository's files at its pin
    (None: the cache does not say)."""
    index_path = cache / "fetch.json"
    if not index_path.exists():
        return None
    entry = json.loads(index_path.read_text()).get("repos", {}).get(k.repo.key) or {}
    if "outside" not in entry:
        return None
    return header in entry["outside"]


def pack(cache: Path, dest: Path) -> int:
    """The cache as one compressed file, to carry to a machine without the mirrors (a GPU
    machine): what every kernel needs, about a tenth of the cache's size."""
    import tarfile
    tmp = dest.with_name(dest.name + ".part")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        tar.add(cache, arcname=cache.name, filter=lambda ti: None if ti.name.endswith(".part") else ti)
    os.replace(tmp, dest)
    return dest.stat().st_size


def unpack_if_needed(cache: Path, packed: Path | None = None) -> bool:
    """Unpack PACKED (default: <cache>.tar.xz beside it) where the cache itself is absent."""
    import tarfile
    packed = packed or cache.with_name(cache.name.lstrip(".") + ".tar.xz")
    if (cache / "fetch.json").exists() or not packed.exists():
        return False
    with tarfile.open(packed, "r:xz") as tar:
        tar.extractall(cache.parent, filter="data")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Fetch the real-world suite's repositories into the cache.")
    ap.add_argument("--only", help="kernels whose id contains this (comma-separated alternatives)")
    ap.add_argument("--mirrors", default=os.environ.get("ASTRA_MIRRORS", "/work/.mirror"))
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--pack", metavar="FILE", nargs="?", const=str(PACKED),
                    help=f"also write the cache as one .tar.xz (default {PACKED.relative_to(HERE.parents[1])})")
    a = ap.parse_args(argv)
    m = load()
    index = fetch(m, m.select(a.only), Path(a.mirrors), Path(a.cache))
    bad = {k: v for k, v in index["kernels"].items() if v != "ok"}
    total = sum(r.get("bytes", 0) for r in index["repos"].values())
    print(f"{len(index['kernels']) - len(bad)} of {len(index['kernels'])} kernels fetched; "
          f"cache {total / 1e6:.1f} MB in {a.cache}")
    for k, v in bad.items():
        print(f"  {k}: {v}")
    if a.pack:
        size = pack(Path(a.cache), Path(a.pack))
        print(f"packed into {a.pack} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
