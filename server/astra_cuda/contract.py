"""The contract the VS Code client and this server share, read from contract.json (the client
bundles the same file): command names, notifications, and the default GPU architecture. Every
such name on either side comes from here, so they cannot drift apart (package.json lists the
commands for VS Code; a test keeps it equal). The settings' one schema is package.json's
configuration, typed by astra_cuda/lsp/settings.py; the client copies none of them.

Server commands take the arguments `(uri: str, kernel: str)` (`kernels` and `check` only the
uri); their results are the JSON objects client/src/contract.ts types.
"""
from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

_DATA: dict[str, Any] = json.loads(files("astra_cuda").joinpath("contract.json").read_text(encoding="utf-8"))

SERVER_COMMANDS: dict[str, str] = _DATA["serverCommands"]
CLIENT_COMMANDS: dict[str, str] = _DATA["clientCommands"]
STATUS_NOTIFICATION: str = _DATA["notifications"]["status"]
API_KEY_ENV: str = _DATA["secrets"]["apiKeyEnv"]       # how the client hands the API key over
DIAGNOSTICS_DOCS: str = _DATA["diagnosticsDocs"]   # docs/diagnostics.md: one section per diagnostic code
DEFAULT_ARCH: str = _DATA["defaultGpuArch"]   # when neither the setting nor a GPU says (gpuArch "": the GPU's own)


def command(name: str) -> str:
    """The wire name of a server command ('optimize' -> 'astra_cuda.lsp.optimize')."""
    return SERVER_COMMANDS[name]


def client_command(name: str) -> str:
    """The wire name of a client command ('showReport' -> 'astra.showReport')."""
    return CLIENT_COMMANDS[name]
