"""User settings of the server: the whole `astra` section, sent by the client at initialisation and
read again on change (`workspace/configuration`), structured into one typed `Settings`.

One schema: contract.json names every setting and its default (package.json shows them to the user
with their enums and limits, the client sends every one of them from the contract); a setting's
field here is its name in snake case (`llm.baseUrl` → `llm_base_url`), and tests/lsp/test_contract.py
holds the four in agreement."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from astra_cuda import contract

if TYPE_CHECKING:
    from astra_cuda.compile.project import ProjectContext

BACKENDS = ("auto", "gpu", "cpu")
# The contract's settings the client keeps for itself (how it starts the server, its trace).
CLIENT_ONLY = ("server.python", "server.importStrategy", "trace.server")
_D = contract.SETTINGS  # the defaults the client shows, from the shared contract
# The settings that override a key of the project's astra.toml / [tool.astra] (config.KEYS), when
# the user set them: one precedence for the editor and the command line (whose flags do the same).
OVER_PROJECT = (("backend", "backend"), ("gpu_arch", "arch"), ("rounds", "budgets.rounds"),
                ("budget_seconds", "budgets.seconds"), ("budget_tokens", "budgets.tokens"),
                ("llm_base_url", "llm.base_url"), ("llm_model", "llm.model"),
                ("llm_reasoning_effort", "llm.reasoning_effort"), ("llm_temperature", "llm.temperature"),
                ("llm_max_tokens", "llm.max_tokens"))


@dataclass(frozen=True)
class Settings:
    llm_base_url: str = _D["llm.baseUrl"]
    llm_model: str = _D["llm.model"]
    llm_reasoning_effort: str = _D["llm.reasoningEffort"]   # '' : not sent (then the temperature is)
    llm_temperature: float = _D["llm.temperature"]
    llm_max_tokens: int = _D["llm.maxTokens"]
    budget_tokens: int = _D["budget.tokens"]       # 0: no limit; tokens as the endpoint reports them
    budget_seconds: int = _D["budget.seconds"]     # 0: no limit; wall clock of one optimize run
    llm_api_key: str = field(default="", repr=False)  # never printed or logged
    backend: str = _D["backend"]
    rounds: int = _D["rounds"]
    check_on_open: bool = _D["checkOnOpen"]
    check_on_save: bool = _D["checkOnSave"]
    gpu_arch: str = _D["gpuArch"]   # '': the GPU's own architecture, else contract.DEFAULT_ARCH
    profile_ncu: bool = _D["profile.ncu"]  # profile with Nsight Compute source counters (hot-line hints; GPU only)
    # The project context (issue 10): relative paths are taken from the workspace root.
    include_paths: tuple[str, ...] = tuple(_D["includePaths"])
    defines: tuple[str, ...] = tuple(_D["defines"])
    std: str = _D["std"]
    compile_commands: str = _D["compileCommands"]
    cluster: str = _D["cluster"]   # where kernels run: '' this machine, 'local', 'auto', 'ray://HOST:PORT'
    # From the client, not a setting: False in an untrusted workspace (static diagnostics only).
    allow_execution: bool = True

    def project(self, root: str) -> tuple[ProjectContext, str | None]:
        """The settings' part of the project context, and the compile_commands.json they name."""
        from astra_cuda.compile import project

        def folder(p: str) -> str:   # ${workspaceFolder}, as VS Code's own settings write it
            return p.replace("${workspaceFolder}", root)
        cc = folder(self.compile_commands)
        if cc and not os.path.isabs(cc):
            cc = os.path.join(root, cc)
        return project.from_flags([folder(d) for d in self.include_paths], self.defines, self.std or None,
                                  origin="settings", base=root), cc or None

    def given(self, attr: str) -> bool:
        """Whether the user set `attr` (it differs from the contract's default): only then does it
        override the project's astra.toml / [tool.astra]."""
        return bool(getattr(self, attr) != getattr(Settings(), attr))

    def over_project(self) -> dict[str, Any]:
        """The config.Values these settings give (source 'settings'), for `config.effective`."""
        from astra_cuda.config import Value
        return {key: Value(getattr(self, attr), "settings") for attr, key in OVER_PROJECT if self.given(attr)}

    def updated(self, raw: Any) -> tuple["Settings", list[str]]:
        """These settings with the client's `astra` section applied: nested
        ({"llm": {"model": ..}}) or flat ({"llm.model": ..}) keys. Bad values are kept out
        and reported, so one typo never stops the server."""
        flat = _flatten(raw) if isinstance(raw, dict) else {}
        out: dict[str, Any] = {}
        problems: list[str] = []

        for key, (kind, ok) in RULES.items():
            if key not in flat or flat[key] is None:
                continue
            v = flat[key]
            if kind is int and isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            if kind is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if kind is tuple:   # a list of strings (include folders, macros)
                if isinstance(v, list) and all(isinstance(x, str) for x in v) and ok(v):
                    out[field_of(key)] = tuple(x.strip() for x in v if x.strip())
                    continue
            elif isinstance(v, kind) and not (kind is int and isinstance(v, bool)) and ok(v):
                out[field_of(key)] = v.strip() if isinstance(v, str) else v
                continue
            problems.append(f"ignoring setting astra.{key}={v!r}")
        return replace(self, **out), problems


