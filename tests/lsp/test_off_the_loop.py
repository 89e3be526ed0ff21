"""The language server reads project files off its event loop (issue 28): what reads them — the
server's `effective`, `backend_for`, `project`, `arch` and `machine_status`, and optimization's
`llm_config` (astra.toml, [tool.astra], .clangd, compile_commands.json, the backend probe) — is
never called by a handler itself: it is handed to `ls.call`, which runs it in a pool."""
from __future__ import annotations

import ast
from pathlib import Path

LSP = Path(__file__).resolve().parents[2] / "server" / "astra_cuda" / "lsp"
BLOCKING = {"effective", "backend_for", "project", "arch", "machine_status", "llm_config"}


def direct_calls(tree: ast.AST) -> list[str]:
    """'function:line' for each call of a BLOCKING name made by a function that is not one itself."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name not in BLOCKING:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                    if name in BLOCKING:
                        out.append(f"{fn.name}:{node.lineno}")
    return sorted(set(out))


def test_the_rule_sees_a_direct_call_and_passes_a_handed_one():
    bad = ast.parse("async def h(ls):\n    return ls.backend_for('x.cu')\n")
    good = ast.parse("async def h(ls):\n    return await ls.call(ls.fast, ls.backend_for, 'x.cu')\n")
    assert direct_calls(bad) == ["h:2"] and direct_calls(good) == []


def test_no_handler_reads_project_files_on_the_event_loop():
    found = {p.name: direct_calls(ast.parse(p.read_text())) for p in sorted(LSP.glob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, found
