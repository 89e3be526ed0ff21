"""End-to-end tests of the language server over stdio, offline (CPU backend, no LLM)."""
from __future__ import annotations

import asyncio
import time

import pytest
from lsprotocol import converters, types

from conftest import Doc, apply_edit, configure, until

ERR = types.DiagnosticSeverity.Error
WRONG = ("silu(x) * y", "silu(x) + y")  # a plausible bug: the gate must catch it


def errors(diags):
    return [d for d in diags if d.severity == ERR]


async def test_compile_error_on_open_at_its_line(client, example):
    path = example()
    text = path.read_text().replace("const float y =", "BROKEN_undefined_name += 1;\n    const float y =", 1)
    doc = Doc(client, path, text)
    bad = doc.line_of("BROKEN_undefined_name")
    diags = await doc.diagnostics_where(lambda ds: errors(ds), timeout=60)
    assert any(d.range.start.line == bad for d in errors(diags)), diags
    assert any("BROKEN_undefined_name" in d.message for d in errors(diags)), diags


async def test_check_on_save_reports_wrong_kernel_and_clears_when_fixed(client, example):
    path = example()
    doc = Doc(client, path)
    # The first check pins this version as the reference; a correct file has no errors.
    lenses = []
    async def verified():
        nonlocal lenses
        lenses = await doc.lenses()
        # the first check has nothing to compare with: it says so
        return any("self-consistent" in (l.command.title if l.command else "") for l in lenses)
    end = time.monotonic() + 240
    while not await verified():
        titles = [l.command.title for l in lenses]
        assert time.monotonic() < end and not any("✗" in t for t in titles), (titles, doc.diagnostics())
        await asyncio.sleep(0.2)
    assert not errors(doc.diagnostics())

    doc.save(doc.text.replace(*WRONG))
    diags = await doc.diagnostics_where(lambda ds: any(d.code == "check" for d in errors(ds)), timeout=240)
    msg = next(d for d in diags if d.code == "check").message
    assert "silu_and_mul" in msg and "cpu" in msg  # which kernel, which backend judged
    assert "ran on " in msg                         # and where (a node, or this machine)
    await until(lambda: any(getattr(s, "where", "").startswith("on ") for s in client.statuses), 30)

    doc.save(doc.text.replace(WRONG[1], WRONG[0]))
    await doc.diagnostics_where(lambda ds: not errors(ds), timeout=240)


async def test_hover_and_code_lens_on_a_kernel(client, example):
    doc = Doc(client, example())
    line = doc.line_of("__global__ void silu_and_mul")
    col = doc.text.splitlines()[line].index("silu_and_mul")
    hover = await doc.hover(line, col + 2)
    assert hover is not None and "silu_and_mul" in hover.contents.value
    assert await doc.hover(line, 0) is None  # not on the name: no report
    lenses = await doc.lenses()
    titles = [l.command.title for l in lenses]
    assert any(t.startswith("Optimize") for t in titles) and "Profile" in titles
    spec_line = doc.line_of("/* @astra")
    assert {l.range.start.line for l in lenses} == {spec_line}  # above the kernel and its spec


