"""The client/server contract (server/astra_cuda/contract.json) is what both sides and package.json
say: the same command names, the same setting defaults, one default GPU architecture."""
import dataclasses
import json
import re
from pathlib import Path

from astra_cuda import cli, contract
from astra_cuda.compile import static
from astra_cuda.lsp import answers, settings
from astra_cuda.lsp.server import server

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = json.loads((ROOT / "package.json").read_text())


def test_package_json_lists_the_client_commands():
    listed = {c["command"] for c in PACKAGE["contributes"]["commands"]}
    assert listed == set(contract.CLIENT_COMMANDS.values())


def test_package_json_shows_the_contract_defaults():
    props = PACKAGE["contributes"]["configuration"]["properties"]
    assert {k.removeprefix("astra."): v["default"] for k, v in props.items()} == contract.SETTINGS
    assert props["astra.backend"]["enum"] == list(settings.BACKENDS)


def test_the_server_registers_exactly_the_contract_commands():
    assert set(server.protocol.fm.commands) == set(contract.SERVER_COMMANDS.values())


def test_one_default_gpu_architecture():
    assert settings.Settings().gpu_arch == contract.SETTINGS["gpuArch"] == ""   # the GPU's own, else:
    assert static.DEFAULT_ARCH == contract.DEFAULT_ARCH == "sm_90"
    check = cli.build_parser().parse_args(["check", "x.cu"])
    assert check.arch is None   # the GPU's own architecture, else the default (below)


def test_the_cli_takes_the_gpus_architecture_else_the_default(monkeypatch):
    from astra_cuda.execution import availability
    from astra_cuda.execution.jobs import BackendStatus
    for gpu, want in ((BackendStatus(True, "H100", arch="sm_90a"), "sm_90a"),
                      (BackendStatus(False, "no GPU"), contract.DEFAULT_ARCH)):
        monkeypatch.setattr(availability.Availability, "statuses", lambda self, ex, gpu=gpu: {"gpu": gpu, "cpu": BackendStatus(True)})
        assert cli._arch(cli.build_parser().parse_args(["check", "x.cu"])) == want


def test_server_defaults_are_the_contract_defaults():
    s = settings.Settings()
    assert (s.backend, s.rounds, s.check_on_save, s.profile_ncu, s.llm_model, s.std) == (
        contract.SETTINGS["backend"], contract.SETTINGS["rounds"], contract.SETTINGS["checkOnSave"],
        contract.SETTINGS["profile.ncu"], contract.SETTINGS["llm.model"], contract.SETTINGS["std"])


def test_the_client_reads_names_and_defaults_from_the_contract():
    src = "".join(p.read_text() for p in (ROOT / "client" / "src").glob("*.ts"))
    assert '"astra_cuda.lsp.' not in src and '"sm_90"' not in src  # spelled only in contract.json
    assert "server/astra_cuda/contract.json" in (ROOT / "client" / "src" / "contract.ts").read_text()


def test_one_version_everywhere():
    import tomllib

    import astra_cuda
    from astra_cuda.lsp.server import _version
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert astra_cuda.__version__ == pyproject == PACKAGE["version"] == _version() != "0"


# ---- one schema for the settings: contract.json, package.json, client/src/settings.ts, lsp/settings.py

SERVER_SETTINGS = sorted(set(contract.SETTINGS) - set(settings.CLIENT_ONLY))


def test_the_server_structures_every_contract_setting_with_its_default():
    fields = {f.name: f for f in dataclasses.fields(settings.Settings)}
    assert sorted(settings.RULES) == SERVER_SETTINGS
    for key in SERVER_SETTINGS:
        default = contract.SETTINGS[key]
        assert getattr(settings.Settings(), settings.field_of(key)) == (
            tuple(default) if isinstance(default, list) else default), key
        assert settings.field_of(key) in fields
    assert set(settings.CLIENT_ONLY) <= set(contract.SETTINGS)


