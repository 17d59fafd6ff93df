"""SSE framing and OpenAI chunk and usage decoding, fed the way a socket delivers bytes."""

from __future__ import annotations

import pytest

from kvharness.wire.openai import decode_chunk, error_body, usage_of_body, usage_of_stream
from kvharness.wire.sse import DONE, SSEParser

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


def test_usage_of_a_whole_answer_and_of_a_stream_tail() -> None:
    body = b'{"id":"x","choices":[{"text":"hi"}],"usage":{"prompt_tokens":9,"completion_tokens":1,'
    body += b'"prompt_tokens_details":{"cached_tokens":8}}}'
    usage = usage_of_body(body)
    assert usage is not None and (usage.prompt_tokens, usage.cached_tokens) == (9, 8)
    assert usage_of_body(b'{"choices":[]}') is None
    assert usage_of_body(b'["usage"]') is None  # not an answer object
    tail = STREAM[40:]  # starts mid-line, as the relay's tail does
    usage = usage_of_stream(tail)
    assert usage is not None and (usage.prompt_tokens, usage.cached_tokens) == (300, 256)
    assert usage_of_stream(STREAM.split(b'data: {"choices":[],')[0]) is None
    unterminated = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}'
    usage = usage_of_stream(b'data: {"usage": "not one"}\n\n' + unterminated)
    assert usage is not None and usage.prompt_tokens == 3  # the last line, unterminated
    assert usage_of_stream(b'data: {"x": 1, "usage": [1]}\n\n') is None


def test_tool_call_pieces_and_error_bodies() -> None:
    c = decode_chunk(
        b'{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","type":"function",'
        b'"function":{"name":"run","arguments":"{\\"a"}}]},"finish_reason":null}]}'
    )
    d = c.choices[0].delta
    assert c.has_token and d is not None and d.tool_calls is not None
    tc = d.tool_calls[0]
    assert (tc.index, tc.id, tc.function and tc.function.name) == (1, "c1", "run")
    assert error_body("no", "invalid_request_error", 400) == (
        b'{"error":{"message":"no","type":"invalid_request_error","param":null,"code":400}}'
    )
