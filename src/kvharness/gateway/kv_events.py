"""vLLM KV events: their wire format, decoded, and the endpoints they come from.

Messages
    vLLM's ``ZmqEventPublisher`` sends multipart ``[topic, seq, payload]``: ``seq`` an 8-byte
    big-endian batch counter starting at 0 per publisher, ``payload`` msgpack of an
    ``EventBatch`` ``[ts, [event, ...], dp_rank]`` (``ts`` in seconds since the epoch).

Events
    Each is a msgspec *tagged* struct, in the array layout (vLLM <= 0.11: ``["BlockStored",
    block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...]``) or the map
    layout (later: ``{"type": "BlockStored", ...}``); both are accepted. Block hashes are ints, or
    32-byte sha256 digests in recent versions, turned into ints losslessly (big-endian) so
    :mod:`kvharness.engine.events` can carry them. ``BlockStored.extra_keys`` (vLLM 0.32:
    per block, None or a list of keys; an image's key is a pair ``[identifier, offset]``)
    becomes tuples.

Replay
    vLLM's replay socket (a ROUTER) answers ``[b"", start_seq]`` with ``[b"", topic, seq,
    payload]`` for every buffered batch from ``start_seq`` on, then ``[b"", b"", -1, b""]``
    (vLLM 0.32; earlier versions sent no topic frame; both are accepted). It keeps the last
    ``buffer_steps`` batches of its ``--kv-events-config`` (10000 by default): asked for older
    ones, it answers from the oldest it still holds.

Elsewhere
    :mod:`kvharness.gateway.hash_translator` renames engine hashes to the gateway's;
    :mod:`kvharness.gateway.kv_subscriber` receives one backend's batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec

from kvharness.engine.events import (
    AllBlocksCleared,
    BlockKeys,
    BlockRemoved,
    BlockStored,
    KVEvent,
)

__all__ = [
    "END_SEQ",
    "DecodeError",
    "EventBatch",
    "decode_batch",
    "event_endpoint_mode",
    "parse_event_specs",
]

END_SEQ = -1
"""The sequence number vLLM's replay socket sends to end a replay."""

_decoder = msgspec.msgpack.Decoder()


class DecodeError(ValueError):
    """A KV-event message that does not follow vLLM's schema."""


@dataclass(frozen=True, slots=True)
class EventBatch:
    ts: float
    """Publisher wall time, seconds since the epoch."""
    events: tuple[KVEvent, ...]
    dp_rank: int | None


def _hash(value: Any) -> int:
    if isinstance(value, bool):
        raise DecodeError(f"bad block hash {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        return int.from_bytes(value, "big")
    raise DecodeError(f"bad block hash {value!r}")


def _hashes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise DecodeError(f"block_hashes must be a list, got {type(value).__name__}")
    return tuple(_hash(h) for h in value)


_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
)
_REMOVED_FIELDS = ("block_hashes", "medium")


def _key(value: Any) -> str | bytes | tuple[str, int]:
    if isinstance(value, str | bytes):
        return value
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    ):
        return (value[0], value[1])
    raise DecodeError(f"bad extra key {value!r:.80}")


