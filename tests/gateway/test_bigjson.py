"""Large bodies decoded in slices give exactly what one decode gives (kvharness.gateway.bigjson),
and requests parsed that way exactly what the gateway parses of a small body."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.gateway.bigjson import LongText, decode, materialise
from kvharness.gateway.requests import (
    BadRequest,
    approx_text,
    materialised,
    parse_request,
)

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ['a"b\\c', "\u00e9\U0001f680\n\t", "\\u00e9", "x" * 50, "\U0001f680" * 9]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=15,
)


def dumps(value: Any, ascii_only: bool, indent: int | None) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()


@settings(max_examples=400, deadline=None)
@given(value=JSON, ascii_only=st.booleans(), indent=st.none() | st.integers(0, 2),
       slice_bytes=st.integers(1, 64))  # fmt: skip
def test_decoding_in_slices_is_decoding_whole(
    value: Any, ascii_only: bool, indent: int | None, slice_bytes: int
) -> None:
    body = dumps(value, ascii_only, indent)
    assert materialise(decode(body, slice_bytes)) == msgspec.json.decode(body)


def test_long_strings_come_in_pieces_cut_between_characters() -> None:
    text = "def f(x):\n    return 'ab\u00e9\U0001f680\\\\' + x\n" * 1000
    for ascii_only in (True, False):
        got = decode(dumps({"t": [text]}, ascii_only, None), 100)
        piece = got["t"][0]
        assert isinstance(piece, LongText) and len(piece.pieces) > 10
        assert str(piece) == text


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=80), slice_bytes=st.integers(1, 16))
def test_bad_bodies_fail_as_one_decode_fails(body: bytes, slice_bytes: int) -> None:
    try:
        whole = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError) as err:
        with pytest.raises(type(err), match=str(err)[:30].replace("(", r"\(").replace(")", r"\)")):
            decode(body, slice_bytes)
        return
    assert materialise(decode(body, slice_bytes)) == whole


MESSAGE = st.fixed_dictionaries(
    {"role": TEXT | JSON, "content": TEXT | JSON}
) | st.fixed_dictionaries(
    {
        "role": st.just("user"),
        "content": st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": TEXT}),
            max_size=3,
        ),
    }
)
BODY = st.fixed_dictionaries(
    {"messages": st.lists(MESSAGE, max_size=3), "prompt": TEXT | st.lists(TEXT, max_size=2) | JSON},
    optional={"model": TEXT | JSON, "max_tokens": JSON, "stream": JSON, "tools": JSON},
)


@settings(max_examples=400, deadline=None)
@given(body=BODY, kind=st.sampled_from(["chat", "completion"]), slice_bytes=st.integers(1, 48))
def test_requests_parsed_in_slices_are_parsed_as_small_ones(
    body: dict[str, Any], kind: Any, slice_bytes: int
) -> None:
    raw = json.dumps(body).encode()
    try:
        whole = parse_request(raw, kind, slice_bytes=len(raw))
    except BadRequest as err:
        with pytest.raises(BadRequest) as got:
            parse_request(raw, kind, slice_bytes=slice_bytes)
        assert str(got.value) == str(err)
        return
    sliced = parse_request(raw, kind, slice_bytes=slice_bytes)
    assert approx_text(sliced) == approx_text(whole)
    assert materialised(sliced) == whole
