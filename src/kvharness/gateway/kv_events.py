"""vLLM KV events over ZMQ: decoding, hash translation, and one subscriber per backend.

Wire format (vLLM ``ZmqEventPublisher``): multipart ``[topic, seq, payload]`` where ``seq`` is an
8-byte big-endian batch counter starting at 0 per publisher and ``payload`` is msgpack of an
``EventBatch`` ``[ts, [event, ...], dp_rank]`` (``ts`` in seconds since the epoch). Each event is a
msgspec *tagged* struct: in the array layout (vLLM <= 0.11) ``["BlockStored", block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...]``, in the map layout
(later versions) ``{"type": "BlockStored", "block_hashes": ..., ...}``. Both are accepted. Block
hashes are ints, or 32-byte sha256 digests (``bytes``) in recent versions; bytes are turned into
ints losslessly (big-endian), so they can be carried by :mod:`kvharness.engine.events`.

The replay socket (vLLM's ``replay_endpoint``, a ROUTER) answers a request ``[b"", start_seq]``
with ``[b"", topic, seq, payload]`` for every buffered batch from ``start_seq`` on, then
``[b"", b"", -1, b""]`` (vLLM 0.32; earlier versions sent no topic frame; both are accepted).

Hash translation: engines name blocks with their own hash (algorithm, seed and version dependent).
The gateway names blocks with its own chained hash over token ids (:func:`kvharness.gateway.hashing.
chain_hashes`), so :class:`HashTranslator` maps each engine hash to the gateway's hash using the
``token_ids`` that ``BlockStored`` carries. This keeps routing correct whatever hash algorithm or
``PYTHONHASHSEED`` the engines run with, at the cost of one dict entry per cached block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec
import zmq
import zmq.asyncio

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kvharness.gateway.hashing import ROOT_HASH, block_hash

__all__ = [
    "END_SEQ",
    "DecodeError",
    "EventBatch",
    "HashTranslator",
    "KVEventSubscriber",
    "SubscriberStats",
    "decode_batch",
    "event_endpoint_mode",
]

log = logging.getLogger(__name__)

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
)
_REMOVED_FIELDS = ("block_hashes", "medium")


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
        return BlockStored(
            block_hashes=_hashes(f.get("block_hashes")),
            parent_block_hash=None if parent is None else _hash(parent),
            token_ids=tuple(tokens),
            block_size=size,
            medium=medium if isinstance(medium, str) else None,
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


class HashTranslator:
    """Maps one replica's engine block hashes to the gateway's own chained hashes.

    :meth:`translate` turns an engine event into the same event named by gateway hashes, or None
    when nothing of it is known (a removal of blocks never seen, a store under an unknown parent).
    Several engine hashes may map to one gateway hash (the engine mixes extra keys such as a LoRA
    name or cache salt into its hash); a gateway hash is removed only when its last engine hash is.

    After lost events (:meth:`start_recovery`) a stored block's parent may be unknown. The gateway
    then reports what it routes (:meth:`learn_route`: each full block's content, keyed by its
    unchained hash, and its parent's gateway hash), so a store continuing a prefix stored during
    the gap is still named. Recording stops after ``recovery_stores`` stores went through without
    needing it. Mutates its own tables only; the engine hash of a block names a fixed token prefix,
    so the map stays valid across gaps and is cleared only when the engine's cache is.
    """

    __slots__ = (
        "_count",
        "_learned",
        "_map",
        "_quiet",
        "max_learned",
        "recovering",
        "recovery_stores",
    )

    def __init__(self, max_learned: int = 200_000, recovery_stores: int = 256) -> None:
        self._map: dict[int, int] = {}
        self._count: dict[int, int] = {}
        self._learned: dict[int, int] = {}
        self._quiet = 0
        self.max_learned = max_learned
        self.recovery_stores = recovery_stores
        self.recovering = False

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self._count.clear()

    def start_recovery(self) -> None:
        self.recovering = True
        self._quiet = 0

    def learn_route(
        self, own_hashes: Sequence[int], token_ids: Sequence[int], block_size: int
    ) -> None:
        """Record a routed prompt's full blocks (only while recovering; O(blocks) when so)."""
        if not self.recovering:
            return
        learned = self._learned
        parent = ROOT_HASH
        for i, own in enumerate(own_hashes):
            content = block_hash(ROOT_HASH, token_ids[i * block_size : (i + 1) * block_size])
            learned[content] = parent
            parent = own
        while len(learned) > self.max_learned:
            del learned[next(iter(learned))]

    def translate(self, event: KVEvent) -> KVEvent | None:
        if isinstance(event, BlockStored):
            return self._stored(event)
        if isinstance(event, BlockRemoved):
            gone = []
            for h in event.block_hashes:
                own = self._map.pop(h, None)
                if own is None:
                    continue
                left = self._count[own] - 1
                if left:
                    self._count[own] = left
                else:
                    del self._count[own]
                    gone.append(own)
            return BlockRemoved(tuple(gone), event.medium) if gone else None
        self.clear()
        return event

    def _parent(self, event: BlockStored) -> int | None:
        own = (
            ROOT_HASH if event.parent_block_hash is None else self._map.get(event.parent_block_hash)
        )
        if own is not None:
            self._quiet += 1
            if self.recovering and self._quiet >= self.recovery_stores:
                self.recovering = False
                self._learned.clear()
            return own
        assert event.parent_block_hash is not None
        self._quiet = 0
        if not self.recovering or not event.block_hashes:
            return None
        content = block_hash(ROOT_HASH, event.token_ids[: event.block_size])
        own = self._learned.get(content)
        if own is not None:
            self._map[event.parent_block_hash] = own
            self._count[own] = self._count.get(own, 0) + 1
        return own

    def _stored(self, event: BlockStored) -> BlockStored | None:
        size = event.block_size
        n = len(event.block_hashes)
        if size <= 0 or len(event.token_ids) < n * size:
            raise ValueError(
                f"BlockStored with {n} blocks of {size} tokens carries {len(event.token_ids)} token ids"
            )
        parent = self._parent(event)
        if parent is None:
            return None
        first_parent = parent
        own_hashes = []
        for i, engine_hash in enumerate(event.block_hashes):
            parent = block_hash(parent, event.token_ids[i * size : (i + 1) * size])
            own_hashes.append(parent)
            if engine_hash not in self._map:
                self._map[engine_hash] = parent
                self._count[parent] = self._count.get(parent, 0) + 1
        return BlockStored(
            tuple(own_hashes),
            None if event.parent_block_hash is None else first_parent,
            event.token_ids,
            size,
            event.medium,
        )


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


@dataclass(slots=True)
class SubscriberStats:
    """What a subscriber has seen; read by /metrics. Times are wall seconds."""

    batches: int = 0
    events: int = 0
    gaps: int = 0
    replays: int = 0
    stale_marks: int = 0
    decode_errors: int = 0
    restarts: int = 0
    last_seq: int = -1
    last_lag_s: float = 0.0
    last_batch_at: float = 0.0
    translated_blocks: int = 0
    untranslated_blocks: int = 0
    """Stored blocks that could not be named (their parent's store was lost)."""


class KVEventSubscriber:
    """Subscribes to one backend's KV events and feeds the gateway's prefix index.

    ``apply(event)`` receives events already named by gateway hashes. On a sequence gap the
    missing batches are fetched from ``replay_endpoint`` when given; when they cannot be had,
    ``mark_stale()`` is called (the owner drops or distrusts that replica's index entries until
    fresh events rebuild them) and the translator starts recovery (see :class:`HashTranslator`).
    A sequence number going backwards means the engine restarted: its cache is empty, so an
    :class:`AllBlocksCleared` is applied. Runs in the caller's event loop (:meth:`run` until
    cancelled); mutates ``stats`` and ``translator``; :meth:`handle` is the socket-free core.
    """

    def __init__(
        self,
        backend_url: str,
        endpoint: str,
        apply: Callable[[KVEvent], None],
        mark_stale: Callable[[], None],
        replay_endpoint: str | None = None,
        topic: str = "",
        replay_timeout_s: float = 2.0,
    ) -> None:
        self.backend_url = backend_url
        self.endpoint = endpoint
        self.mode, self.address = event_endpoint_mode(endpoint, backend_url)
        self.replay_address = None
        if replay_endpoint is not None:
            # vLLM always binds its replay ROUTER, so the gateway always connects to it.
            self.replay_address = event_endpoint_mode(replay_endpoint, backend_url)[1]
        self.apply = apply
        self.mark_stale = mark_stale
        self.topic = topic
        self.replay_timeout_s = replay_timeout_s
        self.stats = SubscriberStats()
        self.translator = HashTranslator()
        self.ready = asyncio.Event()
        self._ctx: zmq.asyncio.Context | None = None
        self._sub: zmq.asyncio.Socket | None = None
        self._gap: tuple[int, list[bytes]] | None = None

    def open(self) -> None:
        """Create and bind/connect the SUB socket (idempotent)."""
        if self._sub is not None:
            return
        self._ctx = zmq.asyncio.Context.instance()
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        if self.mode == "bind":
            sub.bind(self.address)
        else:
            sub.connect(self.address)
        self._sub = sub

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None

    async def run(self) -> None:
        """Receive and apply batches until cancelled."""
        self.open()
        assert self._sub is not None
        self.ready.set()
        try:
            while True:
                frames = await self._sub.recv_multipart()
                self.handle(frames, time.time())
                if self._gap is not None:
                    await self._resync()
        finally:
            self.close()

    def handle(self, frames: list[bytes], now: float) -> None:
        """Process one multipart message received at wall time ``now``."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.decode_errors += 1
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        expected = self.stats.last_seq + 1
        if seq < expected:
            # The publisher restarted (its counter starts at 0 again): its cache is empty too.
            self.stats.restarts += 1
            self.translator.clear()
            self._feed(AllBlocksCleared())
        elif seq > expected:
            self.stats.gaps += 1
            if self.replay_address is not None:
                self._gap = (expected, frames)  # replay [expected, seq), then apply this batch
                return
            self._lost(f"batches {expected}..{seq - 1} lost")
        self._apply_payload(seq, frames[2], now)

    def _apply_payload(self, seq: int, payload: bytes, now: float) -> None:
        self.stats.last_seq = seq
        try:
            batch = decode_batch(payload)
        except DecodeError as err:
            self.stats.decode_errors += 1
            log.warning("KV events from %s: batch %d: %s", self.backend_url, seq, err)
            self._lost("an undecodable batch")
            return
        self.stats.batches += 1
        self.stats.last_batch_at = now
        self.stats.last_lag_s = max(0.0, now - batch.ts)
        for event in batch.events:
            self.stats.events += 1
            self._feed(event)

    def _feed(self, event: KVEvent) -> None:
        try:
            own = self.translator.translate(event)
        except ValueError as err:
            self.stats.decode_errors += 1
            log.warning("KV events from %s: %s", self.backend_url, err)
            return
        if own is None:
            if isinstance(event, BlockStored):
                self.stats.untranslated_blocks += len(event.block_hashes)
            return
        if isinstance(own, BlockStored):
            self.stats.translated_blocks += len(own.block_hashes)
        self.apply(own)

    def _lost(self, why: str) -> None:
        log.warning("KV events from %s: %s; its index entries are stale", self.backend_url, why)
        self.stats.stale_marks += 1
        self.translator.start_recovery()
        self.mark_stale()

    async def _resync(self) -> None:
        assert self._gap is not None
        start, held = self._gap
        self._gap = None
        held_seq = int.from_bytes(held[1], "big", signed=True)
        self.stats.replays += 1
        if not await self._replay(start, held_seq):
            self._lost(f"batches {start}..{held_seq - 1} lost and not replayable")
        self._apply_payload(held_seq, held[2], time.time())

    async def _replay(self, start: int, stop: int) -> bool:
        """Apply replayed batches ``[start, stop)``; whether all of them came."""
        assert self._ctx is not None and self.replay_address is not None
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        try:
            dealer.connect(self.replay_address)
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            expected = start
            while True:
                if not await dealer.poll(int(self.replay_timeout_s * 1000)):
                    return False
                frames = await dealer.recv_multipart()
                # [b"", (topic,) seq, payload]: vLLM 0.32 sends the topic, earlier ones did not.
                if len(frames) not in (3, 4) or frames[0] or len(frames[-2]) != 8:
                    return False
                seq = int.from_bytes(frames[-2], "big", signed=True)
                if seq == END_SEQ:
                    return expected >= stop
                if seq < expected or seq >= stop:
                    continue
                if seq > expected:
                    return False  # the replay buffer no longer holds what was lost
                self._apply_payload(seq, frames[-1], time.time())
                expected += 1
        finally:
            dealer.close(linger=0)


def parse_event_specs(specs: Iterable[str], flag: str) -> dict[str, str]:
    """``URL=ENDPOINT`` options into {backend URL: endpoint}; raises ValueError with a reason."""
    out: dict[str, str] = {}
    for spec in specs:
        url, sep, endpoint = spec.rpartition("=")
        if not sep or not url or not endpoint:
            raise ValueError(f"{flag} takes BACKEND_URL=tcp://HOST:PORT, got {spec!r}")
        out[url.rstrip("/")] = endpoint
    return out