async def test_optimize_then_apply_lazily_with_progress(client, example):
    doc = Doc(client, example())
    line = doc.line_of("__global__ void silu_and_mul")
    titles = [a.title for a in await doc.actions(line)]
    assert "Optimize kernel `silu_and_mul`" in titles
    assert not any(t.startswith("Apply") for t in titles)

    client.messages.clear()
    result = await doc.command("astra_cuda.lsp.optimize", "silu_and_mul")
    assert result["status"] == "done" and result["improved"], result
    # how it ended is the answer's: the client's one ending offers the preview (no second message)
    assert not [m.message for m in client.messages if "silu_and_mul" in m.message], client.messages
    # Work-done progress: begin, reports, end.
    kinds = [type(v).__name__ for reps in client.progress_reports.values() for v in reps]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd"

    actions = await doc.actions(line)
    # No GPU: the rewrite's speed is unknown, so it is never the preferred action or the lens's
    apply = next(a for a in actions if a.kind == types.CodeActionKind.RefactorRewrite)
    assert apply.edit is None and not apply.is_preferred
    assert f"verified correct on {result['verifiedCases']} cases, speed unknown — measure on a GPU" in apply.title
    lens = next(l.command for l in await doc.lenses() if l.command.title.startswith("Rewrite verified correct"))
    assert lens.command == "astra.showReport"
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is not None
    assert resolved.edit.document_changes[0].text_document.version == doc.version
    # VS Code's refactor preview: the edit carries a change annotation that needs confirmation
    (note,) = resolved.edit.change_annotations.values()
    assert note.needs_confirmation and "speed unknown" in note.description
    # the palette's and the lens's apply (astra.applyOptimized asks optimizedEdit) preview the same edit
    palette = await doc.command("astra_cuda.lsp.optimizedEdit", "silu_and_mul")
    assert palette["status"] == "ok" and palette["measured"] is False
    assert palette["edit"] == converters.get_converter().unstructure(resolved.edit)
    new = apply_edit(doc.text, resolved.edit)
    assert new != doc.text and "__global__ void silu_and_mul" in new
    assert new.startswith(doc.text[:doc.text.index("__device__")])  # the rest of the file kept
    assert new.endswith(doc.text[doc.text.index("int main()"):])
    # Applied, the action is gone and the lens says so.
    doc.change(new)
    assert not any(a.title.startswith("Apply") for a in await doc.actions(line))
    assert any("optimized version in place" in l.command.title for l in await doc.lenses())


async def test_rewrite_is_reanchored_or_declined_after_concurrent_edits(client, example):
    doc = Doc(client, example())
    line = doc.line_of("__global__ void silu_and_mul")
    result = await doc.command("astra_cuda.lsp.optimize", "silu_and_mul")
    assert result["status"] == "done", result
    apply = next(a for a in await doc.actions(line) if a.title.startswith("Apply"))

    # The user adds lines above the kernel: the kernel is unchanged, so the edit moves with it.
    doc.change("// a note typed meanwhile\n// another\n" + doc.text)
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is not None
    assert resolved.edit.document_changes[0].text_document.version == doc.version
    new = apply_edit(doc.text, resolved.edit)
    assert new.startswith("// a note typed meanwhile\n// another\n")
    assert new.endswith(doc.text[doc.text.index("int main()"):])

    # The user edits the kernel itself: applying would lose their edit, so it is declined.
    doc.change(doc.text.replace("const int64_t token", "const long long token"))
    client.messages.clear()
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is None
    await until(lambda: client.messages, 5)
    assert "edited after the optimization" in client.messages[-1].message
    disabled = next(a for a in await doc.actions(line + 2) if a.title.startswith("Apply"))
    assert disabled.disabled is not None


async def test_cancel_from_progress_and_stay_responsive(client, example):
    doc = Doc(client, example())
    line = doc.line_of("__global__ void silu_and_mul")
    col = doc.text.splitlines()[line].index("silu_and_mul")
    await configure(client, backend="cpu", rounds=50)
    task = asyncio.ensure_future(doc.command("astra_cuda.lsp.optimize", "silu_and_mul"))
    await until(lambda: client.progress_reports, 60)
    token = next(iter(client.progress_reports))
    # While it runs, hovers, lenses and code actions answer quickly.
    worst = 0.0
    for _ in range(10):
        t0 = time.perf_counter()
        await doc.hover(line, col)
        await doc.lenses()
        await doc.actions(line)
        worst = max(worst, time.perf_counter() - t0)
        await asyncio.sleep(0.05)
    assert worst < 2.0, worst  # an optimization takes minutes; an answer waiting for it would show
    assert any(l.command.title.startswith("Optimizing") for l in await doc.lenses())
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(task, 120)
    assert result["status"] == "cancelled", result


