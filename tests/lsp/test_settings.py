"""Settings from the client: nested or flat keys, bad values reported and kept out; the server
asks for them (workspace/configuration) after `initialized` and on every change."""
import sys

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from astra_cuda.lsp.settings import Settings, initial
from conftest import until


def test_nested_and_flat_keys_apply_and_bad_values_are_reported():
    s, problems = Settings().updated({"llm": {"baseUrl": " http://localhost:8000/v1 ", "model": "m"},
                                      "rounds": "7", "profile.ncu": True, "backend": "tpu",
                                      "gpuArch": "x86", "checkOnSave": "yes"})
    assert (s.llm_base_url, s.llm_model, s.rounds, s.profile_ncu) == ("http://localhost:8000/v1", "m", 7, True)
    assert (s.backend, s.gpu_arch, s.check_on_save) == ("auto", "", True)  # defaults kept ("": the GPU's own)
    assert len(problems) == 3 and all("ignoring setting astra." in p for p in problems)


def test_the_api_key_comes_from_the_environment_and_is_never_printed(monkeypatch):
    monkeypatch.setenv("ASTRA_LLM_API_KEY", "sk-secret-value")
    s, problems = initial({"allowExecution": True}).updated({"backend": "cpu"})
    assert s.llm_api_key == "sk-secret-value" and s.backend == "cpu" and not problems
    assert "sk-secret" not in repr(s)
    # the client's whole section applies over the defaults: the key and the trust are kept
    s2, _ = initial({"allowExecution": False}).updated({"rounds": 9})
    assert s2.defaults().updated({"backend": "cpu"})[0] == Settings(backend="cpu", llm_api_key="sk-secret-value",
                                                                     allow_execution=False)


def test_no_workspace_setting_turns_execution_on_or_sets_the_key():
    s, problems = initial({"allowExecution": False}).updated({"allowExecution": True, "llmApiKey": "x",
                                                              "llm": {"apiKey": "x"}})
    assert s.allow_execution is False and s.llm_api_key != "x" and not problems


def test_cluster_setting_takes_ray_addresses_and_refuses_others():
    s, problems = Settings().updated({"cluster": "ray://gpu-box:10001"})
    assert s.cluster == "ray://gpu-box:10001" and not problems
    for bad in ("gpu-box:10001", "ray://", "http://x"):
        s2, problems = Settings().updated({"cluster": bad})
        assert s2.cluster == "" and problems


# ---- the server asks for the settings (real client, real server): the client sends none

@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def asking(lsp_client: LanguageClient):
    lsp_client.asked = []
    answer = lsp_client.get_configuration

    def get_configuration(**kw):
        lsp_client.asked.append((kw.get("section"), kw.get("scope_uri")))
        return answer(**kw)
    lsp_client.get_configuration = get_configuration
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda *_: None)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.feature("astra/status")(lambda params: None)
    lsp_client.set_configuration({"backend": "cpu", "rounds": 3, "checkOnOpen": False, "checkOnSave": False},
                                 section="astra")
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


def _logged(client: LanguageClient, words: str) -> bool:
    return any(words in m.message for m in client.log_messages)


async def test_the_server_asks_for_the_astra_section_and_again_on_a_change(asking):
    client = asking
    await until(lambda: _logged(client, "ready (backend=cpu, rounds=3"), 30, lambda: str(client.log_messages))
    assert client.asked[0] == ("astra", None)   # the window's section, after `initialized`
    # a change: the server asks again (the notification carries nothing), bad values are shown and kept out
    client.set_configuration({"backend": "gpu", "rounds": 0}, section="astra")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    # the whole section applies over the defaults: rounds back to 5 (0 is refused), checks on again
    await until(lambda: _logged(client, "settings: backend=gpu, rounds=5, checkOnOpen=True"), 30,
                lambda: str(client.log_messages))
    assert client.asked.count(("astra", None)) == 2
    assert any("ignoring setting astra.rounds=0" in m.message for m in client.messages)
