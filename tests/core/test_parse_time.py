"""tree-sitter's parses keep a pace (astra_cuda.model.parse_time): a text tree-sitter reads
slowly is stopped midway, many slow parses made for one input add up, real code is untouched.
The slack is made small here so that each hostile text is stopped within milliseconds."""
import re
from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.model import parse_time, source, source_builder

ROOT = Path(__file__).resolve().parents[2]
SLOW = b"int z = " + b"a<" * 100_000 + b"1;\n"   # ~4 s of CPU per MiB: far behind the pace


@pytest.fixture
def small_slack(monkeypatch):
    monkeypatch.setattr(parse_time, "SLACK_S", 0.02)


def test_a_slow_text_is_stopped_where_it_falls_behind(small_slack):
    with pytest.raises(parse_time.TooSlowToParse, match="the text takes too long to parse") as e:
        source.parser().parse(SLOW)
    assert e.value.offset is not None and 0 < e.value.offset < len(SLOW)   # stopped midway, not at the end


def test_the_source_model_names_the_line_it_stopped_at(small_slack):
    text = "__global__ void k(float* x) { x[0] = 1; }\n\n" + SLOW.decode()
    with pytest.raises(parse_time.TooSlowToParse, match="the file takes too long to parse") as e:
        source.parse(text)
    assert e.value.line == 2


def test_many_small_slow_parses_of_one_input_add_up(monkeypatch):
    """300 macro bodies of 1 KB of `a<`: the file's own parse reads them as macro text (fast),
    the source model parses each alone; each alone keeps within the slack, together they do not.
    The slack here is 0.05 s: each body falls ~2-3 ms behind, so alone it keeps 20x inside it and
    together (~0.7 s) 15x outside; at 0.02 s one hiccup of the machine failed the lone parse."""
    monkeypatch.setattr(parse_time, "SLACK_S", 0.05)
    body = "a<" * 500
    text = "__global__ void k(float* x) { x[0] = 1; }\n" + "".join(f"#define M{i}(x) x {body}\n" for i in range(300))
    one = f"void __astra_m() {{ x {body}; }}".encode()
    source.parser().parse(one)   # alone, within the slack
    with pytest.raises(parse_time.TooSlowToParse, match="the file takes too long to parse"):
        source.parse(text)


def test_a_stopped_parse_leaves_nothing_behind(small_slack):
    with pytest.raises(parse_time.TooSlowToParse):
        source.parser().parse(SLOW)
    text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    assert [k.name for k in source.parse(text).kernels] == ["silu_and_mul"]


def test_real_code_keeps_the_pace_and_its_tree_reads_its_text():
    """Every example with the real limits: not a second behind, read once per parse (no second
    parse from bytes: it held the GIL throughout); every node's text, read back through the
    callable the tree was parsed from, is its bytes."""
    for path in sorted((ROOT / "examples").glob("*.cu")):
        data = path.read_bytes()
        with parse_time.reading(path.name) as account:
            tree = source.parser().parse(data)
        assert account.behind < parse_time.SLACK_S and account.read == len(data)
        assert tree.root_node.text == data
        stack = [tree.root_node]
        while stack:
            n = stack.pop()
            assert n.text == data[n.start_byte:n.end_byte], (path.name, n.type, n.start_byte)
            stack.extend(n.children)
        assert [k.name for k in source.parse(data.decode()).kernels]


def test_a_tree_over_the_node_ceiling_is_refused_before_any_walk(monkeypatch):
    """4 MB of `a;` kept tree-sitter's pace but made 5.9 million nodes (the source model's walk:
    15 s of CPU, 1.4 GB): the count tree-sitter keeps is checked before anything walks the tree."""
    monkeypatch.setattr(parse_time, "MAX_NODES", 3_000)
    monkeypatch.setattr(source_builder.Builder, "run", lambda *a: pytest.fail("the tree was walked"))
    text = "__global__ void k(float* x) { x[0] = 1; }\n" + "a;" * 1_000 + "\n"
    with pytest.raises(parse_time.TooManyNodes, match=r"the file is too large to read: .* make 3,0\d\d syntax "
                                                      r"nodes, more than the 3,000") as e:
        source.parse(text)
    assert e.value.line == 0 and e.value.nodes > 3_000
    assert source.parser().parse(b"a;" * 1_000, max_nodes=4_000).root_node.descendant_count <= 4_000


