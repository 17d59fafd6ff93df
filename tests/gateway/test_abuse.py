"""The gateway against careless and hostile clients and hung replicas, over real HTTP on loopback.

Replicas are FAKE OpenAI server processes (kvharness.testing.fake_openai) that stall on request
(``x-fake-delay-ms``), or, where a test must see what reaches the engine, an aiohttp app in the
test's loop that records request headers.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kvharness.bench import scrape
from kvharness.gateway.app import Gateway
from kvharness.wire.http import Client
from kvharness.wire.vllm import totals

STALL = {"x-fake-delay-ms": str(10**9)}
CHAT = json.dumps({"messages": [{"role": "user", "content": "fix the bug in main.py"}]}).encode()


def url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}"


async def post(
    gw: Gateway, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            url(gw) + path,
            data=io.BytesIO(body),
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as r,
    ):
        text = await r.text()
        try:
            return r.status, json.loads(text), r.headers
        except ValueError:
            return r.status, text, r.headers


async def get(gw: Gateway, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url(gw) + path, headers=headers) as r:
        return r.status, await r.text()


async def raw(
    gw: Gateway, head: bytes, body: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(head + body)
    await writer.drain()
    return reader, writer


def post_head(path: str, length: int, extra: dict[str, str] | None = None) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in (extra or {}).items())
    return (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{lines}\r\n"
    ).encode()


async def until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    """Poll ``check()`` every 10 ms until true (AssertionError naming ``what`` after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


# --- bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "x"}], "tools": '
            + b'{"a": ' * 5000
            + b"1"
            + b"}" * 5000
            + b"}",
        ),
        ("/v1/completions", b'{"prompt": ' + b"[" * 3000 + b"]" * 3000 + b"}"),
    ],
)
async def test_deeply_nested_json_is_a_400_with_the_reason(
    fake_backends: Any, gateways: Any, caplog: pytest.LogCaptureFixture, path: str, body: bytes
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,))
    status, data, _ = await post(gw, path, body)
    assert status == 400, data
    assert "too deeply" in data["error"]["message"]
    assert not [r for r in caplog.records if r.exc_info], "a client's fault logged a traceback"
    assert (await post(gw, "/v1/chat/completions", CHAT))[0] == 200


async def test_body_over_the_per_body_limit_is_a_413_before_it_is_read(
    fake_backends: Any, gateways: Any
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), max_body_bytes=1000, max_buffered_bytes=4000)
    reader, writer = await raw(gw, post_head("/v1/chat/completions", 10**9))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 413")
    writer.close()
    status, data, _ = await post(gw, "/v1/chat/completions", b" " * 1001)
    assert status == 413 and "limit of 1000 bytes" in data["error"]["message"]

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b" " * 300

    async with (
        aiohttp.ClientSession() as s,
        s.post(url(gw) + "/v1/chat/completions", data=chunked()) as r,
    ):
        assert r.status == 413, await r.text()
    assert gw.pipeline.budget.held == 0


async def test_bodies_over_the_shared_budget_are_503_and_the_budget_comes_back(
    fake_backends: Any, gateways: Any
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(
        backends=(b.url,), max_body_bytes=2000, max_buffered_bytes=3000, client_timeout_s=30
    )
    body = CHAT + b" " * (1500 - len(CHAT))
    # One client declares 1500 bytes and sends half: they are held from the first byte.
    reader, writer = await raw(gw, post_head("/v1/chat/completions", len(body)), body[:700])
    await until(lambda: gw.pipeline.budget.held == 1500, "the first body is counted")
    second = asyncio.create_task(post(gw, "/v1/chat/completions", body))
    assert (await second)[0] == 200  # 1500 + 1500 fit in 3000
    status, data, headers = await post(gw, "/v1/chat/completions", CHAT + b" " * 1600)
    assert status == 503 and "--max-buffered-bytes" in data["error"]["message"]
    assert headers["Retry-After"] == "1"
    writer.write(body[700:])
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()
    await until(lambda: gw.pipeline.budget.held == 0, "every body's bytes are given back")


async def test_a_body_that_stalls_is_a_408(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), client_timeout_s=0.5)
    reader, writer = await raw(gw, post_head("/v1/chat/completions", len(CHAT)), CHAT[:10])
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert b"stalled" in await reader.readexactly(length)
    writer.close()
    assert gw.pipeline.budget.held == 0