async def test_add_spec_to_a_kernel_without_one(client, tmp_path):
    path = tmp_path / "scale.cu"
    path.write_text("__global__ void scale(float* out, const float* in, int n) {\n"
                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) out[i] = 2.0f * in[i];\n}\n")
    doc = Doc(client, path)
    actions = await doc.actions(1)
    spec = next(a for a in actions if a.title.startswith("Add harness spec"))
    assert spec.edit is None
    resolved = await client.code_action_resolve_async(spec)
    new = apply_edit(doc.text, resolved.edit)
    assert new.startswith("/* @astra") and new.endswith(doc.text)


async def test_add_spec_answers_its_diagnostic_and_marks_what_it_guessed(client, tmp_path):
    path = tmp_path / "scale.cu"
    path.write_text("__global__ void scale(float* out, const float* in, float a, int n) {\n"
                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) out[i] = a * in[i];\n}\n")
    doc = Doc(client, path)
    diags = await doc.diagnostics_where(lambda ds: any(d.code == "no-spec" for d in ds))
    hint = next(d for d in diags if d.code == "no-spec")
    assert hint.code_description.href.endswith("docs/diagnostics.md#no-spec")
    def apply(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        doc.change(apply_edit(doc.text, params.edit))   # as the editor does: the edit becomes a new version
        return types.ApplyWorkspaceEditResult(applied=True)
    client.feature(types.WORKSPACE_APPLY_EDIT)(apply)
    assert (await doc.command("astra_cuda.lsp.addSpec", "scale"))["status"] == "done"
    # the client applied the edit (workspace/applyEdit); the server marks each guessed line
    guessed = await doc.diagnostics_where(lambda ds: any(d.code == "spec-guess" for d in ds), timeout=120)
    notes = [d for d in guessed if d.code == "spec-guess"]
    lines = doc.text.splitlines()
    assert any(lines[d.range.start.line].lstrip().startswith("a ") and "`a`" in d.message for d in notes), \
        [(lines[d.range.start.line], d.message) for d in notes]
    assert not any(d.code == "no-spec" for d in guessed)
    # editing a guessed line clears its note
    line = next(d.range.start.line for d in notes if "`a`" in d.message)
    edited = lines[:]
    edited[line] = 'a = "2.5"'
    doc.change("\n".join(edited) + "\n")
    await doc.diagnostics_where(lambda ds: not any(d.code == "spec-guess" and "`a`" in d.message for d in ds))


async def test_the_spec_teaches_itself_completion_and_a_key_level_did_you_mean(client, example):
    path = example()
    doc = Doc(client, path)
    text = doc.text.replace("[sizes]", "[size]", 1)
    doc.change(text)
    diags = await doc.diagnostics_where(lambda ds: any("did you mean 'sizes'" in d.message for d in ds))
    d = next(d for d in diags if "did you mean" in d.message)
    row = doc.text.splitlines()[d.range.start.line]
    assert row[d.range.start.character:d.range.end.character] == "[size]" and d.code == "spec"
    fix = next(a for a in await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri=doc.uri), d.range, types.CodeActionContext(diagnostics=[d]))), 30)
        if a.title == "Change to [sizes]")
    assert apply_edit(doc.text, fix.edit) == doc.text.replace("[size]", "[sizes]", 1)
    line = doc.line_of("out   =")
    col = doc.text.splitlines()[line].index('"half"') + 1
    got = await asyncio.wait_for(client.text_document_completion_async(types.CompletionParams(
        types.TextDocumentIdentifier(uri=doc.uri), types.Position(line=line, character=col))), 30)
    assert {"half", "bfloat16", "float"} <= {i.label for i in got.items}
    outside = await asyncio.wait_for(client.text_document_completion_async(types.CompletionParams(
        types.TextDocumentIdentifier(uri=doc.uri), types.Position(line=doc.line_of("int main"), character=3))), 30)
    assert outside is None


