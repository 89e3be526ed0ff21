"""The project configuration (issue 27): astra.toml / [tool.astra] found upward from the file,
clangd's flag files, precedence, where each value came from, and what a cloned repository may not do."""
import json
from pathlib import Path

import pytest

from astra_cuda import api, cli, config

ROOT = Path(__file__).resolve().parents[2]


def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / ".git").mkdir(parents=True)
    (r / "src" / "deep").mkdir(parents=True)
    (r / "include").mkdir()
    (r / "src" / "deep" / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    return r


def test_tool_astra_in_pyproject_is_found_upward_with_sources(tmp_path):
    r = repo(tmp_path)
    (r / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.astra]\ninclude = ["include"]\n'
                                      'defines = ["ENABLE_BF16", "N=4"]\nbackend = "cpu"\n\n'
                                      '[tool.astra.budgets]\ntokens = 5000\n\n[tool.astra.llm]\nmodel = "m"\n'
                                      'temperature = 0.5\n\n[tool.astra.tolerances]\nfp16 = { atol = 0.05 }\n')
    cfg = config.load(r / "src" / "deep" / "k.cu")
    assert cfg.file == r / "pyproject.toml" and not cfg.problems
    eff = config.effective(cfg)
    assert eff["backend"].value == "cpu" and eff["backend"].source == f"{r / 'pyproject.toml'}:7"
    assert eff["budgets.tokens"].value == 5000 and eff["budgets.tokens"].source.endswith(":10")
    assert eff["llm.temperature"].value == 0.5 and eff["budgets.rounds"] == config.Value(5, "default")
    assert cfg.tolerances == {"half": (0.05, None)}
    ctx = api.project_context(str(r / "src" / "deep" / "k.cu"))
    assert ctx.include_dirs == (str(r / "include"),) and ("N", "4") in ctx.defines
    # the command line wins over the project file
    given = {"backend": config.Value("static", "command line")}
    assert config.effective(cfg, given)["backend"] == config.Value("static", "command line")


def test_astra_toml_wins_over_pyproject_and_the_search_stops_at_the_repository(tmp_path):
    r = repo(tmp_path)
    (tmp_path / "astra.toml").write_text('backend = "gpu"\n')          # above the repository: not its
    assert config.find(r / "src" / "deep" / "k.cu") is None
    (r / "pyproject.toml").write_text('[tool.astra]\nbackend = "cpu"\n')
    (r / "src" / "astra.toml").write_text('backend = "static"\n')
    assert config.find(r / "src" / "deep" / "k.cu") == r / "src" / "astra.toml"
    (r / "src" / "pyproject.toml").write_text('[project]\nname = "no-astra-table"\n')
    assert config.find(r / "src" / "deep" / "k.cu") == r / "src" / "astra.toml"


def test_keys_bad_values_and_unknown_keys_are_refused_with_their_place(tmp_path):
    r = repo(tmp_path)
    (r / "astra.toml").write_text('backend = "tpu"\nrounds_typo = 3\n[llm]\napi_key = "sk-live-123"\n'
                                  'base_url = "file:///etc/passwd"\n')
    cfg = config.load(r / "src" / "deep" / "k.cu")
    text = "\n".join(cfg.problems)
    assert f"{r / 'astra.toml'}:1: `backend = 'tpu'` ignored" in text
    assert "unknown key `rounds_typo`" in text
    assert f"{r / 'astra.toml'}:4: `llm.api_key` refused: keys never belong in a project file" in text
    assert "llm.base_url" in text and "llm.base_url" not in cfg.values
    assert "sk-live-123" not in text and not cfg.values


def test_clangd_and_compile_flags_give_flags_and_the_arch(tmp_path):
    r = repo(tmp_path)
    (r / "compile_flags.txt").write_text("-Iinclude\n-DFROM_FLAGS=1\n-I/etc\n--use_fast_math\n")
    (r / ".clangd").write_text("CompileFlags:\n  Add: [--cuda-gpu-arch=sm_80, -DEVERYWHERE]\n---\n"
                               "If:\n  PathMatch: other/.*\nCompileFlags:\n  Add: [-DONLY_OTHER]\n---\n"
                               "If:\n  PathMatch: src/.*\nCompileFlags:\n  Add: -std=c++20\n")
    path = str(r / "src" / "deep" / "k.cu")
    cfg = config.load(path)
    assert cfg.arch() == config.Value("sm_80", str(r / ".clangd"))
    assert config.effective(cfg)["arch"].value == "sm_80"
    ctx = api.project_context(path)
    names = [n for n, _ in ctx.defines]
    assert names == ["FROM_FLAGS", "EVERYWHERE"] and ctx.std == "c++20" and "--use_fast_math" in ctx.flags
    assert ctx.include_dirs == (str(r / "include"),)
    assert "-I/etc (outside the project)" in ctx.ignored          # a cloned repository opens no system folder


