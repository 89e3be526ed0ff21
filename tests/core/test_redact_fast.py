"""`redact.text` runs a pattern only where the text holds a literal all its matches contain
(the 10 MB that `astra kernels --json` prints for a file at the token limit took 0.9 s of CPU in
the four patterns; the tests of what is masked are in tests/security). These say the shortcut
masks exactly what running every pattern masks."""
from __future__ import annotations

import json

from astra_cuda import redact


def _every_pattern(s: str) -> str:
    s = redact._URL.sub(lambda m: redact.url(m.group(0)) or "", s)
    s = redact._BEARER.sub(lambda m: m.group(1) + redact.MASK, s)
    s = redact._HEADER.sub(lambda m: m.group(1) + redact.MASK, s)
    return redact._SK.sub("sk-" + redact.MASK, s)


CASES = [
    "plain text, nothing secret: key = value, api = 3",
    "Authorization: Bearer abc.def-123",
    "AUTHORIZATION=xyz; BEARER   tok",
    "X-API-KEY: s3cr3t, Api_Key=zzz apikey : 9",
    "see https://user:pw@host/p?api_key=1&x=2 and sk-abcdefghijklmnop",
    "https://h/p?x%2Dapi%2Dkey=leak",                     # decoded by the URL's rewrite: `x-api-key=leak`
    "https://h/p?q=%42earer%20t0k",                     # decoded: `Bearer t0k`
    "ünïcode Bearer t0k and \u212aey",                   # not ASCII: every pattern runs
    "api-ke y: no, sk-short, bearer",
]


def test_the_shortcut_masks_what_every_pattern_masks():
    for s in CASES:
        assert redact.text(s) == _every_pattern(s), s
    big = json.dumps({"kernels": [{"name": f"k{i}", "params": ["key", "value"]} for i in range(2000)]
                      + [{"note": "Authorization: Bearer abcdef"}]}, indent=2)
    assert redact.text(big) == _every_pattern(big)
    assert "abcdef" not in redact.text(big)