def test_package_json_limits_are_what_the_server_accepts():
    props = PACKAGE["contributes"]["configuration"]["properties"]
    for key in SERVER_SETTINGS:
        p = props["astra." + key]
        ok = lambda v, key=key: not settings.Settings().updated({key: v})[1]  # noqa: E731
        kind, _ = settings.RULES[key]
        assert {"string": str, "integer": int, "number": float, "boolean": bool, "array": tuple}[p["type"]] is kind, key
        for v in p.get("enum", []):
            assert ok(v), (key, v)
        if "enum" in p:
            assert not ok("not-" + p["enum"][-1]), key
        if "minimum" in p:
            assert ok(p["minimum"]) and not ok(p["minimum"] - 1), key
        if "maximum" in p:
            assert ok(p["maximum"]) and not ok(p["maximum"] + 1), key


def test_the_client_sends_every_setting_by_the_contracts_names():
    src = (ROOT / "client" / "src" / "settings.ts").read_text()
    assert "Object.keys(SETTING_DEFAULTS)" in src
    by_hand = [k for k in SERVER_SETTINGS if f'"{k}"' in src or f"'{k}'" in src]
    assert not by_hand, f"settings.ts names {by_hand} by hand: they come from the contract"
    # What it sends (flat names) is what the server reads: every setting, the cluster too.
    sent = {key: contract.SETTINGS[key] for key in contract.SETTINGS}
    sent["cluster"] = "local"
    s, problems = settings.Settings().updated(sent)
    assert not problems and s.cluster == "local"


# ---- the server's answers: dataclasses whose fields are client/src/contract.ts's interfaces

def _split_top(body: str) -> list[str]:
    """`a: T; b?: { c: U; d: V }[]` -> its members, split at the `;` outside braces."""
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == ";" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in parts + [cur] if p.strip()]


def _members(body: str) -> dict[str, tuple[bool, str]]:
    """name -> (optional, type) of an interface's or an object type's members."""
    out = {}
    for member in _split_top(body):
        name, _, kind = member.partition(":")
        out[name.strip().rstrip("?")] = (name.strip().endswith("?"), kind.strip())
    return out


def ts_interfaces() -> dict[str, dict[str, tuple[bool, str]]]:
    src = (ROOT / "client" / "src" / "contract.ts").read_text()
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    out = {}
    for m in re.finditer(r"export interface (\w+)(?:<[^>]*>)? \{", src):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        out[m.group(1)] = _members(src[m.end():i - 1])
    return out


def _fields(cls) -> dict[str, bool]:
    return {answers.camel(f.name): bool(f.metadata.get("optional")) for f in dataclasses.fields(cls)}


def test_every_answer_is_a_dataclass_with_the_clients_fields():
    ts = ts_interfaces()
    assert set(answers.INTERFACES) == set(ts)
    for name, cls in answers.INTERFACES.items():
        assert _fields(cls) == {k: opt for k, (opt, _) in ts[name].items()}, name
    nested = {("DocStatus", "optimizing"): answers.Optimizing, ("DocStatus", "gpuSetup"): answers.GpuSetup}
    for (name, member), cls in nested.items():
        kind = ts[name][member][1]
        assert _fields(cls) == {k: opt for k, (opt, _) in _members(kind[kind.index("{") + 1:kind.rindex("}")]).items()}


def test_an_answer_goes_over_the_wire_in_the_clients_names():
    s = answers.DocStatus("u", False, 0, 1, 0, "1 verified", "", [], ["k"], [answers.Optimizing("k", "round 1", None)],
                          None, answers.GpuSetup("old CuPy", "pip install x"), where="")
    assert s.to_json() == {"uri": "u", "checking": False, "errors": 0, "verified": 1, "failing": 0,
                           "summary": "1 verified", "tooltip": "", "rewrites": [], "profilerReports": ["k"],
                           "optimizing": [{"kernel": "k", "message": "round 1", "bestSpeedup": None}],
                           "restricted": None, "gpuSetup": {"problem": "old CuPy", "fix": "pip install x"},
                           "where": ""}
    assert answers.ProfileAnswer("done", hot_lines=3).to_json() == {"status": "done", "hotLines": 3}
