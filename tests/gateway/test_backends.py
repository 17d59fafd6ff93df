"""Reading a replica's /metrics over real loopback HTTP: the whole text, however it arrives, and
nothing past the bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from kvharness.gateway import backends
from kvharness.gateway.backends import fetch_engine_load, fetch_metrics_text

METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 3.0\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{model_name="m"} 1.0\n'
)


async def _in_pieces(request: web.Request) -> web.StreamResponse:
    """The metrics text in three pieces with pauses between, as a busy engine may send it."""
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    third = len(METRICS) // 3
    for piece in (METRICS[:third], METRICS[third : 2 * third], METRICS[2 * third :]):
        await resp.write(piece.encode())
        await asyncio.sleep(0.05)
    await resp.write_eof()
    return resp


@pytest.fixture
async def replica() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/metrics", _in_pieces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_metrics_sent_in_pieces_are_read_whole(replica: str) -> None:
    async with aiohttp.ClientSession() as session:
        assert await fetch_metrics_text(session, replica, 5.0) == METRICS
        load = await fetch_engine_load(session, replica)
    assert load is not None and (load.running, load.waiting) == (3, 1)


async def test_metrics_over_the_bound_are_not_read(
    replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "MAX_METRICS_BYTES", len(METRICS) - 1)
    async with aiohttp.ClientSession() as session:
        assert await fetch_metrics_text(session, replica, 5.0) is None
