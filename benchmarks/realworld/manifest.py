"""The suite's manifest (manifest.toml): which public repositories, pinned by commit, with the
flags their own builds use, and which kernels of theirs. Pure: reading and validating only."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"

CATEGORIES = ("elementwise", "norm", "softmax", "reduction", "rotary", "cache", "quantization", "gather",
              "transpose", "scan", "gemm", "attention")
STDS = ("c++11", "c++14", "c++17", "c++20")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class ManifestError(ValueError):
    pass


@dataclass(frozen=True)
class Mount:
    """A submodule: another repository's tree at `path` inside this one, pinned by commit."""
    path: str
    source: str
    commit: str


@dataclass(frozen=True)
class Generate:
    """Headers the project's CMake configure step writes (TransformerEngine's `string_code_*.h`):
    every call of the project's own CMake `function` in its `cmake` file, run by CMake in script
    mode over the pinned checkout; the headers it writes under `into` (relative to that file's
    folder) are the cache's `GENERATED` folder, an include folder of the build."""
    cmake: str
    function: str
    into: str


# In a repository's cache tree, what no file of the repository is: the headers its build step
# wrote, and copies of the installed packages' include folders its build passes (fetch.py).
GENERATED = "_build/generated"
PACKAGES = "_build/packages"


@dataclass(frozen=True)
class Repo:
    key: str                   # short name used by the kernels, e.g. "vllm"
    project: str               # the project, e.g. "vllm-project/vllm"
    source: str                # the public repository fetched (a fork where the project is too big)
    commit: str
    include: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    std: str = "c++17"
    nvcc: tuple[str, ...] = ()     # flags only nvcc takes (e.g. --expt-relaxed-constexpr)
    flags_from: str = ""           # where the flags were read in the project's build
    mounts: tuple[Mount, ...] = ()
    generate: Generate | None = None
    # Python packages whose `include` folder the build passes with -I (TransformerEngine's
    # build_tools: nvidia-cudnn-frontend's, for cudnn_frontend.h); fetch.py copies it into the
    # cache, which carries it to a machine without the package (the GPU machine)
    packages: tuple[str, ...] = ()

    @property
    def cache_name(self) -> str:
        return f"{self.source.replace('/', '+')}@{self.commit[:12]}"


@dataclass(frozen=True)
class Kernel:
    repo: Repo
    path: str                  # the file, relative to the repository
    kernel: str                # as `astra kernels` lists it (qualified), or the name a user sees
    category: str
    memory_bound: bool
    include: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    std: str = ""
    launch_files: tuple[str, ...] = ()   # where its launches live, when not in its own file
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.repo.key}:{self.path}:{self.kernel}"

    @property
    def includes(self) -> tuple[str, ...]:
        return self.include or self.repo.include

    @property
    def macro_defines(self) -> tuple[str, ...]:
        return self.defines or self.repo.defines

    @property
    def standard(self) -> str:
        return self.std or self.repo.std

    def include_dirs(self, root: Path) -> list[Path]:
        """The include folders of the build: the manifest's (in the tree at `root`), what the build
        step wrote, then the packages' the build passes."""
        out = [root / d for d in self.includes]
        if self.repo.generate is not None:
            out.append(root / GENERATED)
        return out + [root / PACKAGES / p for p in self.repo.packages]

    def astra_flags(self, root: Path) -> list[str]:
        """The project flags as a user passes them to `astra spec/check/profile/optimize`."""
        out: list[str] = []
        for d in self.include_dirs(root):
            out += ["-I", str(d)]
        for d in self.macro_defines:
            out += ["-D", d]
        for f in self.repo.nvcc:   # the build's -U (DeepSpeed's, apex's setup.py): Astra takes them too
            if f.startswith("-U"):
                out += ["-U", f[2:]]
        return out + ["--std", self.standard]


@dataclass
class Manifest:
    repos: dict[str, Repo]
    kernels: list[Kernel] = field(default_factory=list)

    def select(self, pattern: str | None) -> list[Kernel]:
        """Kernels whose id contains `pattern` (comma-separated alternatives; None: all)."""
        if not pattern:
            return list(self.kernels)
        parts = [p.strip() for p in pattern.split(",") if p.strip()]
        return [k for k in self.kernels if any(p in k.id for p in parts)]


def package_include(name: str) -> Path | None:
    """The `include` folder of an installed Python package, found as the project's build finds it
    (`distribution(name).locate_file("include")`); None where it is not installed."""
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        folder = Path(str(distribution(name).locate_file("include"))).resolve()
    except PackageNotFoundError:
        return None
    return folder if folder.is_dir() else None


def _strs(d: dict, key: str, where: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ManifestError(f"{where}: {key} must be a list of strings")
    return tuple(v)


def _repo(key: str, d: dict) -> Repo:
    where = f"repo {key!r}"
    for f in ("project", "source", "commit"):
        if not isinstance(d.get(f), str):
            raise ManifestError(f"{where}: needs {f}")
    if not _COMMIT.match(d["commit"]):
        raise ManifestError(f"{where}: commit must be 40 hex digits, not {d['commit']!r}")
    if d.get("std", "c++17") not in STDS:
        raise ManifestError(f"{where}: std must be one of {', '.join(STDS)}")
    mounts = []
    for path, spec in (d.get("mounts") or {}).items():
        src, _, commit = str(spec).partition("@")
        if not _COMMIT.match(commit):
            raise ManifestError(f"{where}: mount {path!r} must be 'owner/name@<40-hex commit>'")
        mounts.append(Mount(path.strip("/"), src, commit))
    gen = d.get("generate")
    if gen is not None and not (isinstance(gen, dict) and all(isinstance(gen.get(f), str) and gen[f]
                                                             for f in ("cmake", "function", "into"))):
        raise ManifestError(f"{where}: generate needs cmake, function and into")
    return Repo(key, d["project"], d["source"], d["commit"], _strs(d, "include", where),
                _strs(d, "defines", where), d.get("std", "c++17"), _strs(d, "nvcc", where),
                d.get("flags_from", ""), tuple(mounts),
                Generate(gen["cmake"], gen["function"], gen["into"]) if gen else None, _strs(d, "packages", where))


def load(path: Path = MANIFEST) -> Manifest:
    data = tomllib.loads(path.read_text())
    repos = {key: _repo(key, d) for key, d in (data.get("repo") or {}).items()}
    m = Manifest(repos)
    seen: set[str] = set()
    for i, d in enumerate(data.get("kernel") or []):
        where = f"kernel #{i + 1} ({d.get('kernel', '?')})"
        if d.get("repo") not in repos:
            raise ManifestError(f"{where}: unknown repo {d.get('repo')!r}")
        for f in ("path", "kernel", "category"):
            if not isinstance(d.get(f), str) or not d[f]:
                raise ManifestError(f"{where}: needs {f}")
        if d["category"] not in CATEGORIES:
            raise ManifestError(f"{where}: category must be one of {', '.join(CATEGORIES)}")
        if not isinstance(d.get("memory_bound"), bool):
            raise ManifestError(f"{where}: memory_bound must be true or false")
        if d.get("std") and d["std"] not in STDS:
            raise ManifestError(f"{where}: std must be one of {', '.join(STDS)}")
        k = Kernel(repos[d["repo"]], d["path"], d["kernel"], d["category"], d["memory_bound"],
                   _strs(d, "include", where), _strs(d, "defines", where), d.get("std", ""),
                   _strs(d, "launch_files", where), d.get("note", ""))
        if k.id in seen:
            raise ManifestError(f"{where}: listed twice")
        seen.add(k.id)
        m.kernels.append(k)
    return m
