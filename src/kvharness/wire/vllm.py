"""vLLM's endpoints besides completions, and what its Prometheus ``/metrics`` text says.

Calls
    :func:`models` / :func:`first_model` (``GET /v1/models``), :func:`tokenize`
    (``POST /tokenize``), :func:`metrics_text` (``GET /metrics``, bounded), :func:`healthy`
    (``GET /health``), :func:`reset_prefix_cache` (``POST /reset_prefix_cache``, a vLLM
    dev-mode endpoint). Each takes a :class:`~kvharness.wire.http.Client` and a server's base
    URL (``http://host:port``).

Metrics
    Parsed with prometheus_client's parser, after keeping only the lines of the families asked
    for (a vLLM text runs to thousands of histogram lines): :func:`totals` (counters, sums),
    :func:`cache_config` (``vllm:cache_config_info``'s labels: block size, KV blocks),
    :func:`engine_load` (running and waiting requests, KV usage).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from kvharness.wire.http import Client, WireError

__all__ = [
    "COUNTERS",
    "MAX_METRICS_BYTES",
    "EngineInfo",
    "EngineLoad",
    "Unexpected",
    "cache_config",
    "engine_load",
    "families",
    "first_model",
    "healthy",
    "metrics_text",
    "models",
    "reset_prefix_cache",
    "tokenize",
    "totals",
]

log = logging.getLogger(__name__)

MAX_METRICS_BYTES = 16 * 1024 * 1024
"""A ``/metrics`` text longer than this many bytes is not read."""

COUNTERS = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:request_success",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
)
"""The families a bench run reads before and after (prefix cache, tokens, outcomes, and the
latency histograms whose means referee the client's figures)."""

CACHE_INFO = "vllm:cache_config_info"
_LOAD = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_SAMPLE = {"counter": "_total", "histogram": "_sum", "summary": "_sum"}
"""The sample that stands for a family of each type (its name plus this), where not the family
name itself."""


class Unexpected(WireError):
    """The server answered, but not as the endpoint should (``status``: its HTTP status)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


_json = msgspec.json.Encoder()


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + path


def _field(what: str, status: int, body: bytes, name: str) -> Any:
    """Field ``name`` of the JSON object a 200 answer to ``what`` holds; :class:`Unexpected`
    saying what was wrong otherwise."""
    if status != 200:
        text = " ".join(body.decode("utf-8", "replace").split())[:200]
        raise Unexpected(f"{what}: http {status}: {text}", status)
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise Unexpected(f"{what}: the answer is not JSON", status) from None
    return data.get(name) if isinstance(data, dict) else None


async def models(client: Client, base: str, *, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The model objects ``GET /v1/models`` lists (those with a string ``id``). Raises
    :class:`~kvharness.wire.http.WireError` (:class:`Unexpected` for a status other than 200
    or an answer of another shape)."""
    status, body = await client.get(_url(base, "/v1/models"), timeout_s=timeout_s)
    listed = _field("GET /v1/models", status, body, "data")
    if not isinstance(listed, list):
        raise Unexpected("GET /v1/models: no 'data' list in the answer", status)
    return [m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]


async def first_model(client: Client, base: str, *, timeout_s: float = 10.0) -> str:
    """The first model the server lists. Raises :class:`~kvharness.wire.http.WireError`."""
    listed = await models(client, base, timeout_s=timeout_s)
    if not listed:
        raise Unexpected("GET /v1/models lists no model", 200)
    name: str = listed[0]["id"]
    return name


async def tokenize(
    client: Client, base: str, request: Mapping[str, Any], *, timeout_s: float = 10.0
) -> list[int]:
    """The token ids vLLM's ``POST /tokenize`` gives for ``request`` (``{"prompt": ...}`` or
    ``{"messages": ...}`` with its options). Raises :class:`Unexpected` (with the status) when
    the server has no such endpoint or answers without ids, and
    :class:`~kvharness.wire.http.WireError` when it cannot be asked."""
    status, body = await client.post(
        _url(base, "/tokenize"), _json.encode(dict(request)), timeout_s=timeout_s
    )
    tokens = _field("POST /tokenize", status, body, "tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise Unexpected("POST /tokenize: no 'tokens' list of ids in the answer", status)
    return tokens


async def healthy(client: Client, base: str, *, timeout_s: float = 2.0) -> bool:
    """Whether ``GET /health`` answers 200 within ``timeout_s``."""
    try:
        status, _ = await client.get(_url(base, "/health"), timeout_s=timeout_s, limit=65536)
    except WireError:
        return False
    return status == 200


async def reset_prefix_cache(client: Client, base: str, *, timeout_s: float = 30.0) -> bool:
    """Ask the server to drop its prefix cache; False when it does not offer to (or fails)."""
    try:
        status, _ = await client.post(
            _url(base, "/reset_prefix_cache"), b"", timeout_s=timeout_s, limit=65536
        )
    except WireError:
        return False
    return 200 <= status < 300


async def metrics_text(
    client: Client, base: str, *, timeout_s: float = 5.0, max_bytes: int = MAX_METRICS_BYTES
) -> str | None:
    """The server's ``/metrics`` text; None where it did not answer 200 within ``timeout_s``
    or its text is over ``max_bytes``."""
    try:
        status, body = await client.get(
            _url(base, "/metrics"), timeout_s=timeout_s, limit=max_bytes
        )
    except WireError as err:
        log.debug("cannot read %s/metrics: %s", base, err)
        return None
    if status != 200:
        return None
    return body.decode("utf-8", errors="replace")


def _selected(text: str, names: Collection[str]) -> str:
    """The lines of ``text`` that belong to families whose name starts one of ``names``."""
    keep = tuple(names)
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2].startswith(keep):
                out.append(line)
        elif line.startswith(keep):
            out.append(line)
    out.append("")
    return "\n".join(out)


def families(text: str, names: Collection[str] | None = None) -> list[Metric]:
    """The metric families in Prometheus exposition ``text`` (only those named in ``names``,
    and families whose names extend them, when given). Raises ValueError on text that is not
    Prometheus exposition."""
    if names is not None:
        text = _selected(text, names)
    try:
        return list(text_string_to_metric_families(text))
    except (IndexError, TypeError) as err:
        raise ValueError(f"not Prometheus text: {err}") from None


def totals(text: str, names: Collection[str] = COUNTERS) -> dict[str, float]:
    """Each family of ``names`` found in ``text``, summed over its label sets: a counter's
    total, a histogram's (or summary's) sum of observations, a gauge's value; a histogram's (or
    summary's) count of observations too, as ``NAME_count``. Raises ValueError on text that is
    not Prometheus exposition."""
    out: dict[str, float] = {}
    for fam in families(text, names):
        if fam.name in names:
            suffix = _SAMPLE.get(fam.type, "")
            wanted = (suffix, "_count") if suffix == "_sum" else (suffix,)
            for part in wanted:
                key = fam.name if part == suffix else fam.name + part
                total = sum(s.value for s in fam.samples if s.name == fam.name + part)
                out[key] = out.get(key, 0.0) + total
    return out


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


def cache_config(text: str) -> EngineInfo:
    """Block size and KV blocks from ``vllm:cache_config_info``'s labels (the override of the
    block count when one was given); ``EngineInfo(None, None)`` when the text has none or is
    not Prometheus text."""
    try:
        found = families(text, (CACHE_INFO,))
    except ValueError:
        return EngineInfo(None, None)
    for fam in found:
        for s in fam.samples:
            if s.name == CACHE_INFO:
                labels = s.labels
                blocks = _int(labels.get("num_gpu_blocks_override")) or _int(
                    labels.get("num_gpu_blocks")
                )
                return EngineInfo(_int(labels.get("block_size")), blocks)
    return EngineInfo(None, None)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """A replica's own view of its load (vLLM gauges), summed over its engines."""

    running: int
    waiting: int
    kv_usage: float
    """Fraction of KV blocks in use, in [0, 1]."""


def engine_load(text: str) -> EngineLoad | None:
    """Running and waiting requests and KV usage; None when the text has no running gauge (or
    is not Prometheus text)."""
    try:
        sums = totals(text, _LOAD)
    except ValueError:
        return None
    if "vllm:num_requests_running" not in sums:
        return None
    return EngineLoad(
        int(sums["vllm:num_requests_running"]),
        int(sums.get("vllm:num_requests_waiting", 0)),
        min(1.0, max(0.0, sums.get("vllm:kv_cache_usage_perc", 0.0))),
    )
