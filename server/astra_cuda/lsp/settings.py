"""User settings of the server: the whole `astra` section, which the server asks the client for
(`workspace/configuration`, after `initialized` and again on every didChangeConfiguration),
structured into one typed `Settings`.

One schema: package.json's `contributes.configuration` is what the user sees and edits; each of
its `astra.*` settings that the server reads is one field here, declared with `setting(key,
default, ...)` — the same default, JSON type, enum and limits (tests/lsp/test_contract.py holds
the two equal both ways). The client copies none of them: VS Code answers the server's
`workspace/configuration` from package.json's defaults and the user's values."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, get_type_hints

from astra_cuda import contract

if TYPE_CHECKING:
    from astra_cuda.compile.project import ProjectContext

# package.json's settings the client keeps for itself (how it starts the server, its trace).
CLIENT_ONLY = ("server.python", "server.importStrategy", "trace.server")
# The settings that override a key of the project's astra.toml / [tool.astra] (config.KEYS), when
# the user set them: one precedence for the editor and the command line (whose flags do the same).
OVER_PROJECT = (("backend", "backend"), ("gpu_arch", "arch"), ("rounds", "budgets.rounds"),
                ("budget_seconds", "budgets.seconds"), ("budget_tokens", "budgets.tokens"),
                ("llm_base_url", "llm.base_url"), ("llm_model", "llm.model"),
                ("llm_reasoning_effort", "llm.reasoning_effort"), ("llm_temperature", "llm.temperature"),
                ("llm_max_tokens", "llm.max_tokens"))


def _any(_v: Any) -> bool:
    return True


def setting(key: str, default: Any, *, enum: tuple[Any, ...] | None = None, minimum: float | None = None,
            maximum: float | None = None, ok: Callable[[Any], bool] = _any) -> Any:
    """A field that is package.json's setting `astra.<key>`: its default, its enum and limits as
    package.json states them, and `ok` for what a JSON schema cannot say (a Ray address)."""
    return field(default=default, metadata={"key": key, "enum": enum, "minimum": minimum, "maximum": maximum,
                                            "ok": ok})


def _macros(v: tuple[str, ...]) -> bool:
    return all(x.split("=")[0].strip().isidentifier() for x in v)


def _arch(v: str) -> bool:
    return v == "" or v.strip().startswith(("sm_", "compute_"))


def _valid_cluster(v: str) -> bool:
    from astra_cuda.errors import AstraError
    from astra_cuda.execution import executors
    try:
        executors.parse(v)
    except AstraError:
        return False
    return True


@dataclass(frozen=True)
class Settings:
    llm_base_url: str = setting("llm.baseUrl", "")
    llm_model: str = setting("llm.model", "")
    # '': not sent (then the temperature is)
    llm_reasoning_effort: str = setting("llm.reasoningEffort", "", enum=("", "minimal", "low", "medium", "high"))
    llm_temperature: float = setting("llm.temperature", 0.2, minimum=0, maximum=2)
    llm_max_tokens: int = setting("llm.maxTokens", 8192, minimum=16, maximum=1 << 20)
    budget_tokens: int = setting("budget.tokens", 0, minimum=0)     # 0: no limit; tokens as the endpoint reports them
    budget_seconds: int = setting("budget.seconds", 0, minimum=0)   # 0: no limit; wall clock of one optimize run
    backend: str = setting("backend", "auto", enum=("auto", "gpu", "cpu"))
    rounds: int = setting("rounds", 5, minimum=1, maximum=100)
    check_on_open: bool = setting("checkOnOpen", True)
    check_on_save: bool = setting("checkOnSave", True)
    gpu_arch: str = setting("gpuArch", "", ok=_arch)   # '': the GPU's own architecture, else contract.DEFAULT_ARCH
    profile_ncu: bool = setting("profile.ncu", False)  # Nsight Compute source counters (hot-line hints; GPU only)
    # The project context (issue 10): relative paths are taken from the workspace root.
    include_paths: tuple[str, ...] = setting("includePaths", ())
    defines: tuple[str, ...] = setting("defines", (), ok=_macros)
    std: str = setting("std", "", enum=("", "c++11", "c++14", "c++17", "c++20"))
    compile_commands: str = setting("compileCommands", "")
    # where kernels run: '' this machine, 'local', 'auto', 'ray://HOST:PORT'
    cluster: str = setting("cluster", "", ok=_valid_cluster)
    # Not settings (no workspace can set them): the API key from the environment the client
    # started us with (never printed or logged), and the client's Workspace Trust (False: static
    # diagnostics only).
    llm_api_key: str = field(default="", repr=False)
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

    def defaults(self) -> Settings:
        """Every setting at package.json's default, the API key and the trust kept: what the
        client's whole `astra` section is applied to."""
        return replace(Settings(), llm_api_key=self.llm_api_key, allow_execution=self.allow_execution)

    def given(self, attr: str) -> bool:
        """Whether the user set `attr` (it differs from package.json's default): only then does it
        override the project's astra.toml / [tool.astra]."""
        return bool(getattr(self, attr) != getattr(Settings(), attr))

    def over_project(self) -> dict[str, Any]:
        """The config.Values these settings give (source 'settings'), for `config.effective`."""
        from astra_cuda.config import Value
        return {key: Value(getattr(self, attr), "settings") for attr, key in OVER_PROJECT if self.given(attr)}

    def updated(self, raw: Any) -> tuple[Settings, list[str]]:
        """These settings with the client's `astra` section applied: nested
        ({"llm": {"model": ..}}, as workspace/configuration answers) or flat ({"llm.model": ..})
        keys. Bad values are kept out and reported, so one typo never stops the server."""
        flat = _flatten(raw) if isinstance(raw, dict) else {}
        out: dict[str, Any] = {}
        problems: list[str] = []
        for key, f in FIELDS.items():
            if flat.get(key) is None:
                continue
            ok, v = _value(f, flat[key])
            if ok:
                out[f.name] = v
            else:
                problems.append(f"ignoring setting astra.{key}={flat[key]!r}")
        return replace(self, **out), problems


