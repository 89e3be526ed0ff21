"""The client/server contract (server/astra_cuda/contract.json) is what both sides and package.json
say: the same command names, one default GPU architecture; package.json's configuration is the
settings' one schema, and the server's typed Settings is it, field for field."""
import dataclasses
import json
import re
from pathlib import Path

from astra_cuda import cli, contract
from astra_cuda.compile import static
from astra_cuda.lsp import answers, answers_ts, settings
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


# ---- the server's answers: dataclasses, from which client/src/contract.ts's interfaces are written

def test_contract_ts_is_written_from_the_answers_and_current():
    ts = (ROOT / "client" / "src" / "contract.ts").read_text()
    assert answers_ts.typescript() in ts, ("client/src/contract.ts is not current: run "
                                           "`python -m astra_cuda.lsp.answers_ts client/src/contract.ts`")
    assert answers_ts.rewritten(ts) == ts   # written again, nothing changes
    for name in answers.INTERFACES:
        assert f"export interface {name}" in ts


def test_each_field_is_written_in_the_clients_names_types_and_optionality():
    ts = answers_ts.typescript()
    assert "export interface DocStatus {" in ts and "export interface EditAnswer<Edit> {" in ts
    for line in ("  startLine: number;", "  optimizing: Optimizing[];", "  gpuSetup: GpuSetup | null;",
                 "  restricted: string | null;", "  where?: string;", "  speedup?: number;",
                 "  bestSpeedup: number | null;", "  edit?: Edit;", "  profilerReports: string[];"):
        assert "\n" + line + "\n" in ts, line
    # a nested answer's interface comes before the one that holds it
    assert ts.index("export interface Optimizing") < ts.index("export interface DocStatus")
    # every field of every answer is one member line
    for cls in (*answers.INTERFACES.values(), answers.Optimizing, answers.GpuSetup):
        body = ts.split(f"export interface {cls.__name__}", 1)[1].split("\n}", 1)[0]
        members = [m.strip().split(":")[0].rstrip("?") for m in body.splitlines()[1:]]
        assert members == [answers.camel(f.name) for f in dataclasses.fields(cls)], cls


def test_an_answer_goes_over_the_wire_in_the_clients_names():
    s = answers.DocStatus("u", False, 0, 1, 0, "1 verified", "", [], ["k"], [answers.Optimizing("k", "round 1", None)],
                          None, answers.GpuSetup("old CuPy", "pip install x"), where="")
    assert s.to_json() == {"uri": "u", "checking": False, "errors": 0, "verified": 1, "failing": 0,
                           "summary": "1 verified", "tooltip": "", "rewrites": [], "profilerReports": ["k"],
                           "optimizing": [{"kernel": "k", "message": "round 1", "bestSpeedup": None}],
                           "restricted": None, "gpuSetup": {"problem": "old CuPy", "fix": "pip install x"},
                           "where": ""}
    assert answers.ProfileAnswer("done", hot_lines=3).to_json() == {"status": "done", "hotLines": 3}
