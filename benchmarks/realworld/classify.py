"""The failure classes of the suite: one per kernel, from the first failure the runner recorded.
Pure (a record in, a class out), so the table in the README means the same on every machine.

Classes (issue 23):
  passed          the check passed with the spec Astra inferred, unedited
  not fetched     the mirror, the commit or the file is missing (bad input, not a verdict on Astra)
  listing         `astra kernels` does not list a kernel the file defines (the parser misses it)
  inference       no spec proposed, Astra's own validator refuses the proposal, or the check fails
                  in a way a wrong spec causes (an access outside the inferred shapes, a launch that
                  never ends, sizes the proposal left out)
  spec format     the kernel's interface cannot be written in the spec format (a struct passed by
                  value, a parameter type the format has no word for)
  compile         Astra's compile refuses a file that nvcc compiles with the project's flags
  nvcc fails too  Astra's compile fails and so does nvcc (what nvcc misses is recorded: often a
                  header of a framework that is not installed, like torch/all.h)
  external header Astra's compile fails and nvcc stops at a header the repository does not hold at
                  its pin: one its build generates (TransformerEngine's string_code_*.h), a
                  submodule not mounted or a dependency CMake downloads — the file cannot compile
                  without building the project first
  needs a GPU     the CPU backend cannot run the kernel faithfully (its verdict is "unsupported":
                  static checks only); the GPU run decides
  false refusal   a check refuses a correct kernel: confirmed by hand in triage.toml, or a screen
                  that refuses the unedited file for what only a rewrite could do ("a candidate
                  may only change device code"); else "check failed"
  check failed    the check fails for a reason not yet triaged (inference, false refusal or a
                  kernel bug: see the message)
  kernel bug      a real bug in the public kernel (confirmed by hand in triage.toml)
  timeout         a step did not finish within its limit (the run went on)
  crash           a step died without an answer (the run went on)
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRIAGE = HERE / "triage.toml"

CLASSES = ("passed", "not fetched", "listing", "inference", "spec format", "compile", "nvcc fails too",
           "external header", "needs a GPU", "false refusal", "check failed", "kernel bug", "timeout", "crash")

# What a wrong spec does at run time (the gate's words for it).
_SPEC_CAUSED = re.compile(r"the kernel crashed|out of bounds|outside (the|its) (buffer|shape)|beyond (the|its) (end|buffer|extent)|illegal (memory|address)|"
                          r"segmentation|SIGSEGV|SIGBUS|memory fault|did not finish|timed out|exceeds|too large|"
                          r"no value for|undefined size|unknown size|GiB per case|not covered|"
                          r"__launch_bounds__\(\d+\) is below the spec's block", re.I)
# What the spec format has no word for.
_FORMAT = re.compile(r"cannot be (expressed|written)|no spec type|unsupported (parameter|argument) type|"
                     r"passed by value|struct parameter|not a supported type|is overloaded .*cannot tell which", re.I)


# Astra's compile refusing the file (its own words): nvcc is asked whether it compiles the same file.
ASTRA_COMPILE = re.compile(r"does not compile|is not in the file as nvcc's device pass sees it|"
                           r"the unit cut for the CPU would change what the kernel does|the candidate has no kernel named")
# A check that refuses the unedited file for what only a rewrite could do: a refusal of a correct kernel.
_REFUSES_ORIGINAL = re.compile(r"a candidate may only change device code")


def load_triage(path: Path = TRIAGE) -> list[dict]:
    """Hand-confirmed classes: [[case]] id, match (a substring of the first failure's message),
    class, reason. An entry applies only while the failure still matches it."""
    if not path.exists():
        return []
    return list(tomllib.loads(path.read_text()).get("case", []))


def classify(rec: dict, triage: list[dict] | None = None) -> str:
    if rec.get("passed"):
        return "passed"
    f = rec.get("failure") or {}
    stage, check, msg = f.get("stage", ""), f.get("check", ""), f.get("message", "")
    for t in triage or ():
        if t.get("id") == rec.get("id") and t.get("match", "") in msg and t.get("class") in CLASSES:
            return t["class"]
    if f.get("timeout"):
        return "timeout"
    if f.get("crash"):
        return "crash"
    if stage == "fetch":
        return "not fetched"
    if stage == "list":
        return "listing"
    if stage in ("spec", "spec-valid"):
        if _FORMAT.search(msg):
            return "spec format"
        if ASTRA_COMPILE.search(msg) or re.search(r"\berror:", msg):
            return _compile_class(rec)
        return "inference"
    if stage == "check":
        if _FORMAT.search(msg):
            return "spec format"
        if (rec.get("nvcc") or {}).get("ok") is False and (check == "compile" or ASTRA_COMPILE.search(msg)):
            return _compile_class(rec)   # nvcc refuses the file itself: whatever Astra instantiated in it
        if "the spec's `instantiate`" in msg and "function template" in msg:
            return "inference"   # template arguments that fit no instance of the kernel (or its reference)
        # nvcc says "detected during instantiation of" for one context, "detected during:" and a list for more
        if re.search(r"detected during:?\W*instantiation", msg) and (rec.get("nvcc") or {}).get("ok"):
            return "inference"   # the file compiles; the template arguments the proposal chose do not
        if check == "compile" or ASTRA_COMPILE.search(msg):
            return _compile_class(rec)
        if _REFUSES_ORIGINAL.search(msg):
            return "false refusal"   # the suite never edits a kernel: nothing was added
        if check == "unsupported":
            return "needs a GPU"
        if _SPEC_CAUSED.search(msg):
            return "inference"
        return "check failed"
    if stage in ("profile", "optimize"):
        return "check failed"
    return "crash"


def _compile_class(rec: dict) -> str:
    nv = rec.get("nvcc") or {}
    if nv.get("ok") is True:
        return "compile"
    if nv.get("ok") is False:
        return "external header" if nv.get("outside_repository") else "nvcc fails too"
    return "compile"   # nvcc not available: Astra's refusal stands as Astra's
