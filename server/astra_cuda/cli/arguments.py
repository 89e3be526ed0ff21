"""The grammar of the `astra` command: its verbs, their flags and each value's check (argparse;
a bad value or a usage error exits 2 with a one-line hint, as JSON too when `--json` was asked).
What a verb does is its handler's, given by the caller (`cli.VERBS`)."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Mapping, NoReturn

from .. import __version__
from ..contract import DEFAULT_ARCH
from .terminal import EXIT_BAD_INPUT, emit_json, error_json

Verb = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    json_errors = False  # set from the raw arguments: a usage error is JSON too when --json was asked

    def error(self, message: str) -> NoReturn:  # usage errors exit 2 with a one-line hint, as promised
        self.print_usage(sys.stderr)
        print(f"astra: error: {message}", file=sys.stderr)
        if self.json_errors:
            emit_json(error_json(message, kind="usage"))
        raise SystemExit(EXIT_BAD_INPUT)


MAX_ROUNDS = 1000


def _rounds(value: str) -> int:
    """--rounds: a whole number from 1 to MAX_ROUNDS (argparse turns the ValueError into exit 2)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if not 1 <= n <= MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_ROUNDS}, got {n}")
    return n


def _seed(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if not 1 <= n < 2**31:
        raise argparse.ArgumentTypeError(f"a seed is from 1 to {2**31 - 1}, got {n}")
    return n


def _whole(lo: int, hi: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi}, got {n}")
        return n
    return parse


def _number(lo: float, hi: float) -> Callable[[str], float]:
    def parse(value: str) -> float:
        import math
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not (math.isfinite(x) and lo <= x <= hi):
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}, got {value}")
        return x
    return parse


