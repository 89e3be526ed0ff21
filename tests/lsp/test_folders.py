"""Issue 27: per-folder settings of a multi-root workspace over the project's astra.toml, and the
first-use notice before anything goes to an LLM endpoint (a project's endpoint only with consent)."""
import sys
from pathlib import Path

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from astra_cuda.lsp import optimization
from astra_cuda.lsp import settings as settings_mod
from astra_cuda.lsp.runtime import AstraServer

from conftest import Doc, SETTINGS, until


def folder(tmp_path: Path, name: str, toml: str = "") -> Path:
    d = tmp_path / name
    (d / ".git").mkdir(parents=True)
    (d / "inc").mkdir()
    (d / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    if toml:
        (d / "astra.toml").write_text(toml)
    return d


def test_each_folder_has_its_settings_over_its_project_file(tmp_path, monkeypatch):
    monkeypatch.setattr(AstraServer, "arch", lambda self, path: str(self.effective(path)["arch"].value))
    a = folder(tmp_path, "a", 'backend = "cpu"\n')
    b = folder(tmp_path, "b", 'backend = "gpu"\n')
    ls = AstraServer("test")
    base = settings_mod.Settings()
    sa, problems = base.updated({"includePaths": ["${workspaceFolder}/inc"], "defines": ["FOLDER_A"]})
    sb, _ = base.updated({"backend": "cpu"})
    assert not problems
    ls.folder_settings = {str(a.resolve()): sa, str(b.resolve()): sb}
    assert ls.settings_for(str(a / "k.cu")) is sa and ls.settings_for(str(tmp_path / "elsewhere.cu")) is ls.settings
    assert ls.backend_for(str(a / "k.cu")) == "cpu"      # the folder sets none: its astra.toml's
    assert ls.backend_for(str(b / "k.cu")) == "cpu"      # the folder's setting wins over astra.toml's gpu
    ctx = ls.project(str(a / "k.cu"))
    assert ctx.include_dirs == (str((a / "inc").resolve()),) and ("FOLDER_A", None) in ctx.defines
    assert ("FOLDER_A", None) not in ls.project(str(b / "k.cu")).defines
    sc, _ = base.updated({"gpuArch": "sm_80", "rounds": 7})
    (b / "astra.toml").write_text('arch = "sm_89"\n[budgets]\nrounds = 2\n')
    assert ls.arch(str(b / "k.cu")) == "sm_89"           # the project's, where the folder sets none
    eff = ls.effective(str(b / "k.cu"))
    assert eff["budgets.rounds"].value == 2 and eff["budgets.rounds"].source.endswith("astra.toml:3")
    ls.folder_settings[str(b.resolve())] = sc
    assert ls.arch(str(b / "k.cu")) == "sm_80" and ls.effective(str(b / "k.cu"))["budgets.rounds"].value == 7


def test_new_llm_settings_are_read_and_checked():
    s, problems = settings_mod.Settings().updated({"llm": {"reasoningEffort": "low", "temperature": 1, "maxTokens": 512},
                                                    "budget": {"tokens": 1000, "seconds": 60}})
    assert not problems and (s.llm_reasoning_effort, s.llm_temperature, s.llm_max_tokens) == ("low", 1.0, 512)
    assert (s.budget_tokens, s.budget_seconds) == (1000, 60)
    _, problems = settings_mod.Settings().updated({"llm": {"reasoningEffort": "max", "temperature": 9}})
    assert len(problems) == 2


def test_the_first_use_notice_comes_before_anything_is_sent(tmp_path):
    a = folder(tmp_path, "a", '[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    ls = AstraServer("test")
    cfg, source = optimization.llm_config(ls, str(a / "k.cu"))
    assert cfg is not None and cfg.base_url == "http://127.0.0.1:9/v1" and source.endswith("astra.toml:2")
    ask = optimization.consent_needed(cfg, source, None)
    assert ask is not None and ask["status"] == "consent" and ask["fromProject"] is True
    assert ask["endpoint"] == "http://127.0.0.1:9/v1" and "kernel's source" in ask["sent"]
    assert optimization.consent_needed(cfg, source, "http://other/v1") is not None   # consent is per endpoint
    assert optimization.consent_needed(cfg, source, "http://127.0.0.1:9/v1") is None
    # the user's own settings win over the project's endpoint, and are asked about too (first use)
    ls.settings, _ = ls.settings.updated({"llm": {"baseUrl": "http://127.0.0.1:8/v1", "model": "mine"}})
    cfg, source = optimization.llm_config(ls, str(a / "k.cu"))
    assert cfg.base_url == "http://127.0.0.1:8/v1" and cfg.model == "mine" and source == "settings"
    assert optimization.consent_needed(cfg, source, None)["fromProject"] is False
    ls.settings = settings_mod.Settings()
    assert optimization.llm_config(ls, str(folder(tmp_path, "c") / "k.cu"))[0] is None    # offline


# ---- the real server over LSP: a multi-root workspace whose folders answer differently ----------

# Compiles only with both macros: FROM_TOML from the folder's astra.toml, FROM_FOLDER from its settings.
NEEDS = "__global__ void k(float* x) { x[0] = FROM_TOML + FROM_FOLDER; }\n"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def roots(lsp_client: LanguageClient, tmp_path):
    """Two workspace folders, both with astra.toml defining FROM_TOML; the editor's answer to
    workspace/configuration depends on the folder asked about (VS Code's resource scope)."""
    a, b = folder(tmp_path, "a", 'defines = ["FROM_TOML"]\n'), folder(tmp_path, "b", 'defines = ["FROM_TOML"]\n')
    for d in (a, b):
        (d / "k.cu").write_text(NEEDS)
    lsp_client.set_configuration(dict(SETTINGS, checkOnOpen=False, checkOnSave=False), section="astra")
    lsp_client.set_configuration(dict(SETTINGS, defines=["FROM_FOLDER"]), section="astra", scope_uri=a.as_uri())
    lsp_client.set_configuration(SETTINGS, section="astra", scope_uri=b.as_uri())
    asked: list[str | None] = []
    answer = lsp_client.get_configuration

    def get_configuration(**kw):
        asked.append(kw.get("scope_uri"))
        return answer(**kw)
    lsp_client.get_configuration = get_configuration
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda *_: None)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.feature("astra/status")(lambda params: None)
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"),
        workspace_folders=[types.WorkspaceFolder(uri=d.as_uri(), name=d.name) for d in (a, b)]))
    lsp_client.roots, lsp_client.asked = (a, b), asked   # pytest-lsp hands the test the client
    yield
    await lsp_client.shutdown_session()


