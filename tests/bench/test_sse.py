"""SSE framing and chunk decoding, fed the way a socket delivers bytes (split anywhere)."""

from __future__ import annotations

import pytest

from kvharness.bench.sse import DONE, SSEParser, decode_chunk

STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\r\n\r\n'
    b'data:{"choices":[{"index":0,"text":"lo"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":300,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":256}}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("step", [1, 2, 7, 64, len(STREAM)])
def test_payloads_are_the_same_however_the_bytes_are_split(step: int) -> None:
    p = SSEParser()
    out = []
    for i in range(0, len(STREAM), step):
        out += p.feed(STREAM[i : i + step])
    assert p.pending == 0
    assert len(out) == 5 and out[-1] == DONE
    chunks = [decode_chunk(x) for x in out[:-1]]
    assert [c.has_token for c in chunks] == [False, True, True, False]
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.cached_tokens) == (300, 256)


def test_unfinished_line_is_held_back() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"choices":[]') == []
    assert p.pending > 0
    assert p.feed(b"}\n") == [b'{"choices":[]}']


def test_usage_without_details_reports_unknown_cached_tokens() -> None:
    c = decode_chunk(b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}')
    assert c.usage is not None and c.usage.cached_tokens is None