@pytest.mark.parametrize("text", [
    "",
    "\x00\x01\x02 not C at all {{{{ ((((",
    "__global__ void f(float* a) {\n  a[0] = 1.0f;\n",  # unterminated
    "/* @astra\n[sizes\n*/\n__global__ void f(float* a, int n) { if (n) a[0] = 1.0f; }\n",  # bad spec
])
async def test_bad_files_get_diagnostics_not_a_dead_server(client, tmp_path, text):
    path = tmp_path / "bad.cu"
    path.write_text(text)
    doc = Doc(client, path)
    await doc.lenses()
    await doc.hover(0, 0)
    await doc.actions(0)
    await until(lambda: doc.uri in client.diagnostics, 60)
    # Still alive and answering.
    assert isinstance(await doc.lenses(), list)



CRASHING = """/* @astra
grid = ["(n + 255) / 256"]
block = [256]
[sizes]
n = [1000, 4096]
[args]
out = { type = "float", shape = ["n"], output = true }
in  = { type = "float", shape = ["n"] }
n   = "n"
*/
__global__ void wild(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i * 100003 + 77777777] = in[i];
}
"""


async def test_a_crashing_kernel_costs_a_worker_not_the_server(client, tmp_path):
    path = tmp_path / "wild.cu"
    path.write_text(CRASHING)
    doc = Doc(client, path)
    diags = await doc.diagnostics_where(lambda ds: any(d.code == "check" for d in errors(ds)), timeout=240)
    checks = [d for d in diags if d.code == "check"]
    assert any("crashed" in d.message for d in checks), checks
    assert len(checks) <= 6  # capped: five failures and a count of the rest
    hover = await doc.hover(doc.line_of("void wild"), doc.text.splitlines()[doc.line_of("void wild")].index("wild"))
    assert hover is not None and "✗ check failed" in hover.contents.value


async def test_profile_fills_the_code_lens(client, example):
    doc = Doc(client, example())
    result = await doc.command("astra_cuda.lsp.profile", "silu_and_mul")
    assert result["status"] == "done", result
    titles = [l.command.title for l in await doc.lenses()]
    assert result["summary"] in titles and "Profile" not in titles


async def test_check_on_open_and_on_save_follow_their_settings(client, example):
    await configure(client, checkOnOpen=False, checkOnSave=False)
    refreshes = client.lens_refreshes
    doc = Doc(client, example())
    await until(lambda: doc.uri in client.diagnostics, 60)
    # the compile changed the lens's words: the editor is asked to show them again
    await until(lambda: client.lens_refreshes > refreshes, 30)
    assert any(l.command.title == "compiled only — not run" for l in await doc.lenses())
    seen = len(client.statuses)
    doc.save(doc.text.replace(*WRONG))
    # The save was analysed (a new status) without starting a check.
    await until(lambda: any(s.uri == doc.uri for s in client.statuses[seen:]), 60)
    assert not any(s.checking for s in client.statuses if s.uri == doc.uri)
    assert not [d for d in doc.diagnostics() if d.code == "check"]
    assert not any("verified" in l.command.title or "check" in l.command.title for l in await doc.lenses())


async def test_a_newer_save_cancels_the_running_check(client, example):
    from astra_cuda import api
    path = example()
    api.pin(api.snapshot(path.read_text(), str(path)), "silu_and_mul")  # the reference the wrong version is judged by
    doc = Doc(client, path)
    await until(lambda: any(s.uri == doc.uri and s.checking for s in client.statuses), 60)
    await asyncio.sleep(1.0)  # the check of version 1 is running in its worker now
    doc.save(doc.text.replace(*WRONG))
    diags = await doc.diagnostics_where(lambda ds: any(d.code == "check" for d in errors(ds)), timeout=240)
    assert any("silu_and_mul" in d.message for d in diags)
    assert any("was cancelled: a newer save" in m.message for m in client.log_messages)
