"""The settings a verb runs with: its flags over the environment over the project's configuration
(`effective`, with the source of every value; `apply_config` per file, as each file of a run may
belong to another project), its project context (`project_context`), and `astra config`, which prints them."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .. import api
from ..errors import AstraError
from .terminal import EXIT_OK, emit_json, shown

if TYPE_CHECKING:
    from ..compile.project import ProjectContext
    from ..config import Value


def project_context(a: argparse.Namespace, path: str | None = None) -> ProjectContext:
    """The project context from -I/-D/--std/--compile-commands (then the project's files)."""
    from ..compile import project
    cli = project.from_flags(a.include or (), a.define or (), a.std, origin="command line",
                              undefines=getattr(a, "undefine", None) or ())
    return api.project_context(path or a.file, cli=cli, compile_commands=a.compile_commands)


# Flags that override a key of the project configuration (astra_cuda.config.KEYS).
_GIVEN = (("backend", "backend"), ("arch", "arch"), ("budgets.rounds", "rounds"), ("budgets.tune", "tune"),
          ("budgets.seconds", "max_seconds"), ("budgets.tokens", "max_tokens"), ("llm.base_url", "base_url"),
          ("llm.model", "model"), ("llm.reasoning_effort", "reasoning_effort"), ("llm.temperature", "temperature"),
          ("llm.max_tokens", "max_output_tokens"), ("llm.timeout", "llm_timeout"))
_ENV = (("llm.model", "ASTRA_MODEL"), ("llm.base_url", "ASTRA_BASE_URL"))


def effective(a: argparse.Namespace, path: str) -> dict[str, Value]:
    """Every configuration key for `path` with its source: the command line, the environment,
    the project's files, the default."""
    import os

    from .. import config
    given = {key: config.Value(getattr(a, attr), "command line") for key, attr in _GIVEN
             if getattr(a, attr, None) is not None}
    for key, env in _ENV:
        if key not in given and os.environ.get(env):
            given[key] = config.Value(os.environ[env], f"environment ({env})")
    return config.effective(api.project_config(path), given)


def apply_config(a: argparse.Namespace, path: str) -> dict[str, Value]:
    """Fill the run's options the command line left open from `path`'s project configuration
    (each file of a run may belong to another project)."""
    flags = a.__dict__.setdefault("_flags", {"backend": a.backend, "arch": a.arch})
    a.backend, a.arch = flags["backend"], flags["arch"]
    eff = effective(a, path)
    a.backend = eff["backend"].value
    if getattr(a, "arch", None) is None and eff["arch"].value:
        a.arch = eff["arch"].value
    return eff


def cmd_config(a: argparse.Namespace) -> int:
    """The effective configuration for a file (or the current folder) and where each value came from."""
    import os

    from .. import config
    path = a.file or os.path.join(os.getcwd(), "_")
    cfg = api.project_config(path)
    eff = effective(a, path)
    parts = []
    cli = project_flags(a)
    if cli is not None and not cli.empty:
        parts.append(cli)
    parts += cfg.contexts(path)
    from ..compile.project import find_compile_commands, from_compile_commands
    from .. import workspace
    db = a.compile_commands or cfg.compile_commands() or find_compile_commands(path, str(workspace.root_for(path)))
    problems = list(cfg.problems)
    if db:
        try:
            parts.append(from_compile_commands(db, path))
        except AstraError as e:
            problems.append(e.message)
    endpoint = eff["llm.base_url"]
    allowed = endpoint.value is None or config.endpoint_allowed(endpoint.source)
    if a.json:
        emit_json({"file": path if a.file else None, "config_file": str(cfg.file) if cfg.file else None,
                    "values": {k: {"value": v.value, "source": v.source} for k, v in eff.items()},
                    "tolerances": {k: {"atol": t[0], "rtol": t[1]} for k, t in cfg.tolerances.items()},
                    "compile": [c.to_json() for c in parts], "llm_endpoint_allowed": allowed,
                    "problems": problems})
        return EXIT_OK
    print(f"configuration for {path if a.file else os.getcwd()}")
    print(f"  project file: {cfg.file or 'none (astra.toml, or [tool.astra] in pyproject.toml, up to the repository root)'}")
    width = max(len(k) for k in eff)
    for k, v in eff.items():
        value = "-" if v.value is None or v.value == [] else (", ".join(v.value) if isinstance(v.value, list) else v.value)
        print(f"  {k.ljust(width)}  {shown(value)}  ({shown(v.source)})")
    for dt, (atol, rtol) in cfg.tolerances.items():
        print(f"  tolerances.{dt}: atol {atol if atol is not None else 'default'}, "
              f"rtol {rtol if rtol is not None else 'default'}  ({cfg.file})")
    if endpoint.value is not None and not allowed:
        print(f"  note: the LLM endpoint {endpoint.value} comes from a project file: it is used only with your "
              f"consent (set {config.TRUST_ENV}=1, or give --base-url yourself)")
    print("compile context (earlier parts win; include folders are searched in this order):")
    for c in parts or []:
        print(f"  {shown(c.describe())}")
        if c.ignored:
            print(f"    ignored: {shown(', '.join(c.ignored))}")
    if not parts:
        print("  none (no -I/-D, project file, compile_flags.txt, .clangd or compile_commands.json)")
    for p in problems:
        print(f"astra: warning: {shown(p)}", file=sys.stderr)
    return EXIT_OK


def project_flags(a: argparse.Namespace) -> ProjectContext | None:
    from ..compile import project
    if not (getattr(a, "include", None) or getattr(a, "define", None) or getattr(a, "undefine", None)
            or getattr(a, "std", None)):
        return None
    return project.from_flags(a.include or (), a.define or (), a.std, origin="command line",
                              undefines=getattr(a, "undefine", None) or ())