def test_precedence_cli_then_settings_then_project_file_then_compile_commands(tmp_path):
    from astra_cuda.compile import project
    r = repo(tmp_path)
    (r / "astra.toml").write_text('defines = ["A=project"]\nstd = "c++14"\n')
    (r / "compile_commands.json").write_text(json.dumps([{"directory": str(r), "file": "src/deep/k.cu",
                                                          "command": "nvcc -DA=db -DB=db -std=c++11 -c src/deep/k.cu"}]))
    path = str(r / "src" / "deep" / "k.cu")
    ctx = api.project_context(path)
    assert dict(ctx.defines) == {"A": "project", "B": "db"} and ctx.std == "c++14"
    ctx = api.project_context(path, settings=project.from_flags((), ("A=settings",), None, origin="settings"))
    assert dict(ctx.defines)["A"] == "settings"
    ctx = api.project_context(path, cli=project.from_flags((), ("A=cli",), None, origin="command line"),
                              settings=project.from_flags((), ("A=settings",), None, origin="settings"))
    assert dict(ctx.defines)["A"] == "cli"


def test_a_project_file_names_compile_commands_relative_to_itself(tmp_path):
    r = repo(tmp_path)
    (r / "out").mkdir()
    (r / "out" / "cc.json").write_text(json.dumps([{"directory": str(r), "file": "src/deep/k.cu",
                                                    "command": "nvcc -DFROM_DB -c src/deep/k.cu"}]))
    (r / "astra.toml").write_text('compile_commands = "out/cc.json"\n')
    assert ("FROM_DB", None) in api.project_context(str(r / "src" / "deep" / "k.cu")).defines


def test_an_endpoint_from_a_project_file_needs_consent(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(config.TRUST_ENV, raising=False)
    r = repo(tmp_path)
    (r / "astra.toml").write_text('[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    f = r / "src" / "deep" / "k.cu"
    code = cli.main(["optimize", str(f), "--kernel", "k", "--backend", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "comes from" in err and "a project file" in err and config.TRUST_ENV in err
    assert config.endpoint_allowed("command line") and not config.endpoint_allowed(f"{r}/astra.toml:2")
    assert config.endpoint_allowed(f"{r}/astra.toml:2", consent="http://x/v1", base_url="http://x/v1")
    monkeypatch.setenv(config.TRUST_ENV, "1")
    assert config.endpoint_allowed(f"{r}/astra.toml:2")


def test_astra_config_prints_every_value_and_its_source(tmp_path, capsys):
    r = repo(tmp_path)
    (r / "pyproject.toml").write_text('[tool.astra]\nbackend = "cpu"\ninclude = ["include"]\n')
    (r / "compile_flags.txt").write_text("-DX\n")
    f = r / "src" / "deep" / "k.cu"
    assert cli.main(["config", str(f), "-D", "FROM_CLI"]) == 0
    out = capsys.readouterr().out
    assert f"backend               cpu  ({r / 'pyproject.toml'}:2)" in out
    assert "budgets.rounds        5  (default)" in out
    assert "defines FROM_CLI (from command line)" in out and f"(from {r / 'compile_flags.txt'})" in out
    assert cli.main(["config", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config_file"] == str(r / "pyproject.toml") and d["values"]["backend"] == {
        "value": "cpu", "source": f"{r / 'pyproject.toml'}:2"}
    assert d["llm_endpoint_allowed"] is True and len(d["compile"]) == 2


@pytest.mark.parametrize("text", ['backend = [', "a" * (config.MAX_FILE_BYTES + 10)])
def test_a_broken_or_huge_project_file_is_said_never_fatal(tmp_path, text):
    r = repo(tmp_path)
    (r / "astra.toml").write_text(text)
    cfg = config.load(r / "src" / "deep" / "k.cu")
    assert cfg.problems and not cfg.values
    api.project_context(str(r / "src" / "deep" / "k.cu"))   # still a context
