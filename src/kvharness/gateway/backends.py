"""Talking to the replicas besides proxying: health checks, reading vLLM's ``/metrics``, asking
its ``/tokenize``."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

__all__ = [
    "EngineInfo",
    "EngineLoad",
    "HealthChecker",
    "fetch_engine_info",
    "fetch_engine_load",
    "fetch_metrics_text",
    "fetch_tokens",
    "parse_cache_config",
    "parse_engine_load",
]

log = logging.getLogger(__name__)

_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What a replica's ``/metrics`` says of its KV cache (None where it does not say)."""

    block_size: int | None
    num_gpu_blocks: int | None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_cache_config(metrics_text: str) -> EngineInfo:
    """Block size and block count from vLLM's ``vllm:cache_config_info`` gauge labels."""
    m = _CACHE_INFO.search(metrics_text)
    if m is None:
        return EngineInfo(None, None)
    labels = dict(_LABEL.findall(m.group("labels")))
    blocks = _int(labels.get("num_gpu_blocks_override")) or _int(labels.get("num_gpu_blocks"))
    return EngineInfo(_int(labels.get("block_size")), blocks)


async def fetch_engine_info(
    session: aiohttp.ClientSession, url: str, timeout_s: float = 5.0
) -> EngineInfo:
    """The replica's cache configuration, or ``EngineInfo(None, None)`` if it cannot be read."""
    try:
        async with session.get(
            url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                return EngineInfo(None, None)
            return parse_cache_config(await resp.text())
    except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
        return EngineInfo(None, None)


async def fetch_tokens(
    session: aiohttp.ClientSession, url: str, text: str, timeout_s: float = 5.0
) -> tuple[int, list[int] | None]:
    """(HTTP status, token ids) of ``text`` with special tokens added, as the replica's
    ``/tokenize`` (vLLM's) gives them; None for ids the answer does not hold. Raises
    ``aiohttp.ClientError`` or ``TimeoutError`` when the replica cannot be reached."""
    async with session.post(
        url + "/tokenize",
        json={"prompt": text, "add_special_tokens": True},
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        if resp.status != 200:
            return resp.status, None
        try:
            tokens = (await resp.json(content_type=None)).get("tokens")
        except (ValueError, AttributeError):
            return resp.status, None
        ok = isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
        return resp.status, tokens if ok else None


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """A replica's own view of its load (vLLM gauges), summed over its engines."""

    running: int
    waiting: int
    kv_usage: float
    """Fraction of KV blocks in use, in [0, 1]."""


_GAUGE = re.compile(
    r"^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:kv_cache_usage_perc)"
    r"(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$",
    re.MULTILINE,
)


def parse_engine_load(metrics_text: str) -> EngineLoad | None:
    """Running and waiting requests and KV usage from vLLM's Prometheus text (None if absent)."""
    sums: dict[str, float] = {}
    for name, value in _GAUGE.findall(metrics_text):
        try:
            sums[name] = sums.get(name, 0.0) + float(value)
        except ValueError:
            continue
    if "vllm:num_requests_running" not in sums:
        return None
    return EngineLoad(
        int(sums["vllm:num_requests_running"]),
        int(sums.get("vllm:num_requests_waiting", 0)),
        min(1.0, max(0.0, sums.get("vllm:kv_cache_usage_perc", 0.0))),
    )


MAX_METRICS_BYTES = 16 * 1024 * 1024
"""A replica's ``/metrics`` longer than this many bytes is not read."""


async def fetch_metrics_text(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> str | None:
    """Replica ``url``'s ``/metrics`` text; None where it did not answer 200 within
    ``timeout_s`` or its text is over :data:`MAX_METRICS_BYTES`."""
    try:
        async with session.get(
            url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as r:
            if r.status != 200 or (r.content_length or 0) > MAX_METRICS_BYTES:
                return None
            data = bytearray()
            async for chunk in r.content.iter_any():  # read(n) returns what has arrived, not n
                data += chunk
                if len(data) > MAX_METRICS_BYTES:
                    return None
            return data.decode("utf-8", errors="replace")
    except (TimeoutError, aiohttp.ClientError) as err:
        log.debug("cannot read %s/metrics: %s", url, err)
        return None


async def fetch_engine_load(
    session: aiohttp.ClientSession, url: str, timeout_s: float = 2.0
) -> EngineLoad | None:
    text = await fetch_metrics_text(session, url, timeout_s)
    return None if text is None else parse_engine_load(text)


class HealthChecker:
    """Probes ``GET /health`` on each replica every ``interval_s``.

    ``report(i, ok)`` is called with each probe's result; the owner decides what a failure means
    (the gateway takes a replica out after ``unhealthy_after`` failures in a row and puts it back
    on the first success).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        urls: list[str],
        report: Callable[[int, bool], None],
        *,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.session = session
        self.urls = urls
        self.report = report
        self.interval_s = interval_s
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def probe(self, url: str) -> bool:
        try:
            async with self.session.get(url + "/health", timeout=self.timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def check_all(self) -> list[bool]:
        results = await asyncio.gather(*(self.probe(u) for u in self.urls))
        for i, ok in enumerate(results):
            self.report(i, ok)
        return list(results)

    async def run(self) -> None:
        while True:
            await self.check_all()
            await asyncio.sleep(self.interval_s)
