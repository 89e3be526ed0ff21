"""The LLM client: any OpenAI-compatible endpoint through the `openai` package, Chat Completions.

Portability (see the project notes): the `system` role except on OpenAI (`developer`),
`max_tokens` for local servers and `max_completion_tokens` for OpenAI, `reasoning_effort` only
when asked (and then no temperature). A failed call never raises: the Reply says what went wrong.
The API key comes from ASTRA_API_KEY or OPENAI_API_KEY and is never logged or stored.

An endpoint is not trusted either: every response body (a reply or an error) is cut off past
MAX_REPLY_BYTES while it arrives, before anything parses it, and compressed bodies are refused
(a few MB of gzip inflate to gigabytes); text that is not valid Unicode (lone surrogates, which
JSON can carry) has them replaced, so a reply can be logged, parsed and compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from string import Template

from .. import redact
from .records import Usage

KEY_ENV = ("ASTRA_API_KEY", "OPENAI_API_KEY")
MAX_REPLY_BYTES = 4 << 20  # a chat completion's body: 8,192 tokens of code are ~40 KB of JSON


@dataclass(frozen=True)
class LLMConfig:
    model: str
    base_url: str | None = None          # None: OpenAI's API
    timeout_s: float = 120.0
    max_retries: int = 2                 # the openai client's own retries (429, 5xx, connection)
    temperature: float | None = 0.2
    reasoning_effort: str | None = None  # 'low' | 'medium' | 'high' for reasoning models
    max_output_tokens: int = 8192
    api_key: str | None = field(default=None, repr=False)  # else from the environment
    openai_style: bool | None = None     # None: decided from base_url (OpenAI's own API or not)

    @property
    def is_openai(self) -> bool:
        if self.openai_style is not None:
            return self.openai_style
        return self.base_url is None or "api.openai.com" in self.base_url

    def to_json(self) -> dict:  # what the run log records (never the key)
        return {"model": self.model, "base_url": redact.url(self.base_url), "timeout_s": self.timeout_s,
                "max_retries": self.max_retries, "temperature": self.temperature,
                "reasoning_effort": self.reasoning_effort, "max_output_tokens": self.max_output_tokens}


def config_for(mode: str | None = None, model: str | None = None, base_url: str | None = None,
               api_key: str | None = None, *, reasoning_effort: str | None = None, temperature: float | None = None,
               max_output_tokens: int | None = None, timeout_s: float | None = None) -> LLMConfig | None:
    """None for the offline team; an LLMConfig for an OpenAI-compatible endpoint. Without an
    explicit mode, an endpoint is used when a model or base URL is given (or ASTRA_MODEL is set).
    The sampling controls left None keep LLMConfig's defaults."""
    from ..errors import AstraError
    model = model or os.environ.get("ASTRA_MODEL")
    base_url = base_url or os.environ.get("ASTRA_BASE_URL")
    if mode == "offline" or (mode is None and not (model or base_url)):
        return None
    if not model:
        raise AstraError("--llm openai needs a model: --model NAME (or ASTRA_MODEL)")
    cfg = LLMConfig(model=model, base_url=base_url, api_key=api_key, reasoning_effort=reasoning_effort)
    if temperature is not None:
        cfg = dataclasses.replace(cfg, temperature=temperature)
    if max_output_tokens is not None:
        cfg = dataclasses.replace(cfg, max_output_tokens=max_output_tokens)
    if timeout_s is not None:
        cfg = dataclasses.replace(cfg, timeout_s=timeout_s)
    return cfg


@dataclass
class Reply:
    text: str = ""
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None      # 'timeout', 'rate limited', 'HTTP 500: ...', 'connection: ...'
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def api_key(cfg: LLMConfig) -> str:
    if cfg.api_key:
        return cfg.api_key
    for name in KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    # Local servers need no key, but the client insists on a non-empty one.
    return "not-needed" if not cfg.is_openai else ""


