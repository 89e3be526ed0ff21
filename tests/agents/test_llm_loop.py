"""The whole loop in LLM mode on the CPU backend, through the real `openai` client against a
scripted chat-completions server: adoption, repair, refusal, bad replies, timeouts, 429s and
cancellation."""
import threading

import pytest

from astra_cuda.agents import LLMConfig, optimize

from agent_helpers import silu_evaluator
from scripted_llm import ScriptedLLM, plan, reply

SIG = "__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, const int d) {"
GOOD = SIG + """
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(__fdividef(x, 1.0f + __expf(-x)) * y);
  }
}"""
BROKEN = GOOD.replace("const float y", "flot y")
CHEAT = GOOD.replace("i < d;", "i < (d & ~7);")   # drops the tail: wrong when d % 8 != 0


@pytest.fixture(scope="module")
def silu():
    return silu_evaluator()


@pytest.fixture
def llm():
    with ScriptedLLM() as srv:
        yield srv


def run(silu, srv, tmp_path, rounds=1, **kw):
    text, path, kernel, sp, ev = silu
    cfg = LLMConfig(model="scripted", base_url=srv.base_url, timeout_s=kw.pop("timeout_s", 20),
                    max_retries=kw.pop("max_retries", 0))
    return optimize(text, path, kernel, ev, rounds=rounds, llm=cfg, spec=sp, runs_dir=tmp_path, **kw)


def test_correct_rewrite_adopted(silu, llm, tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_API_KEY", "sk-secret-test-key-123")
    llm.script("planner", plan("fast-math SiLU"))
    llm.script("coder", reply(GOOD))
    r = run(silu, llm, tmp_path)
    assert [x.outcome for x in r.rounds] == ["adopted"], r.summary_markdown()
    assert r.improved and "__expf(-x)" in r.best_kernel_source
    assert "int main()" in r.best and "/* @astra" in r.best      # the rest of the file is kept
    assert not r.measured and "not measured" in r.speed_note
    # portability: a local server gets the system role and max_tokens
    body = llm.calls("coder")[0]["body"]
    assert body["messages"][0]["role"] == "system" and "max_tokens" in body
    assert llm.calls("coder")[0]["headers"]["authorization"] == "Bearer sk-secret-test-key-123"
    # the key is never written to the run log
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert "sk-secret" not in f.read_text(errors="replace"), f
    assert (tmp_path / r.run_id / "round-01" / "candidate.cu").exists()
    transcript = (tmp_path / r.run_id / "round-01" / "llm.json").read_text()
    assert "fast-math SiLU" in transcript and "```cuda" in transcript
    # one edit turns the original into the best (what the editor applies)
    e = r.to_json()["text_edit"]
    lines = r.original.split("\n")
    off = lambda p: sum(len(x) + 1 for x in lines[:p[0]]) + p[1]  # noqa: E731
    start, end = off(e["range"]["start"]), off(e["range"]["end"])
    assert r.original[:start] + e["new_text"] + r.original[end:] == r.best


def test_compile_error_then_repair(silu, llm, tmp_path):
    llm.script("planner", plan("fast-math SiLU"))
    llm.script("coder", reply(BROKEN), reply(GOOD))
    r = run(silu, llm, tmp_path)
    assert r.rounds[0].outcome == "adopted" and r.rounds[0].attempts == 2
    repair_prompt = llm.calls("coder")[1]["body"]["messages"][-1]["content"]
    assert "rejected" in repair_prompt and "flot" in repair_prompt   # the compiler's message went back


def test_cheating_rewrite_refused(silu, llm, tmp_path):
    llm.script("planner", plan("skip the remainder"))
    llm.script("coder", reply(CHEAT), reply(CHEAT), reply(CHEAT))
    r = run(silu, llm, tmp_path)
    assert r.rounds[0].outcome == "failed" and r.rounds[0].attempts == 3
    assert not r.improved and r.best == r.original


def test_junk_empty_and_truncated_replies(silu, llm, tmp_path):
    llm.script("planner", plan("fast-math SiLU"), plan("fast-math SiLU"))
    llm.script("coder", {"content": "I like turtles."}, {"content": ""},            # round 1: gives up
               {"content": "```cuda\n" + GOOD[:80], "finish_reason": "length"}, reply(GOOD))  # round 2
    r = run(silu, llm, tmp_path, rounds=2)
    assert r.rounds[0].outcome == "no candidate" and "empty" in r.rounds[0].reason
    assert r.rounds[1].outcome == "adopted"
    sharper = llm.calls("coder")[1]["body"]["messages"][-1]["content"]
    assert "could not be used" in sharper and "no ```cuda code block" in sharper
    assert "cut off" in llm.calls("coder")[3]["body"]["messages"][-1]["content"]


def test_timeout_gives_up_the_round(silu, llm, tmp_path):
    llm.script("planner", plan("fast-math SiLU"))
    llm.script("coder", {"sleep": 3.0, "content": "late"})
    r = run(silu, llm, tmp_path, timeout_s=1.0)
    assert r.rounds[0].outcome == "no candidate" and "timeout" in r.rounds[0].reason
    assert r.best == r.original


def test_rate_limit_then_success(silu, llm, tmp_path):
    llm.script("planner", plan("fast-math SiLU"))
    llm.script("coder", {"status": 429}, reply(GOOD))
    r = run(silu, llm, tmp_path, max_retries=2)   # the client retries a 429 by itself
    assert r.rounds[0].outcome == "adopted"
    assert len(llm.calls("coder")) == 2


def test_planner_failure_falls_back_to_offline_idea(silu, llm, tmp_path):
    llm.script("planner", {"status": 500}, {"content": ""})
    llm.script("coder", reply(GOOD))
    r = run(silu, llm, tmp_path)
    assert r.rounds[0].plan.source == "offline-fallback" and r.rounds[0].outcome == "adopted"


def test_cancel_mid_run_keeps_best(silu, llm, tmp_path):
    cancel = threading.Event()
    llm.script("planner", plan("fast-math SiLU"), plan("more"), plan("more"))
    llm.script("coder", reply(GOOD), reply(GOOD.replace("__fdividef(x, 1.0f + __expf(-x))",
                                                        "x / (1.0f + __expf(-x))")))

    def progress(p):
        if p.step == "adopted":
            cancel.set()

    r = run(silu, llm, tmp_path, rounds=3, cancel=cancel, progress=progress)
    assert r.cancelled and len(r.rounds) == 1 and "cancelled" in r.stopped
    assert r.best == r.rounds[0].candidate and r.improved


def test_openai_style_request_and_reasoning_effort(llm):
    from astra_cuda.agents.llm import LLMClient
    llm.script("coder", {"content": "hello"})
    cfg = LLMConfig(model="o4-mini", base_url=llm.base_url, openai_style=True, reasoning_effort="low",
                    api_key="k", max_retries=0)
    reply = LLMClient(cfg).chat("sys", "user")
    assert reply.ok and reply.text == "hello" and reply.usage.prompt_tokens == 100
    body = llm.requests[-1]["body"]
    assert body["messages"][0]["role"] == "developer" and "max_completion_tokens" in body
    assert body["reasoning_effort"] == "low" and "temperature" not in body and "max_tokens" not in body


def test_server_errors_never_raise(llm):
    from astra_cuda.agents.llm import LLMClient
    llm.script("coder", {"status": 500})
    reply = LLMClient(LLMConfig(model="m", base_url=llm.base_url, max_retries=0)).chat("s", "u")
    assert not reply.ok and reply.error.startswith("HTTP 500")
    dead = LLMClient(LLMConfig(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2)).chat("s", "u")
    assert not dead.ok and "connection" in dead.error


@pytest.mark.parametrize("raw", [
    {"id": "x", "choices": "this is not a list", "usage": 7},
    {"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": 5}}]},
    {"id": "x", "choices": [{"index": 0, "message": {"content": "hi"}}], "usage": {"prompt_tokens": "many"}},
    ["not", "an", "object"],
])
def test_a_reply_of_the_wrong_shape_is_an_error_not_a_crash(llm, raw):
    # Found by the real-model test's garbage proxy: the SDK does not validate a body's shape.
    from astra_cuda.agents.llm import LLMClient
    llm.script("coder", {"raw": raw})
    reply = LLMClient(LLMConfig(model="m", base_url=llm.base_url, max_retries=0)).chat("s", "u")
    assert not reply.ok and reply.error, reply