def errors(doc: Doc) -> list[str]:
    return [d.message for d in doc.diagnostics() if d.severity == types.DiagnosticSeverity.Error]


async def test_a_multi_root_workspace_compiles_each_folder_with_its_own_settings(roots):
    client = roots
    (a, b), asked = client.roots, client.asked
    da, db = Doc(client, a / "k.cu"), Doc(client, b / "k.cu")
    await until(lambda: da.uri in client.diagnostics and errors(db), 120, lambda: str(client.diagnostics))
    assert {a.as_uri(), b.as_uri()} <= set(asked)           # each folder asked with its own scope
    assert errors(da) == [], da.diagnostics()                # FROM_TOML (astra.toml) + FROM_FOLDER (its settings)
    assert ["FROM_FOLDER" in m for m in errors(db)] == [True], errors(db)   # FROM_TOML came from astra.toml
    # the folder's settings change: read again on didChangeConfiguration, used by the next analysis
    client.set_configuration(dict(SETTINGS, defines=["FROM_FOLDER"]), section="astra", scope_uri=b.as_uri())
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await until(lambda: asked.count(b.as_uri()) >= 2, 30, lambda: str(asked))
    db.save()
    await db.diagnostics_where(lambda ds: not [d for d in ds if d.severity == types.DiagnosticSeverity.Error], 120)
