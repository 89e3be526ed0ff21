"""Workspace Trust, server side: started for an untrusted workspace (`allowExecution: false` in the
initialization options, as the client sends it), the server gives static diagnostics only — no
check runs on open or on save, nothing is pinned, optimize and profile refuse — and the status says
why. Started again for a trusted workspace (the client restarts it when trust is granted), the
checks run. Also: settings that point at servers or programs cannot come from a workspace."""
from __future__ import annotations

import asyncio
import json
import sys

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from conftest import ROOT, SETTINGS, Doc, until

ERR = types.DiagnosticSeverity.Error


async def _session(lsp_client: LanguageClient, allow: bool) -> None:
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda *_: None)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.statuses = []
    lsp_client.feature("astra/status")(lambda params: lsp_client.statuses.append(params))
    lsp_client.set_configuration(SETTINGS, section="astra")
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), initialization_options={"allowExecution": allow}))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def untrusted(lsp_client: LanguageClient):
    await _session(lsp_client, allow=False)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def trusted(lsp_client: LanguageClient):
    await _session(lsp_client, allow=True)
    yield
    await lsp_client.shutdown_session()


def _statuses(client, uri):
    return [s for s in client.statuses if s.uri == uri]


async def test_untrusted_workspace_gets_static_diagnostics_only(untrusted, example):
    path = example()
    (path.parent / ".git").mkdir()
    broken = path.read_text().replace("const float y =", "BROKEN_undefined_name += 1;\n    const float y =", 1)
    doc = Doc(untrusted, path, broken)
    # NVRTC's diagnostics still arrive: compiling device code runs nothing.
    await doc.diagnostics_where(lambda ds: any("BROKEN_undefined_name" in d.message for d in ds), timeout=60)
    doc.save(path.read_text().replace("BROKEN_undefined_name += 1;\n", ""))
    await until(lambda: any(s.checking is False and s.errors == 0 for s in _statuses(untrusted, doc.uri)), 60,
                lambda: f"statuses: {_statuses(untrusted, doc.uri)}")
    await asyncio.sleep(1.0)   # a check would have started by now
    status = _statuses(untrusted, doc.uri)[-1]
    assert "not trusted" in status.restricted
    assert not any(s.checking for s in _statuses(untrusted, doc.uri))
    assert not any(d.code == "check" for d in doc.diagnostics())
    assert not (path.parent / ".astra").exists()          # nothing pinned, nothing built to run
    lenses = [lens.command.title for lens in await doc.lenses() if lens.command]
    assert not any("verified" in t or "check failed" in t for t in lenses), lenses
    answer = await doc.command("astra_cuda.lsp.optimize", "silu_and_mul")
    answer = answer if isinstance(answer, dict) else vars(answer)
    assert answer["status"] != "done" and "not trusted" in answer["message"], answer


async def test_trusted_workspace_runs_the_checks(trusted, example):
    path = example()
    doc = Doc(trusted, path)
    await until(lambda: any(s.checking for s in _statuses(trusted, doc.uri)), 60,
                lambda: f"statuses: {_statuses(trusted, doc.uri)}")
    assert _statuses(trusted, doc.uri)[-1].restricted is None


def test_settings_that_point_at_servers_or_programs_are_user_only():
    props = json.loads((ROOT / "package.json").read_text())["contributes"]["configuration"]["properties"]
    for key in ("astra.llm.baseUrl", "astra.llm.model", "astra.server.python", "astra.server.importStrategy"):
        assert props[key].get("scope") in ("machine", "application"), key
    trust = json.loads((ROOT / "package.json").read_text())["capabilities"]["untrustedWorkspaces"]
    assert trust["supported"] == "limited" and "astra.compileCommands" in trust["restrictedConfigurations"]