async def test_large_prompts_are_served_and_routed_like_small_ones(
    fake_backends: Any, gateways: Any
) -> None:
    """A body over the inline limit goes through the worker thread; its hashes are those of the
    same prompt hashed inline (the index matches the whole prompt for a repeat)."""
    (b,) = fake_backends(1)
    gw = await gateways(
        backends=(b.url,),
        max_body_bytes=4 << 20,
        max_buffered_bytes=8 << 20,
        block_size=16,
        capacity_blocks=10**6,
        lru_blocks=10**6,
    )
    big = json.dumps({"messages": [{"role": "user", "content": "ab\u00e9\U0001f680 " * 100_000}]})
    inline = gw.pipeline.prepare(big.encode(), "chat", None).hashed
    assert len(big) > 1 << 20 and len(inline.block_hashes) > 10_000
    status, data, _ = await post(gw, "/v1/chat/completions", big.encode())
    assert status == 200, data
    assert gw.index.cached_blocks(0) == len(inline.block_hashes)
    assert gw.pipeline.budget.held == 0


# --- clients that leave, replicas that hang --------------------------------------------------


async def test_abandoned_requests_release_their_slots_and_the_replicas(
    fake_backends: Any, gateways: Any
) -> None:
    a, b = fake_backends(2)
    gw = await gateways(backends=(a.url, b.url), policy="round_robin", max_queue=4)
    clients = [
        await raw(gw, post_head("/v1/chat/completions", len(CHAT), STALL), CHAT) for _ in range(8)
    ]
    await until(lambda: sum(gw.router.inflight) == 8, "8 requests in flight")
    status, data, _ = await post(gw, "/v1/chat/completions", CHAT)
    assert status == 429, data  # what abandoned requests locked clients out with
    assert await engine_inflight(a.url) + await engine_inflight(b.url) == 8
    for _, writer in clients:
        writer.close()
    await until(lambda: sum(gw.router.inflight) == 0, "the gateway's slots are released")
    # The replicas' connections were closed: they stopped working on the requests too.
    for u in (a.url, b.url):
        for _ in range(2000):
            if await engine_inflight(u) == 0:
                break
            await asyncio.sleep(0.01)
        assert await engine_inflight(u) == 0
    assert (await post(gw, "/v1/chat/completions", CHAT))[0] == 200
    _, text = await get(gw, "/metrics")
    assert 'outcome="client_gone"' in text


async def engine_inflight(base: str) -> float:
    """Requests the fake replica is working on, from its vLLM-style /metrics."""
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        text = await r.text()
    running = totals(text, ["vllm:num_requests_running", "vllm:num_requests_waiting"])
    return sum(running.values())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hung_replica_is_a_504_after_the_read_timeout(
    fake_backends: Any, gateways: Any, stream: bool
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), read_timeout_s=0.5)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": stream})
    status, data, _ = await post(gw, "/v1/chat/completions", body.encode(), STALL)
    assert status == 504, data
    message = data["error"]["message"]
    assert b.url in message and "--read-timeout" in message and "0.5 s" in message
    assert sum(gw.router.inflight) == 0
    assert (await post(gw, "/v1/chat/completions", CHAT))[0] == 200  # not taken out


def test_the_read_timeout_is_finite_by_default() -> None:
    from kvharness.gateway.config import GatewayConfig

    assert GatewayConfig(backends=("http://x:1",)).read_timeout_s == 600.0


# --- slow and malformed heads ---------------------------------------------------------------


async def test_a_slowloris_head_is_cut_off(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), client_timeout_s=0.5)
    reader, writer = await raw(gw, b"GET /health HTTP/1.1\r\nHost: gw\r\n")
    for _ in range(200):  # a header line every 50 ms: never silent, never done
        if reader.at_eof():
            break
        writer.write(b"X-Drip: 1\r\n")
        try:
            await writer.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.05)
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    assert (await get(gw, "/health"))[0] == 200


