"""One backend's KV events received over ZMQ and fed to the gateway's prefix index.

Sequence numbers are checked batch by batch: a gap is filled from vLLM's replay socket when there
is one, else the replica's index entries are marked stale; a sequence going backwards is a
restarted engine (empty cache). See :mod:`kvharness.gateway.kv_events` for the wire format.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from kvharness.engine.events import AllBlocksCleared, BlockStored, KVEvent
from kvharness.gateway.hash_translator import HashTranslator
from kvharness.gateway.kv_events import END_SEQ, DecodeError, decode_batch, event_endpoint_mode

__all__ = ["KVEventSubscriber", "SubscriberStats"]

log = logging.getLogger(__name__)


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
