"""Positions and minimal edits (astra_cuda.model.textedit)."""
from astra_cuda.model import textedit

TEXT = "ab\ncde\n\nf"


def test_offsets_and_positions_agree_and_clamp():
    for at in range(len(TEXT) + 1):
        assert textedit.offset(TEXT, *textedit.position(TEXT, at)) == at
    assert textedit.position(TEXT, 4) == (1, 1)
    assert textedit.offset(TEXT, 9, 0) == len(TEXT) and textedit.offset(TEXT, 0, 99) == len(TEXT)


def test_common_affixes_never_overlap():
    assert textedit.common_affixes("abcXdef", "abcYYdef") == (3, 3)
    assert textedit.common_affixes("aaa", "aaaa") == (3, 0)
    p, s = textedit.common_affixes("abab", "ab")
    assert p + s <= 2
    assert textedit.line_start(TEXT, 5) == 3 and textedit.line_start(TEXT, 0) == 0