def test_an_open_account_keeps_counting_in_nested_readings():
    with parse_time.reading("the file") as outer:
        with parse_time.reading("the model's code block") as inner:
            source.parser().parse(b"int x;")
    assert inner is outer and outer.read == len(b"int x;") and outer.what == "the file"


def test_a_models_slow_code_block_is_a_problem_of_the_reply(small_slack):
    """A model's reply that tree-sitter reads slowly is refused as that reply's problem (the
    coder asks again), never an error that ends the optimization."""
    file_text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    block = "__global__ void silu_and_mul_kernel(float* x) { int z = " + "a<" * 100_000 + "1; }"
    text, problem = extract.splice(file_text, "silu_and_mul", block)
    assert text is None and problem.startswith("the model's code block takes too long to parse")


def test_nothing_parses_around_the_limit():
    """Every parse of user text goes through `source.parser()` (ARCHITECTURE "Invariants")."""
    package = ROOT / "server" / "astra_cuda"
    direct = [str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "parse_time.py"
              and "tree_sitter" in (t := p.read_text()) and re.search(r"(?<!parse_time\.)\bParser\(", t)]
    assert not direct, direct


def test_a_large_documents_parse_is_refused_by_a_child_first(monkeypatch):
    """The language server's large documents: what the file's own parse would refuse is refused
    by the same parse in a child, at the same line, and never parsed (nor freed) in this process
    — freeing a stopped parse held the server's GIL for ~0.5 s at load 10."""
    from astra_cuda.lsp import parse_apart
    monkeypatch.setattr(parse_time.Parser, "parse", lambda *a, **k: pytest.fail("parsed in this process"))
    text = "__global__ void k(float* x) { x[0] = 1; }\n\n" + SLOW.decode()
    with pytest.raises(parse_time.TooSlowToParse, match="the file takes too long to parse") as e:
        parse_apart.check(text)
    assert e.value.line == 2 and not isinstance(e.value, parse_time.TooManyNodes)
    assert parse_apart.check((ROOT / "examples" / "silu_and_mul.cu").read_text()) is None


def test_a_headers_refusal_names_the_header(monkeypatch, tmp_path):
    """A project header past the bounds, met while its includes are read (the header digest, the
    PyTorch check): refused under its own name, not as 'the text'."""
    from astra_cuda.compile import headers
    monkeypatch.setattr(parse_time, "MAX_NODES", 3_000)
    (tmp_path / "flood.cuh").write_text("a;" * 2_000 + "\n")
    k = tmp_path / "k.cu"
    k.write_text('#include "flood.cuh"\n__global__ void k(float* x) { x[0] = 1; }\n')
    with pytest.raises(parse_time.TooManyNodes, match="^flood.cuh is too large to read"):
        headers.header_digest(k.read_text(), str(k), [])


def test_a_garbage_collection_during_a_parse_is_not_charged_to_the_text():
    """A collection of the whole process that a parse's reads trigger (a large heap late in `astra
    spec`) took 0.1 s of CPU charged to 61 bytes of FlashInfer's sampling.cuh: refused as too slow."""
    import gc
    import sys
    import time as _time
    burns = []

    def during_parse() -> bool:   # a collection triggered by the parse's own reads or progress checks
        f = sys._getframe(1)
        while f is not None and not (f.f_code.co_filename == parse_time.__file__
                                     and f.f_code.co_name in ("__call__", "progress")):
            f = f.f_back
        return f is not None

    def slow(phase, _info):   # three collections of 0.06 s each: past the 0.1 s of slack together
        if phase == "start" and len(burns) < 3 and during_parse():
            burns.append(1)
            end = _time.thread_time() + 0.06
            while _time.thread_time() < end:
                pass
    old = gc.get_threshold()
    gc.callbacks.append(slow)   # after the parse's own accounting has noted the collection's start
    gc.set_threshold(1)
    try:
        with parse_time.reading("a small file"):
            source.parser().parse(b"__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n" * 40)
    finally:
        gc.callbacks.remove(slow)
        gc.set_threshold(*old)
    assert len(burns) == 3   # the collections ran, inside the parse