class LLMClient:
    """One run's client. `token_budget` (tokens, as the endpoint reports them) and `deadline`
    (time.monotonic()) are the run's budgets: no call starts past either, and a reply may not be
    longer than the tokens left, nor a call longer than the time left."""

    def __init__(self, cfg: LLMConfig, *, token_budget: int | None = None, deadline: float | None = None):
        import openai
        self.cfg = cfg
        self.token_budget, self.deadline, self.tokens_used = token_budget, deadline, 0
        key = api_key(cfg)
        if not key:
            from ..errors import AstraError
            raise AstraError("no API key for OpenAI: set ASTRA_API_KEY or OPENAI_API_KEY "
                             "(or give --base-url for a local server)")
        self._openai = openai
        redact.remember(key)  # echoed back in an error, it is masked wherever Astra shows it
        self.transcript: list[dict] = []  # every exchange (never the key), for the run log
        self._client = openai.OpenAI(base_url=cfg.base_url, api_key=key, timeout=cfg.timeout_s,
                                     max_retries=cfg.max_retries, http_client=_bounded_http(openai))

    def chat(self, system: str, user: str, *, max_tokens: int | None = None) -> Reply:
        cfg = self.cfg
        role = "developer" if cfg.is_openai else "system"
        kwargs: dict = {"model": cfg.model, "messages": [{"role": role, "content": system},
                                                          {"role": "user", "content": user}]}
        limit = max_tokens or cfg.max_output_tokens
        refused = self._over_budget()
        if refused:
            return Reply(error=refused)
        if self.token_budget is not None:
            limit = max(1, min(limit, self.token_budget - self.tokens_used))
        kwargs["max_completion_tokens" if cfg.is_openai else "max_tokens"] = limit
        if self.deadline is not None:
            kwargs["timeout"] = max(1.0, min(cfg.timeout_s, self.deadline - time.monotonic()))
        if cfg.reasoning_effort:
            kwargs["reasoning_effort"] = cfg.reasoning_effort
        elif cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        reply = self._call(kwargs)
        self.tokens_used += reply.usage.tokens
        self.transcript.append({"system": system, "user": user, "reply": reply.text,
                                "finish_reason": reply.finish_reason, "error": reply.error,
                                "usage": reply.usage.to_json(), "seconds": round(reply.seconds, 3)})
        return reply

    def _over_budget(self) -> str:
        if self.token_budget is not None and self.tokens_used >= self.token_budget:
            return f"token budget reached ({self.tokens_used} of {self.token_budget} tokens used)"
        if self.deadline is not None and self.deadline - time.monotonic() < 1.0:
            return "time budget reached"
        return ""

    def _call(self, kwargs: dict) -> Reply:
        o = self._openai
        t0 = time.perf_counter()
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except o.APITimeoutError:
            return Reply(error="timeout", seconds=time.perf_counter() - t0)
        except o.RateLimitError as e:
            return Reply(error=f"rate limited (HTTP 429): {_brief(e)}", seconds=time.perf_counter() - t0)
        except _refused(o) as e:  # before the body was parsed
            return Reply(error=str(e), seconds=time.perf_counter() - t0)
        except o.APIStatusError as e:
            return Reply(error=f"HTTP {e.status_code}: {_brief(e)}", seconds=time.perf_counter() - t0)
        except o.APIConnectionError as e:
            return Reply(error=f"connection failed: {_brief(e)}", seconds=time.perf_counter() - t0)
        except Exception as e:  # a malformed response body, an SDK surprise: never crash a run
            return Reply(error=f"{type(e).__name__}: {_brief(e)}", seconds=time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        try:
            return _read(resp, dt)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:
            # The SDK builds its models without validating them: a body of the wrong shape
            # (`"choices": "text"`, `"usage": 7`) arrives as attributes of the wrong type.
            return Reply(usage=Usage(calls=1), error=f"a malformed reply ({type(e).__name__}: {_brief(e)})", seconds=dt)


def _read(resp, dt: float) -> Reply:
    """The text, finish reason and usage of a chat completion, each checked for its type."""
    usage = Usage(calls=1)
    u = getattr(resp, "usage", None)
    if u is not None:
        prompt, completion = u.prompt_tokens or 0, u.completion_tokens or 0
        if not (isinstance(prompt, int) and isinstance(completion, int)):
            raise TypeError("usage counts that are not integers")
        usage.prompt_tokens, usage.completion_tokens = prompt, completion
    choices = getattr(resp, "choices", None) or []
    if not isinstance(choices, list):
        raise TypeError(f"choices is a {type(choices).__name__}, not a list")
    if not choices:
        return Reply(usage=usage, error="the reply had no choices", seconds=dt)
    msg = choices[0].message
    text = (msg.content or "") if msg is not None else ""
    if not isinstance(text, str):
        raise TypeError(f"the message content is a {type(text).__name__}")
    return Reply(text=valid_text(text), finish_reason=choices[0].finish_reason, usage=usage, seconds=dt)


def valid_text(s: str) -> str:
    """`s` with what UTF-8 cannot hold (lone surrogates, from a JSON `\\ud800`) replaced."""
    return s.encode("utf-8", "replace").decode("utf-8")


def _brief(e: Exception) -> str:
    s = valid_text(redact.text(str(e)))
    return s if len(s) < 300 else s[:300] + "..."


@functools.cache
def _refused(openai) -> type[Exception]:
    """The error for a response refused before it was parsed: an OpenAIError, which the SDK
    raises as it is (never retried, never wrapped)."""

    class ReplyRefused(openai.OpenAIError):
        pass

    return ReplyRefused


def _bounded_http(openai):
    """The SDK's own HTTP client (its defaults), with every response body bounded as it arrives."""
    import httpx2  # the HTTP library openai uses

    refused = _refused(openai)

    class Bounded(httpx2.SyncByteStream):
        def __init__(self, inner, limit: int):
            self.inner, self.limit = inner, limit

        def __iter__(self):
            seen = 0
            for chunk in self.inner:
                seen += len(chunk)
                if seen > self.limit:
                    raise refused(f"the endpoint's reply is larger than {self.limit >> 20} MiB; not read further")
                yield chunk

        def close(self) -> None:
            self.inner.close()

    def bound(response) -> None:
        size = response.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_REPLY_BYTES:
            response.close()
            raise refused(f"the endpoint's reply is {int(size) / 2**20:.0f} MiB (at most {MAX_REPLY_BYTES >> 20} MiB)")
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            response.close()
            raise refused(f"the endpoint compressed its reply ({coding}) although asked not to")
        response.stream = Bounded(response.stream, MAX_REPLY_BYTES)

    return openai.DefaultHttpx2Client(event_hooks={"response": [bound]}, headers={"Accept-Encoding": "identity"})


def load_prompt(name: str) -> Template:
    """A prompt file from agents/prompts/ (versioned by name: coder.user.v1.md), as a Template
    with $placeholders (C++ braces need no escaping)."""
    text = resources.files("astra_cuda.agents").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")
    return Template(text)