# package.json's setting (without 'astra.') -> its field; the fields that are no setting are left out
FIELDS: dict[str, dataclasses.Field[Any]] = {f.metadata["key"]: f for f in dataclasses.fields(Settings)
                                             if "key" in f.metadata}
_HINTS = get_type_hints(Settings)


def kind(f: dataclasses.Field[Any]) -> type:
    """A setting's Python type (package.json's JSON type): str, int, float, bool, or tuple for an
    array of strings."""
    t = _HINTS[f.name]
    return tuple if getattr(t, "__origin__", None) is tuple else t


def _value(f: dataclasses.Field[Any], v: Any) -> tuple[bool, Any]:
    """(whether the setting takes `v`, `v` as the field holds it)."""
    k, m = kind(f), f.metadata
    if k is tuple:   # a list of strings (include folders, macros)
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            return False, v
        v = tuple(x.strip() for x in v if x.strip())
    else:
        if k is int and isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if k is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, k) or (k is not bool and isinstance(v, bool)):
            return False, v
        if isinstance(v, str):
            v = v.strip()
    ok = ((m["enum"] is None or v in m["enum"]) and (m["minimum"] is None or v >= m["minimum"])
          and (m["maximum"] is None or v <= m["maximum"]) and m["ok"](v))
    return bool(ok), v


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def initial(init_options: Any) -> Settings:
    """The settings until the client's `astra` section is read: the defaults, the API key from the
    environment the client started us with, and the client's Workspace Trust from
    `initializationOptions` ({"allowExecution": bool}). Only the client's word turns execution
    off; no workspace setting can turn it on."""
    allow = init_options.get("allowExecution", True) if isinstance(init_options, dict) else True
    return Settings(llm_api_key=os.environ.get(contract.API_KEY_ENV, ""), allow_execution=allow is not False)
