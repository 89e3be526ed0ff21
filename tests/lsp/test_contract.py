"""The client/server contract (server/astra_cuda/contract.json) is what both sides and package.json
say: the same command names, one default GPU architecture; package.json's configuration is the
settings' one schema, and the server's typed Settings is it, field for field."""
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
PROPS = PACKAGE["contributes"]["configuration"]["properties"]


def test_package_json_lists_the_client_commands():
    listed = {c["command"] for c in PACKAGE["contributes"]["commands"]}
    assert listed == set(contract.CLIENT_COMMANDS.values())


def test_the_server_registers_exactly_the_contract_commands():
    assert set(server.protocol.fm.commands) == set(contract.SERVER_COMMANDS.values())


def test_one_default_gpu_architecture():
    assert settings.Settings().gpu_arch == PROPS["astra.gpuArch"]["default"] == ""   # the GPU's own, else:
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


# ---- one schema for the settings: package.json's configuration, typed by lsp/settings.py

SERVER_SETTINGS = sorted(k.removeprefix("astra.") for k in PROPS if k.removeprefix("astra.") not in settings.CLIENT_ONLY)
JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": tuple}


def test_every_package_json_setting_is_a_settings_field_and_every_field_a_setting():
    assert sorted(settings.FIELDS) == SERVER_SETTINGS
    assert set(settings.CLIENT_ONLY) <= {k.removeprefix("astra.") for k in PROPS}
    others = {f.name for f in dataclasses.fields(settings.Settings)} - {f.name for f in settings.FIELDS.values()}
    assert others == {"llm_api_key", "allow_execution"}   # never a workspace's to set
    for key, f in settings.FIELDS.items():
        # the field is the setting in snake case: 'llm.baseUrl' -> llm_base_url
        assert f.name == re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).replace(".", "_").lower(), key


def test_each_fields_type_default_enum_and_limits_are_package_jsons():
    for key, f in settings.FIELDS.items():
        p = PROPS["astra." + key]
        assert JSON_TYPES[p["type"]] is settings.kind(f), key
        if p["type"] == "array":
            assert p["items"] == {"type": "string"}, key
        default = p["default"]
        assert f.default == (tuple(default) if isinstance(default, list) else default), key
        assert type(f.default) is settings.kind(f), key
        assert f.metadata["enum"] == (tuple(p["enum"]) if "enum" in p else None), key
        assert (f.metadata["minimum"], f.metadata["maximum"]) == (p.get("minimum"), p.get("maximum")), key


def test_the_server_takes_what_package_json_allows_and_refuses_the_rest():
    for key in SERVER_SETTINGS:
        p = PROPS["astra." + key]
        ok = lambda v, key=key: not settings.Settings().updated({key: v})[1]  # noqa: E731
        assert ok(p["default"]), key
        for v in p.get("enum", []):
            assert ok(v), (key, v)
        if "enum" in p:
            assert not ok("not-" + p["enum"][-1]), key
        if "minimum" in p:
            assert ok(p["minimum"]) and not ok(p["minimum"] - 1), key
        if "maximum" in p:
            assert ok(p["maximum"]) and not ok(p["maximum"] + 1), key
        wrong = {"string": 3, "integer": "many", "number": "hot", "boolean": "yes", "array": "a"}[p["type"]]
        assert not ok(wrong), key


def test_the_client_copies_no_setting():
    """The server asks for the `astra` section; the client sends none in its initialization options
    and names only the settings it reads itself (how it starts the server, its trace)."""
    src = "".join(p.read_text() for p in (ROOT / "client" / "src").glob("*.ts"))
    named = {k for k in (k.removeprefix("astra.") for k in PROPS) if f'"{k}"' in src or f'"astra.{k}"' in src}
    assert named <= set(settings.CLIENT_ONLY), f"the client names {named - set(settings.CLIENT_ONLY)} by hand"
    assert "initializationOptions: { allowExecution: trusted }" in (ROOT / "client" / "src" / "server.ts").read_text()
    assert "settings" not in json.loads((ROOT / "server" / "astra_cuda" / "contract.json").read_text())


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
