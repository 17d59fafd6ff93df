"""The session a request belongs to, named the ways the peers name it: each header of
:data:`~kvharness.gateway.requests.SESSION_HEADERS` in its order, then the body's ``user`` field;
read from the gateway's recording, in front of a FAKE OpenAI server process (canned answers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from kvharness.cli import main
from kvharness.gateway.requests import SESSION_HEADERS, BadRequest, parse_request
from kvharness.workload.recording import recording_parts

_ASKED = [
    ({"x-session-id": "a"}, None, "a"),
    ({"X-Session-Affinity": "b"}, None, "b"),
    ({"X-Dynamo-Session-ID": "c"}, None, "c"),
    ({"x-smg-routing-key": "d"}, None, "d"),
    ({"X-Correlation-ID": "e"}, None, "e"),
    ({}, "f", "f"),  # the OpenAI user field
    # Precedence: the earlier header wins; any header wins over the user field.
    ({"X-Correlation-ID": "late", "X-Session-Affinity": "g"}, None, "g"),
    ({"x-session-id": "h", "x-smg-routing-key": "late"}, "late", "h"),
    ({"X-Correlation-ID": "i"}, "late", "i"),
]


def _recorded(folder: Path) -> list[str]:
    """The session of each recorded request, in the order they were answered."""
    rows = [json.loads(x) for p in recording_parts(folder) for x in p.read_text().splitlines()[1:]]
    return [r["session"] for r in rows]


@pytest.mark.parametrize("session_user", [True, False])
async def test_every_peer_session_key_is_recognised_without_a_flag(
    fake_backends: Any, gateways: Any, tmp_path: Path, session_user: bool
) -> None:
    (b,) = fake_backends(1)
    rec = tmp_path / "rec"
    gw = await gateways(backends=(b.url,), record=str(rec), session_user=session_user)
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="-", max_retries=0
    )
    async with client as c:
        for i, (headers, user, _) in enumerate(_ASKED):
            extra: dict[str, Any] = {"user": user} if user is not None else {}
            await c.completions.create(
                model="fake-model", prompt=[100 + i] * 40, max_tokens=2, extra_headers=headers,
                **extra,
            )  # fmt: skip
    got = _recorded(rec)
    want = [s for _, _, s in _ASKED]
    if not session_user:  # the user field alone names nothing: the session is inferred
        assert got[5] != "f"
        got, want = got[:5] + got[6:], want[:5] + want[6:]
    assert got == want


def test_the_order_is_documented_and_user_must_be_a_string() -> None:
    assert SESSION_HEADERS[0] == "x-session-id" and SESSION_HEADERS[-1] == "x-correlation-id"
    assert parse_request(b'{"prompt":"x","user":"u1"}', "completion").user == "u1"
    assert parse_request(b'{"prompt":"x","user":""}', "completion").user is None
    with pytest.raises(BadRequest, match="'user' must be a string"):
        parse_request(b'{"messages":[],"user":3}', "chat")


@pytest.mark.parametrize(
    "flags",
    [
        ["--session-header", "X-Dynamo-Session-ID"],
        ["--session-header", "x-smg-routing-key"],
        ["--no-session-header", "--session-user"],
    ],
)
async def test_the_bench_sends_a_session_key_the_gateway_reads(
    fake_backends: Any, gateways: Any, tmp_path: Path, flags: list[str]
) -> None:
    (b,) = fake_backends(1)
    rec = tmp_path / "rec"
    gw = await gateways(backends=(b.url,), record=str(rec))
    spec = "synthetic:sessions=2,steps_median=3,steps_sigma=0.01,steps_max=3,repo_tokens_median=200"
    argv = ["bench", "--backend", f"http://127.0.0.1:{gw.port}", "--workload", spec,
            "--time-scale", "0.001", "--no-metrics", "--no-progress", "--out",
            str(tmp_path / "run"), *flags]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0
    got = _recorded(rec)
    assert len(got) == 6 and sorted(set(got)) == ["syn-0", "syn-1"]