def _any(_v: Any) -> bool:
    return True


def _macros(v: list[str]) -> bool:
    return all(x.split("=")[0].strip().isidentifier() for x in v)


# Each setting the server reads (the contract's, but CLIENT_ONLY): its JSON type and what it accepts
# (package.json's enum, minimum and maximum say the same to the user; a test holds them equal).
RULES: dict[str, tuple[type, Callable[[Any], bool]]] = {
    "llm.baseUrl": (str, _any),
    "llm.model": (str, _any),
    "llm.reasoningEffort": (str, lambda v: v in ("", "minimal", "low", "medium", "high")),
    "llm.temperature": (float, lambda v: 0 <= v <= 2),
    "llm.maxTokens": (int, lambda v: 16 <= v <= 1 << 20),
    "budget.tokens": (int, lambda v: v >= 0),
    "budget.seconds": (int, lambda v: v >= 0),
    "backend": (str, lambda v: v in BACKENDS),
    "rounds": (int, lambda v: 1 <= v <= 100),
    "checkOnOpen": (bool, _any),
    "checkOnSave": (bool, _any),
    "gpuArch": (str, lambda v: v == "" or v.strip().startswith(("sm_", "compute_"))),
    "profile.ncu": (bool, _any),
    "includePaths": (tuple, _any),
    "defines": (tuple, _macros),
    "std": (str, lambda v: v in ("", "c++11", "c++14", "c++17", "c++20")),
    "compileCommands": (str, _any),
    "cluster": (str, lambda v: _valid_cluster(v)),
}


def field_of(key: str) -> str:
    """The `Settings` field of the contract's setting `key`: 'llm.baseUrl' -> 'llm_base_url'."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace(".", "_").lower()


def _valid_cluster(v: str) -> bool:
    from astra_cuda.execution import executors
    from astra_cuda.errors import AstraError
    try:
        executors.parse(v)
    except AstraError:
        return False
    return True


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def initial(init_options: Any) -> tuple[Settings, list[str]]:
    """Settings from `initializationOptions` ({"settings": {...}, "allowExecution": bool}) and the
    API key from the environment the client started us with. Only the client's word (Workspace
    Trust) turns execution off; a workspace's settings cannot turn it on."""
    raw = init_options.get("settings") if isinstance(init_options, dict) else None
    allow = init_options.get("allowExecution", True) if isinstance(init_options, dict) else True
    s, problems = Settings(llm_api_key=os.environ.get(contract.API_KEY_ENV, ""),
                           allow_execution=allow is not False).updated(raw)
    return s, problems