def test_token_limit_stops_the_run(silu, llm, tmp_path):
    from astra_cuda.agents import Limits
    llm.script("planner", plan("fast-math SiLU"), plan("again"))
    llm.script("coder", reply(GOOD))
    # The planner's call counts 118 tokens (under 150): the coder's call may still start; after
    # it no call starts (the client refuses one past the budget) and the run stops.
    r = run(silu, llm, tmp_path, rounds=3, limits=Limits(max_tokens=150))
    assert len(r.rounds) == 1 and "token limit" in r.stopped and r.improved
    assert len(llm.requests) == 2


def test_patience_stops_an_unhelpful_model(silu, llm, tmp_path):
    llm.script("planner", *[plan(f"idea {i}") for i in range(5)])
    r = run(silu, llm, tmp_path, rounds=5)      # the coder's queue is empty: off-topic replies only
    assert len(r.rounds) == 3 and "3 rounds in a row" in r.stopped
    assert all(x.outcome == "no candidate" for x in r.rounds) and r.best == r.original


def test_openai_without_a_key_is_a_clear_error(silu, monkeypatch):
    from astra_cuda.errors import AstraError
    for name in ("ASTRA_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    text, path, kernel, sp, _ = silu
    calls = []
    with pytest.raises(AstraError, match="ASTRA_API_KEY"):
        optimize(text, path, kernel, calls.append, llm=LLMConfig(model="gpt-x"), spec=sp)
    assert calls == []   # failed before anything ran