async def test_bad_header_bytes_log_one_line_each(
    fake_backends: Any, gateways: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,))
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        reader, writer = await raw(gw, b"GET /health HTTP/1.1\r\nHost: gw\r\nX-Bad: a\x01b\r\n\r\n")
        assert b" 400 " in (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
        writer.close()
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == 3
    for r in records:
        assert r.exc_info is None and "\n" not in r.getMessage()
        assert "Invalid header value" in r.getMessage()


# --- access ---------------------------------------------------------------------------------


@pytest.fixture
async def recording_replica() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """An OpenAI-ish replica in this loop that records each request's headers."""
    seen: list[dict[str, str]] = []

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        seen.append({k.lower(): v for k, v in request.headers.items()})
        return web.json_response({"choices": [{"index": 0, "message": {"content": "ok"}}]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


CLIENT_HEADERS = {"Authorization": "Bearer k-123", "x-api-key": "k-123", "Cookie": "c=1"}


async def test_the_api_key_guards_every_endpoint_but_health(
    recording_replica: Any, gateways: Any
) -> None:
    backend, seen = recording_replica
    gw = await gateways(backends=(backend,), api_key="k-123", block_size=16, capacity_blocks=10)
    for path in ("/status", "/metrics", "/v1/models"):
        status, text = await get(gw, path)
        assert status == 401 and "API key" in text, path
        assert (await get(gw, path, {"Authorization": "Bearer nope"}))[0] == 401
    assert (await get(gw, "/health"))[0] == 200
    assert (await post(gw, "/v1/chat/completions", CHAT))[0] == 401
    assert (await post(gw, "/v1/chat/completions", CHAT, {"x-api-key": "k-12"}))[0] == 401
    assert not seen
    status, text = await get(gw, "/status", {"Authorization": "Bearer k-123"})
    assert status == 200 and "k-123" not in text
    assert json.loads(text)["config"]["api_key"] == "set"
    assert (await get(gw, "/metrics", {"x-api-key": "k-123"}))[0] == 200
    status, _, _ = await post(gw, "/v1/chat/completions", CHAT, CLIENT_HEADERS)
    assert status == 200
    # The gateway's key stops at the gateway; cookies and other headers go on.
    assert "authorization" not in seen[-1] and "x-api-key" not in seen[-1]
    assert seen[-1]["cookie"] == "c=1"


@pytest.mark.parametrize(
    "config", [{}, {"api_key": "k-123", "forward_client_auth": True}], ids=["no-key", "forward"]
)
async def test_client_credentials_reach_the_replica_unless_the_gateway_keeps_them(
    recording_replica: Any, gateways: Any, config: dict[str, Any]
) -> None:
    backend, seen = recording_replica
    gw = await gateways(backends=(backend,), block_size=16, capacity_blocks=10, **config)
    status, _, _ = await post(gw, "/v1/chat/completions", CHAT, CLIENT_HEADERS)
    assert status == 200
    assert seen[-1]["authorization"] == "Bearer k-123" and seen[-1]["x-api-key"] == "k-123"
    assert seen[-1]["cookie"] == "c=1"


# --- the engines' metrics -------------------------------------------------------------------


async def test_bench_finds_the_engines_prefix_cache_counters_through_the_gateway(
    fake_backends: Any, gateways: Any
) -> None:
    a, b = fake_backends(2)
    gw = await gateways(backends=(a.url, b.url), policy="round_robin")
    wire = Client()
    before = await scrape.scrape_all(wire, [url(gw)])
    assert before[url(gw)] is not None, "the gateway exposes no engine counters"
    for i in range(6):  # each prompt 3 times round robin: the 3rd is a repeat on one replica
        msgs = [{"role": "user", "content": f"task {i // 3} " + "context " * 50}]
        status, _, _ = await post(
            gw, "/v1/chat/completions", json.dumps({"messages": msgs}).encode()
        )
        assert status == 200
    after = await scrape.scrape_all(wire, [url(gw)])
    direct = await scrape.scrape_all(wire, [a.url, b.url])
    wire.close()
    via = after[url(gw)]
    assert via is not None
    for family in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
        assert via[family] == sum(d[family] for d in direct.values() if d is not None)
    ratio = scrape.hit_ratio(scrape.delta(before, after))
    assert ratio is not None and 0 < ratio < 1
    _, text = await get(gw, "/metrics")
    for u in (a.url, b.url):
        assert f'vllm:prefix_cache_queries_total{{engine="0",replica="{u}"}}' in text
        assert f'kvharness_gateway_replica_metrics_scraped{{replica="{u}"}} 1.0' in text
    b.kill()
    _, text = await get(gw, "/metrics")
    assert f'kvharness_gateway_replica_metrics_scraped{{replica="{b.url}"}} 0.0' in text
    assert f'replica="{a.url}"' in text


def test_relabel_keeps_an_engines_own_replica_label_and_drops_gateway_names() -> None:
    from kvharness.gateway.engine_metrics import relabel

    text = (
        "# TYPE vllm:prompt_tokens_total counter\n"
        'vllm:prompt_tokens_total{replica="r0"} 5.0\n'
        "# TYPE kvharness_gateway_errors_total counter\n"
        "kvharness_gateway_errors_total 1.0\n"
    )
    out = relabel([("http://a:1", text), ("http://b:1", "not { prometheus")], "kvharness_gateway_")
    lines = out.decode().splitlines()
    assert 'vllm:prompt_tokens_total{exported_replica="r0",replica="http://a:1"} 5.0' in lines
    assert not [ln for ln in lines if ln.startswith("kvharness_gateway_errors")]
    assert 'kvharness_gateway_replica_metrics_scraped{replica="http://b:1"} 0.0' in lines