def build_parser(verbs: Mapping[str, Verb]) -> argparse.ArgumentParser:
    """The parser of every verb, each calling its handler in `verbs` (by the verb's name)."""
    p = Parser(prog="astra", description="Astra: verified, faster CUDA kernels.",
                epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input or usage. Lines and columns are "
                       "1-based in every output.")
    p.add_argument("--version", action="version", version=f"astra {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=Parser, metavar="VERB")

    def verb(name: str, help_: str, fn: Verb, kernel_required: bool = False,
             many: bool = False) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_, description=help_)
        if many:
            s.add_argument("file", nargs="+", metavar="PATH",
                           help="CUDA sources (.cu, .cuh): files, folders (walked) and globs ('src/**/*.cu')" +
                                ("; one file and kernel is one run; several, a folder, or a file with several "
                                 "specs and no --kernel, a batch of every kernel with a spec"
                                 if name == "optimize" else ""))
        else:
            s.add_argument("file", help="the CUDA source file (.cu, .cuh)")
        s.add_argument("--kernel", "-k", required=kernel_required, metavar="NAME",
                       help="the kernel (its name or qualified name)" + ("" if kernel_required else
                                                                          "; default: every kernel"))
        s.add_argument("--json", action="store_true",
                       help="print one JSON object on stdout, errors included")
        s.add_argument("--quiet", "-q", action="store_true",
                       help="print only what is wrong (and the final result), as compiler-style lines")
        s.set_defaults(fn=fn, format="text")
        return s

    kernels_verb = verb("kernels", "list the kernels in files, folders and globs", verbs["kernels"], many=True)
    kernels_verb.add_argument("--wide", action="store_true",
                              help="one row per kernel however narrow the terminal (long lines)")
    spec_verb = verb("spec", "print a proposed harness spec for a kernel", verbs["spec"], kernel_required=True)
    verb("pin", "pin the kernel's current source as its reference", verbs["pin"], kernel_required=True)
    for name, help_, fn in (("check", "check kernels against their reference", verbs["check"]),
                            ("profile", "time kernels at their size ladder (the bench sizes, decode- and "
                                        "prefill-like points)", verbs["profile"]),
                            ("optimize", "optimize kernels with the agent team", verbs["optimize"])):
        s = verb(name, help_, fn, many=True)
        s.add_argument("--backend", choices=["auto", "gpu", "cpu", "static"], default=None,
                       help="where kernels run: the GPU (CuPy), the CPU backend (correctness only), "
                            "static (compile checks only) or auto, the best available (default: the project's "
                            "`backend`, else auto)")
        s.add_argument("--arch", default=None,
                       help=f"target architecture for static checks (default: the project's `arch`, else the "
                            f"GPU's own, else {DEFAULT_ARCH})")
        s.add_argument("--cluster", metavar="WHERE",
                       help="run kernels on Ray: local (a runtime started here), ray://HOST:PORT, or auto "
                            "(RAY_ADDRESS if set); default: this machine's workers")
    c = sub.choices["check"]
    c.add_argument("--format", choices=["text", "json", "sarif"], default="text",
                   help="output format: text (default: compiler-style lines for what is wrong), json (same as "
                        "--json) or sarif (SARIF 2.1.0 for CI code scanning: one result per defect)")
    c.add_argument("--seed", type=_seed, default=None, metavar="N",
                   help="the gate's input seed: a failure prints its seed, and --seed replays it (default: fresh)")
    c.add_argument("--infer", action="store_true",
                   help="check kernels without a spec under the spec `astra spec` proposes (nothing is written)")
    for s in (spec_verb, *(sub.choices[v] for v in ("check", "profile", "optimize"))):
        s.add_argument("-I", dest="include", action="append", metavar="DIR",
                       help="project include directory (repeatable; searched before compile_commands.json's)")
        s.add_argument("-D", dest="define", action="append", metavar="NAME[=VALUE]", help="define a macro (repeatable)")
        s.add_argument("-U", dest="undefine", action="append", metavar="NAME",
                       help="leave a macro undefined, also one Astra would add (a PyTorch extension's "
                            "__CUDA_NO_HALF_OPERATORS__ …), as a build's -U does (repeatable)")
        s.add_argument("--std", choices=["c++11", "c++14", "c++17", "c++20"], help="C++ standard (default c++17)")
        s.add_argument("--compile-commands", metavar="PATH",
                       help="compile_commands.json to use (default: the nearest one, also under build/)")
    sub.choices["profile"].add_argument("--ncu", action="store_true", help="collect Nsight Compute metrics")
    for v in ("profile", "optimize"):
        sub.choices[v].add_argument(
            "--sizes", choices=["ladder", "bench"], default="ladder",
            help="time at the size ladder: the spec's bench sizes plus decode-like (1 and 32 rows) and "
                 "prefill-like points (default), or at the bench sizes alone")
    o = sub.choices["optimize"]
    o.add_argument("--rounds", type=_rounds, default=None,
                   help="rounds in all (default 5; with --resume: an interrupted run's own total, "
                        "a finished run's rounds, i.e. only report it)")
    o.add_argument("--tune", type=int, default=None, metavar="N",
                   help="parameter points the tuning stage may time after the offline team's rounds "
                        "(default 8; 0: none; needs a GPU)")
    o.add_argument("--fresh", action="store_true",
                   help="search even where .astra/tuning/ remembers this kernel's tuning on this GPU model "
                        "(by default a rerun replays it, verifies and times it again, and stops there)")
    o.add_argument("--llm", choices=["offline", "openai"], default=None,
                   help="offline (default without an endpoint) or an OpenAI-compatible endpoint")
    o.add_argument("--model", metavar="NAME", help="model name at the endpoint (or ASTRA_MODEL, or the project's llm.model)")
    o.add_argument("--base-url", metavar="URL",
                   help="base URL of an OpenAI-compatible endpoint (or ASTRA_BASE_URL; default: OpenAI's); "
                        "the key comes from ASTRA_API_KEY or OPENAI_API_KEY, never from a file")
    o.add_argument("--reasoning-effort", choices=["minimal", "low", "medium", "high"], default=None,
                   help="reasoning effort for reasoning models (then no temperature is sent)")
    o.add_argument("--temperature", type=_number(0, 2), default=None, metavar="T",
                   help="sampling temperature, 0 to 2 (default 0.2)")
    o.add_argument("--max-tokens", dest="max_output_tokens", type=_whole(16, 1 << 20), default=None, metavar="N",
                   help="most tokens one reply may have (default 8192)")
    o.add_argument("--llm-timeout", type=_number(1, 3600), default=None, metavar="S",
                   help="seconds one model call may take (default 120)")
    o.add_argument("--token-budget", dest="max_tokens", type=_whole(1, 10**10), default=None, metavar="N",
                   help="LLM tokens the run may use, as the endpoint reports them (default: the project's "
                        "budgets.tokens, else no limit)")
    o.add_argument("--time-budget", dest="max_seconds", type=_number(1, 7 * 86400), default=None, metavar="S",
                   help="wall-clock seconds for the run: no round starts and no model call runs past it "
                        "(default: the project's budgets.seconds, else no limit)")
    o.add_argument("--candidates", type=int, default=1, metavar="K",
                   help="candidates per round, evaluated at once where the executor has room (default 1)")
    o.add_argument("--write", action="store_true", help="put the best kernel into the file")
    o.add_argument("--report", metavar="DIR", help="write an HTML report to DIR")
    runs = o.add_mutually_exclusive_group()
    runs.add_argument("--resume", metavar="RUN_ID",
                      help="continue a logged run from .astra/runs/ ('last': the newest of this kernel), or "
                           "a batch from .astra/batches/ ('last': the newest batch, when a batch is given)")
    runs.add_argument("--list-runs", action="store_true", help="list the logged runs of this file and exit")
    cfg = sub.add_parser("config", help="print the effective configuration and where each value came from",
                         description="print the effective configuration for a file (default: the current folder) "
                                     "and where each value came from: flags, the environment, astra.toml or "
                                     "[tool.astra] in pyproject.toml, compile_flags.txt, .clangd, compile_commands.json")
    cfg.add_argument("file", nargs="?", metavar="FILE", help="the CUDA source whose configuration to show")
    cfg.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cfg.add_argument("-I", dest="include", action="append", metavar="DIR", help=argparse.SUPPRESS)
    cfg.add_argument("-D", dest="define", action="append", metavar="NAME[=VALUE]", help=argparse.SUPPRESS)
    cfg.add_argument("-U", dest="undefine", action="append", metavar="NAME", help=argparse.SUPPRESS)
    cfg.add_argument("--std", help=argparse.SUPPRESS)
    cfg.add_argument("--compile-commands", metavar="PATH", help=argparse.SUPPRESS)
    cfg.set_defaults(fn=verbs["config"], format="text", quiet=False)
    s = sub.add_parser("serve", help="run the language server on stdio (for editors)",
                       description="run the language server on stdio (for editors)")
    s.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(fn=verbs["serve"], format="text", quiet=False)
    return p


def wants_json(argv: list[str]) -> bool:
    return "--json" in argv or any(x in ("--format=json", "--format=sarif") for x in argv) or \
        any(x == "--format" and y in ("json", "sarif") for x, y in zip(argv, argv[1:]))
