"""Fuzzing the gateway's HTTP API on loopback: whatever a client sends, no 5xx from the gateway.

Answers relayed from the replica carry ``x-kvharness-replica``; a 5xx without it would be the
gateway's own failure. The backend is a FAKE OpenAI server process; the gateway hashes with the
tiny model's real tokenizer and chat template, so rendering and tokenising are fuzzed too.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ROLE = st.sampled_from(["system", "user", "assistant", "tool"]) | st.text(max_size=6)
CONTENT = (
    st.text(max_size=200)
    | st.sampled_from(["<|eot|>", "<|start_header|>", "{{ x }}", "{% raw %}", "\x00", "\ud7ff"])
    | st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=20)}
        ),
        max_size=3,
    )
    | JSON
)
MESSAGE = st.fixed_dictionaries({"role": ROLE, "content": CONTENT}) | st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_calls"]), JSON, max_size=4
)
CHAT = st.fixed_dictionaries(
    {"messages": st.lists(MESSAGE, max_size=5)},
    optional={
        "model": st.text(max_size=10) | JSON,
        "stream": st.booleans() | JSON,
        "max_tokens": st.integers(-5, 10**12) | JSON,
        "n": st.integers(-2, 3),
        "tools": JSON,
        "chat_template_kwargs": JSON,
        "add_generation_prompt": JSON,
    },
)
COMPLETION = st.fixed_dictionaries(
    {
        "prompt": st.text(max_size=200)
        | st.lists(st.integers(-3, 2**40), max_size=50)
        | st.lists(st.text(max_size=10), max_size=3)
        | JSON
    },
    optional={"stream": st.booleans(), "max_tokens": st.integers(-1, 20) | JSON},
)


def request(
    url: str, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.headers
    finally:
        conn.close()


def check(status: int, headers: Any, what: object) -> None:
    if status >= 500:
        assert headers.get("x-kvharness-replica"), f"gateway answered {status} to {what!r}"


@pytest.fixture
def fuzz_gateway(fake_backends: Any, gateway_thread: Any, tiny_model_dir: Path) -> Any:
    (b,) = fake_backends(1, block_size=16)
    return gateway_thread(backends=(b.url,), tokenizer=str(tiny_model_dir), health_interval_s=5)


SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(body=CHAT, session=st.none() | st.text(max_size=300))
def test_fuzz_chat_bodies(fuzz_gateway: Any, body: dict[str, Any], session: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if session is not None:
        safe = (
            session.encode("latin-1", "ignore")
            .decode("latin-1")
            .replace("\r", "")
            .replace("\n", "")
        )
        headers["x-session-id"] = safe
    data = json.dumps(body).encode()
    status, h = request(fuzz_gateway.url, "POST", "/v1/chat/completions", data, headers)
    check(status, h, body)


@SETTINGS
@given(body=COMPLETION)
def test_fuzz_completion_bodies(fuzz_gateway: Any, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    status, h = request(
        fuzz_gateway.url, "POST", "/v1/completions", data, {"Content-Type": "application/json"}
    )
    check(status, h, body)


@SETTINGS
@given(
    raw=st.binary(max_size=500) | JSON.map(lambda v: json.dumps(v).encode()),
    path=st.sampled_from(
        [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/models",
            "/health",
            "/metrics",
            "/status",
            "/x",
        ]
    ),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
)
def test_fuzz_any_bytes_any_path(fuzz_gateway: Any, raw: bytes, path: str, method: str) -> None:
    status, h = request(fuzz_gateway.url, method, path, raw, {"Content-Type": "application/json"})
    check(status, h, (method, path, raw))


def test_garbage_on_the_socket_does_not_kill_it(fuzz_gateway: Any) -> None:
    host, port = fuzz_gateway.url.removeprefix("http://").split(":")
    for junk in (
        b"\x00\xff" * 100,
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n{",
    ):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(4096)
            assert not reply.startswith(b"HTTP/1.1 5") and not reply.startswith(b"HTTP/1.0 5")
    status, _ = request(fuzz_gateway.url, "GET", "/health", b"", {})
    assert status == 200
    assert fuzz_gateway.gateway.pipeline.hasher.stats.mismatches == 0


@SETTINGS
@given(
    depth=st.integers(1, 20_000),
    field=st.sampled_from(["messages", "tools", "prompt", "max_tokens", "chat_template_kwargs"]),
    opener=st.sampled_from(["[", '{"a": ']),
    path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
)
def test_fuzz_deeply_nested_bodies(
    fuzz_gateway: Any, depth: int, field: str, opener: str, path: str
) -> None:
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + "1" + closer * depth
    base = '{"messages": [{"role": "user", "content": "x"}], "prompt": "x"'
    raw = (base.replace(f'"{field}": ', '"unused": ') + f', "{field}": {nested}}}').encode()
    status, h = request(fuzz_gateway.url, "POST", path, raw, {"Content-Type": "application/json"})
    check(status, h, (path, field, opener, depth))
