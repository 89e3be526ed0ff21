"""A scripted OpenAI-compatible server on 127.0.0.1 (stdlib http.server in a thread) speaking
the chat-completions wire format, so tests drive the agents through the real `openai` client.

Replies are queued per agent (the planner's and the coder's system prompts differ):
    {"content": "...", "finish_reason": "stop"}   a normal reply
    {"status": 429} / {"status": 500}              an HTTP error
    {"sleep": 3.0, "content": "..."}               a slow reply (client timeout)
An empty queue answers with an off-topic sentence."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    def __init__(self):
        self.queues: dict[str, list[dict]] = {"planner": [], "coder": []}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output quiet
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                with owner.lock:
                    owner.requests.append({"body": body, "headers": {k.lower(): v for k, v in self.headers.items()}})
                role = owner.role_of(body)
                with owner.lock:
                    q = owner.queues[role]
                    action = q.pop(0) if q else {"content": "I like turtles."}
                if action.get("sleep"):
                    time.sleep(action["sleep"])
                if "raw" in action:   # a body of the endpoint's own making, whatever its shape
                    self._json(200, action["raw"])
                    return
                status = action.get("status", 200)
                if status != 200:
                    self._json(status, {"error": {"message": f"scripted {status}", "type": "scripted",
                                                  "code": status}},
                               {"retry-after-ms": "10"} if status == 429 else None)
                    return
                content = action.get("content", "")
                self._json(200, {
                    "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": action.get("finish_reason", "stop")}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": max(1, len(content) // 4),
                              "total_tokens": 100 + max(1, len(content) // 4)}})

            def _json(self, status, obj, headers=None):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def role_of(body: dict) -> str:
        system = next((m["content"] for m in body.get("messages", []) if m["role"] in ("system", "developer")), "")
        return "planner" if "planning agent" in system else "coder"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, role: str, *actions: dict) -> None:
        with self.lock:
            self.queues[role].extend(actions)

    def calls(self, role: str) -> list[dict]:
        return [r for r in self.requests if self.role_of(r["body"]) == role]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def reply(code: str, lang: str = "cuda", note: str = "Applied the plan.") -> dict:
    return {"content": f"{note}\n\n```{lang}\n{code}\n```\n"}


def plan(title: str) -> dict:
    return {"content": f"Plan: {title}\nWhat to change: see title.\nExpected effect: faster."}