def _extra_keys(value: Any, blocks: int) -> tuple[BlockKeys, ...] | None:
    """``extra_keys`` of a store of ``blocks`` blocks: per block None or a tuple of keys."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != blocks:
        raise DecodeError(f"extra_keys must be a list of one entry per block ({blocks})")
    out: list[BlockKeys] = []
    for entry in value:
        if entry is not None and not isinstance(entry, list):
            raise DecodeError(f"an extra_keys entry must be a list or null, got {entry!r:.80}")
        out.append(None if entry is None else tuple(_key(k) for k in entry))
    return tuple(out)


def _fields(raw: Any, names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """(tag, fields) of a tagged struct in either layout; missing trailing fields are absent."""
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        return raw[0], dict(zip(names, raw[1:], strict=False))
    if isinstance(raw, dict) and isinstance(raw.get("type"), str):
        return raw["type"], raw
    raise DecodeError(f"not a tagged KV event: {raw!r:.80}")


def _event(raw: Any) -> KVEvent | None:
    """One event, or None for a kind this gateway does not track (skipped, not an error)."""
    tag = (
        raw[0]
        if isinstance(raw, list) and raw
        else raw.get("type")
        if isinstance(raw, dict)
        else None
    )
    if tag == "BlockStored":
        _, f = _fields(raw, _STORED_FIELDS)
        parent = f.get("parent_block_hash")
        tokens = f.get("token_ids") or []
        size = f.get("block_size", 0)
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise DecodeError("token_ids must be a list of ints")
        if not isinstance(size, int) or size < 0:
            raise DecodeError(f"bad block_size {size!r}")
        medium = f.get("medium")
        hashes = _hashes(f.get("block_hashes"))
        return BlockStored(
            block_hashes=hashes,
            parent_block_hash=None if parent is None else _hash(parent),
            token_ids=tuple(tokens),
            block_size=size,
            medium=medium if isinstance(medium, str) else None,
            extra_keys=_extra_keys(f.get("extra_keys"), len(hashes)),
        )
    if tag == "BlockRemoved":
        _, f = _fields(raw, _REMOVED_FIELDS)
        medium = f.get("medium")
        return BlockRemoved(
            block_hashes=_hashes(f.get("block_hashes")),
            medium=medium if isinstance(medium, str) else None,
        )
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    if isinstance(tag, str):
        return None
    raise DecodeError(f"not a tagged KV event: {raw!r:.80}")


def decode_batch(payload: bytes) -> EventBatch:
    """Decode one msgpack ``EventBatch`` (array or map layout). Raises :class:`DecodeError`."""
    try:
        raw = _decoder.decode(payload)
    except msgspec.DecodeError as err:
        raise DecodeError(f"not msgpack: {err}") from None
    if isinstance(raw, dict):
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) < 2:
        raise DecodeError("an event batch is [ts, events, dp_rank]")
    ts, events = raw[0], raw[1]
    rank = raw[2] if len(raw) > 2 else None
    if not isinstance(ts, int | float) or not isinstance(events, list):
        raise DecodeError("an event batch is [ts, events, dp_rank]")
    decoded = tuple(e for e in (_event(r) for r in events) if e is not None)
    return EventBatch(float(ts), decoded, rank if isinstance(rank, int) else None)


def event_endpoint_mode(endpoint: str, backend_url: str) -> tuple[str, str]:
    """``("bind" | "connect", address)`` for a SUB socket facing vLLM's ``endpoint`` setting.

    vLLM binds a wildcard endpoint (``tcp://*:P``) and connects to a concrete one, so the gateway
    does the opposite: it connects to the backend's host for a wildcard and binds a concrete one.
    """
    if not endpoint.startswith(("tcp://", "ipc://")):
        raise ValueError(
            f"KV-event endpoint must be tcp://HOST:PORT or ipc://PATH, got {endpoint!r}"
        )
    if endpoint.startswith("ipc://"):
        return "connect", endpoint
    rest = endpoint[len("tcp://") :]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"KV-event endpoint needs a port: {endpoint!r}")
    if host in ("*", "0.0.0.0", "[::]", "::"):
        backend_host = urlsplit(backend_url).hostname or "127.0.0.1"
        return "connect", f"tcp://{backend_host}:{port}"
    return "bind", endpoint


def parse_event_specs(specs: Iterable[str], flag: str) -> dict[str, str]:
    """``URL=ENDPOINT`` options into {backend URL: endpoint}; raises ValueError with a reason."""
    out: dict[str, str] = {}
    for spec in specs:
        url, sep, endpoint = spec.rpartition("=")
        if not sep or not url or not endpoint:
            raise ValueError(f"{flag} takes BACKEND_URL=tcp://HOST:PORT, got {spec!r}")
        out[url.rstrip("/")] = endpoint
    return out
