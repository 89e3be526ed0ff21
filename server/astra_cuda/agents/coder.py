"""Coding agents: the offline coder (applies a named transformation) and the LLM coder (the
plain-text protocol: the whole kernel in one fenced block, spliced back into the file, with a
bounded number of repairs driven by the gate's visible feedback)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from .. import redact
from ..model import source
from ..evaluation import Evaluation
from ..compile.extract import splice
from .llm import LLMClient, load_prompt
from ..model.candidate import Candidate
from .offline import TRANSFORMS
from .offline.base import Rewrite
from .records import Plan, Usage
from .situation import Situation

FENCE_LANGS = {"cuda", "cpp", "c++", "cu", "c", "cxx", ""}


@dataclass
class Attempt:
    candidate: str | None = None           # whole file text
    evaluation: Evaluation | None = None
    changes: list[str] = field(default_factory=list)
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    problem: str = ""                      # why there is no usable candidate
    read: Candidate | None = None          # `candidate` read once


# ---- the file <-> kernel text ------------------------------------------------------------------

def _model(file: str | Candidate) -> source.SourceModel:
    return file.model if isinstance(file, Candidate) else source.parse(file)


def kernel_text(file: str | Candidate, kernel: str) -> str:
    """The kernel's text in the file (a text, or read already: `Candidate`)."""
    k = _model(file).kernel(kernel)
    return k.text if k is not None else ""


def signature(file: str | Candidate, kernel: str) -> str:
    k = _model(file).kernel(kernel)
    if k is None:
        return kernel
    data = (file.text if isinstance(file, Candidate) else file).encode("utf-8")
    return " ".join(data[k.signature_span.start_byte:k.signature_span.end_byte].decode().split())


def helper_texts(file: str | Candidate, kernel: str) -> str:
    m = _model(file)
    k = m.kernel(kernel)
    if k is None:
        return ""
    used = [i for i in m.items if i.kind == "device_function" and i.defines & k.uses]
    return "\n\n".join(i.text for i in used) or "// (none)"


def fenced_blocks(reply: str) -> list[str]:
    """Contents of the ``` fenced blocks of a markdown reply whose language is C++-like.
    An unterminated last block is returned too (the caller decides whether it is complete)."""
    blocks, cur, lang = [], None, None
    for line in reply.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if cur is None:
                lang = stripped[3:].strip().lower()
                cur = []
            else:
                if lang in FENCE_LANGS:
                    blocks.append("\n".join(cur))
                cur = None
            continue
        if cur is not None:
            cur.append(line)
    if cur is not None and lang in FENCE_LANGS:
        blocks.append("\n".join(cur))
    return blocks


# ---- offline ------------------------------------------------------------------------------------

class OfflineCoder:
    def code(self, plan: Plan, s: Situation, evaluate: Callable[[Candidate], Evaluation],
             cancel: threading.Event | None = None) -> Attempt:
        t = TRANSFORMS.get(plan.idea)
        if plan.rewrite is not None and plan.rewrite_base == s.best_hash:
            rw: Rewrite | None = plan.rewrite   # made by the planner from this very version
        else:
            rw = t.apply(s.base, s.context, plan.params or None) if t is not None else None
        if rw is None:
            return Attempt(problem=f"transformation {plan.idea!r} does not apply to the current best version")
        c = rw.candidate or Candidate.of(rw.text, s.kernel)
        return Attempt(rw.text, evaluate(c), list(rw.changes), attempts=1, read=c)


# ---- LLM ----------------------------------------------------------------------------------------

class LLMCoder:
    def __init__(self, client: LLMClient, *, repairs: int = 2, format_retries: int = 1, prompt_version: str = "v1"):
        self.client = client
        self.repairs = repairs
        self.format_retries = format_retries
        self.system = load_prompt(f"coder.system.{prompt_version}").template
        self.user = load_prompt(f"coder.user.{prompt_version}")
        self.repair = load_prompt(f"coder.repair.{prompt_version}")
        self.fmt = load_prompt(f"coder.format.{prompt_version}")

    def code(self, plan: Plan, s: Situation, evaluate: Callable[[Candidate], Evaluation],
             cancel: threading.Event | None = None) -> Attempt:
        sig = signature(s.base, s.kernel)
        fields = dict(kernel_name=s.kernel, signature=sig, plan=plan.details, code=kernel_text(s.base, s.kernel),
                      helpers=helper_texts(s.base, s.kernel))
        prompt = self.user.safe_substitute(fields)
        att = Attempt()
        last_eval: Evaluation | None = None
        last_text: str | None = None
        for repair in range(self.repairs + 1):
            text, problem = self._ask(prompt, fields, s.best, att, cancel)
            if text is None:
                att.problem = problem
                break
            last_text, att.read = text, Candidate.of(text, s.kernel)   # the spliced file, read once here
            att.attempts += 1
            last_eval = evaluate(att.read)
            if last_eval.passed or (cancel is not None and cancel.is_set()):
                break
            # what goes to the endpoint: the gate's feedback, keys and included files' text masked
            feedback = redact.included(redact.text(last_eval.check.feedback or last_eval.check.summary))[:6000]
            prompt = self.user.safe_substitute(fields) + "\n\n" + self.repair.safe_substitute(
                fields, feedback=feedback)
        att.candidate, att.evaluation = last_text, last_eval
        if last_text is not None:
            att.changes = [plan.title]
        return att

    def _ask(self, prompt: str, fields: dict, base: str, att: Attempt, cancel) -> tuple[str | None, str]:
        """One reply turned into a candidate file, with up to `format_retries` sharper re-asks."""
        problem = ""
        for i in range(self.format_retries + 1):
            if cancel is not None and cancel.is_set():
                return None, "cancelled"
            p = prompt if i == 0 else prompt + "\n\n" + self.fmt.safe_substitute(fields, problem=problem)
            reply = self.client.chat(self.system, p)
            att.usage.add(reply.usage)
            if not reply.ok:
                problem = f"the model call failed ({reply.error})"
                if reply.error == "timeout" or (reply.error or "").startswith("connection"):
                    return None, problem  # the endpoint is down or slow: give up this round
                continue
            if reply.finish_reason == "length":
                problem = "the reply was cut off (it hit the token limit) before the code block ended"
                continue
            blocks = [b for b in fenced_blocks(reply.text) if "__global__" in b]
            if not blocks:
                problem = ("the reply had no ```cuda code block with the kernel" if reply.text.strip()
                           else "the reply was empty")
                continue
            text, problem = splice(base, fields["kernel_name"], max(blocks, key=len))
            if text is not None:
                return text, ""
        return None, problem
