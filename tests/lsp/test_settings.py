"""Settings from the client: nested or flat keys, bad values reported and kept out."""
from astra_cuda.lsp.settings import Settings, initial


def test_nested_and_flat_keys_apply_and_bad_values_are_reported():
    s, problems = Settings().updated({"llm": {"baseUrl": " http://localhost:8000/v1 ", "model": "m"},
                                      "rounds": "7", "profile.ncu": True, "backend": "tpu",
                                      "gpuArch": "x86", "checkOnSave": "yes"})
    assert (s.llm_base_url, s.llm_model, s.rounds, s.profile_ncu) == ("http://localhost:8000/v1", "m", 7, True)
    assert (s.backend, s.gpu_arch, s.check_on_save) == ("auto", "", True)  # defaults kept ("": the GPU's own)
    assert len(problems) == 3 and all("ignoring setting astra." in p for p in problems)


def test_the_api_key_comes_from_the_environment_and_is_never_printed(monkeypatch):
    monkeypatch.setenv("ASTRA_LLM_API_KEY", "sk-secret-value")
    s, problems = initial({"settings": {"backend": "cpu"}})
    assert s.llm_api_key == "sk-secret-value" and s.backend == "cpu" and not problems
    assert "sk-secret" not in repr(s)


def test_cluster_setting_takes_ray_addresses_and_refuses_others():
    s, problems = Settings().updated({"cluster": "ray://gpu-box:10001"})
    assert s.cluster == "ray://gpu-box:10001" and not problems
    for bad in ("gpu-box:10001", "ray://", "http://x"):
        s2, problems = Settings().updated({"cluster": bad})
        assert s2.cluster == "" and problems