def test_in_the_language_server_every_large_text_is_parsed_in_a_child_first(monkeypatch, tmp_path):
    """Inside `apart_first(parse_apart.check_data)` (the language server's work): a header past the node
    ceiling, met by the header digest, is refused by name from a child's parse, never parsed
    here; a large text that passes starts one child for all its parses; a small one none. The
    choice is the context's: a thread handed a copy of it parses apart too, a parse outside it
    (another thread's, or after the block) here."""
    import contextvars
    import threading

    from astra_cuda.compile import headers
    from astra_cuda.lsp import parse_apart
    children = []
    run = parse_apart.subprocess.run
    monkeypatch.setattr(parse_apart.subprocess, "run", lambda *a, **k: children.append(a) or run(*a, **k))
    monkeypatch.setattr(parse_time, "MAX_NODES", 300_000)   # the child is told the ceiling
    flood = "a;" * (parse_time.APART_BYTES // 2 + 1) + "\n"   # 393,000 nodes
    (tmp_path / "flood.cuh").write_text(flood)
    k = tmp_path / "k.cu"
    k.write_text('#include "flood.cuh"\n__global__ void k(float* x) { x[0] = 1; }\n')
    built = []
    real_parse = parse_time.tree_sitter.Parser.parse
    monkeypatch.setattr(parse_time.tree_sitter.Parser, "parse",
                        lambda self, src, **kw: built.append(len(src._view)) or real_parse(self, src, **kw))
    large = "".join(f"int x{i};\n" for i in range(30_000))
    assert len(large) > parse_time.APART_BYTES

    def in_thread(fn, context=None):
        t = threading.Thread(target=(lambda: context.run(fn)) if context is not None else fn)
        t.start()
        t.join()

    with parse_time.apart_first(parse_apart.check_data):
        with pytest.raises(parse_time.TooManyNodes, match="^flood.cuh is too large to read"):
            headers.header_digest(k.read_text(), str(k), [])
        assert len(children) == 1 and max(built, default=0) < 100, built   # at most k.cu parsed here
        source.parse(large)
        source.parse(large)
        assert len(children) == 2 and built[-2:] == [len(large)] * 2
        in_thread(lambda: source.parse(large + " "), contextvars.copy_context())
        assert len(children) == 3
        in_thread(lambda: source.parse(large + "  "))   # a thread not handed the context
        assert len(children) == 3
    source.parse(large + "   ")
    assert len(children) == 3 and built[-1] == len(large) + 3


def test_a_file_of_too_many_tokens_is_refused_before_it_is_parsed(monkeypatch):
    """A file's own parse (no bound of its caller's) counts the text's tokens first: past
    `MAX_TOKENS` it is refused at the file's start, and tree-sitter never reads it; a parse with
    its caller's node bound (the cut's expanded unit) or none of tokens (the screen's unit, the
    cut's output) counts none."""
    assert parse_time.tokens(b'int a = "x y"; // a b c\n/* d e */ x += 1.5f;') == 12
    monkeypatch.setattr(parse_time, "MAX_TOKENS", 1_000)
    monkeypatch.setattr(parse_time.tree_sitter.Parser, "parse", lambda *a, **k: pytest.fail("parsed"))
    text = "__global__ void k(float* x) { x[0] = 1; }\n" + "a;" * 500 + "\n"
    with pytest.raises(parse_time.TooManyTokens, match=r"^the file is too large to read: .* 1,0\d\d tokens, "
                       r"more than the 1,000 Astra reads") as e:
        source.parse(text)
    assert e.value.line == 0
    monkeypatch.undo()
    monkeypatch.setattr(parse_time, "MAX_TOKENS", 1_000)
    assert source.parser().parse(("a;" * 600).encode(), max_nodes=4_000).root_node.descendant_count > 1_000
    assert source.parse_with_tree(text, max_tokens=0)[0].kernels   # the gate's screen of a cut unit
    comments = "// " + "x " * 2_000 + "\n__global__ void k(float* x) { x[0] = 1; }\n"   # one token however long
    assert source.parse(comments).kernels
