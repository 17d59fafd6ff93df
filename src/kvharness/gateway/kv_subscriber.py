"""One backend's KV events received over ZMQ and fed to the gateway's prefix index.

Sequence numbers are checked batch by batch, and three cases are told apart:

Joined late
    The first batch seen of an engine's numbering has seq > 0: the engine published batches
    before the gateway listened (it started after the engine, or the engine restarted unseen).
    Nothing the index holds is wrong; it only lacks the blocks stored in those batches. With a
    replay endpoint they are fetched: at start, before any batch arrives, and again when the first
    batch shows more were missed. What cannot be had that way is said once, in one warning that
    names the remedy; the index is not dropped (it holds only what is true). A batch holding
    ``AllBlocksCleared`` (the engine's prefix cache was reset) means nothing was missed.
Gap
    A batch after the first is missing: ZMQ dropped it (the gateway fell behind, or was
    unsubscribed). It is replayed when possible; else the index may hold blocks since evicted, so
    the replica's entries are dropped (``mark_stale``) and rebuilt from later events.
Restart
    A sequence number going backwards: the engine restarted with an empty cache
    (``AllBlocksCleared`` is applied); its new numbering is then checked as above.

See :mod:`kvharness.gateway.kv_events` for the wire format.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import NamedTuple

import zmq
import zmq.asyncio

from kvharness.engine.events import AllBlocksCleared, BlockStored, KVEvent
from kvharness.gateway.hash_translator import HashTranslator
from kvharness.gateway.kv_events import END_SEQ, DecodeError, decode_batch, event_endpoint_mode

__all__ = ["KVEventSubscriber", "SubscriberStats"]

log = logging.getLogger(__name__)

_REPLAY_HOWTO = (
    'set "replay_endpoint": "tcp://*:PORT" in the engine\'s --kv-events-config and give it to '
    "the gateway as --kv-replay {url}=tcp://*:PORT"
)
_BUFFER_HOWTO = (
    'raise "buffer_steps" in the engine\'s --kv-events-config (vLLM keeps the last 10000 '
    "batches by default)"
)


@dataclass(slots=True)
class SubscriberStats:
    """What a subscriber has seen; read by /metrics and /status. Times are wall seconds."""

    batches: int = 0
    events: int = 0
    gaps: int = 0
    """Batches lost mid-stream (not counting those published before the gateway joined)."""
    replays: int = 0
    stale_marks: int = 0
    decode_errors: int = 0
    restarts: int = 0
    last_seq: int = -1
    last_lag_s: float = 0.0
    last_batch_at: float = 0.0
    translated_blocks: int = 0
    untranslated_blocks: int = 0
    """Stored blocks that could not be named (their parent's store was lost or never seen)."""
    joined_at: int = -1
    """The first batch applied of the engine's current numbering (-1: none yet); above 0 the
    gateway joined late and the batches before it were never seen (nor replayed)."""
    late_joins: int = 0
    """Times the gateway joined an engine's stream late and could not recover what it missed."""
    missed_at_join: int = 0
    """Batches published before the gateway joined that were not recovered (summed over joins)."""


class _Trouble(NamedTuple):
    """Why a replay did not give every batch asked for: what happened, and what to do."""

    what: str
    howto: str


class _Replayed(NamedTuple):
    """What one replay request gave: the batches applied and, when some were missing, why."""

    first: int | None
    """The first batch applied (None: none)."""
    cleared: bool
    """Whether an applied batch held ``AllBlocksCleared`` (what came before it no longer matters)."""
    trouble: _Trouble | None
    """Why not every batch asked for came (None when they all did)."""


class _ReplayFailed(Exception):
    """The replay socket did not answer, or not in vLLM's format (``trouble`` says which)."""

    def __init__(self, trouble: _Trouble) -> None:
        super().__init__(trouble.what)
        self.trouble = trouble


class KVEventSubscriber:
    """Subscribes to one backend's KV events and feeds the gateway's prefix index.

    ``apply(event)`` receives events already named by gateway hashes. ``mark_stale()`` is called
    when events were lost mid-stream and could not be replayed (the owner drops that replica's
    index entries; fresh events rebuild them) and the translator starts recovery (see
    :class:`HashTranslator`). Missing the batches published before the gateway listened is not
    such a loss (see the module's doc). Runs in the caller's event loop (:meth:`run` until
    cancelled; ``ready`` is set once subscribed and caught up from the replay endpoint at start);
    mutates ``stats`` and ``translator``; :meth:`handle` is the socket-free core.
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
        self.replay_endpoint = replay_endpoint
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
        # Until the first batch says whether the engine cached blocks before the gateway listened,
        # the routed prompts are recorded, so that stores continuing such blocks can be named.
        self.translator.start_recovery()
        self.ready = asyncio.Event()
        self._ctx: zmq.asyncio.Context | None = None
        self._sub: zmq.asyncio.Socket | None = None
        self._pending: tuple[int, list[bytes], bool] | None = None
        """(first missing seq, the batch that showed it, joined late) to replay before going on."""
        self._replayed: dict[int, int] | None = None
        """seq -> hash of the payload of batches replayed at start: the live copies of these that
        arrive after (published while the subscription was settling) are skipped."""

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
        """Catch up from the replay endpoint (first start only), then receive and apply batches
        until cancelled."""
        self.open()
        assert self._sub is not None
        try:
            if self.replay_address is not None and self.stats.joined_at < 0:
                await self._catch_up_at_start()
            self.ready.set()
            while True:
                frames = await self._sub.recv_multipart()
                self.handle(frames, time.time())
                if self._pending is not None:
                    await self._resync()
        finally:
            self.close()

    def handle(self, frames: list[bytes], now: float) -> None:
        """Process one multipart message received at wall time ``now``."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.decode_errors += 1
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        if self._replayed is not None:
            if seq <= self.stats.last_seq and self._replayed.get(seq) == hash(frames[2]):
                return  # already applied from the replay at start
            self._replayed = None
        expected = self.stats.last_seq + 1
        if seq < expected:
            # The publisher restarted (its counter starts at 0 again): its cache is empty too.
            self.stats.restarts += 1
            self.stats.joined_at = -1
            self.translator.clear()
            self._feed(AllBlocksCleared(), seq)
        if self.stats.joined_at < 0:
            if seq > 0 and self.replay_address is not None:
                self._pending = (0, frames, True)  # replay [0, seq), then apply this batch
                return
            cleared = self._apply_payload(seq, frames[2], now)
            self._joined(seq, cleared, None)
            return
        if seq > expected:
            self.stats.gaps += 1
            if self.replay_address is not None:
                self._pending = (expected, frames, False)  # replay [expected, seq), then this
                return
            self._lost(
                f"batches {expected}..{seq - 1} were lost in transit",
                "to have lost batches replayed, " + _REPLAY_HOWTO.format(url=self.backend_url),
            )
        self._apply_payload(seq, frames[2], now)

    # -- applying ---------------------------------------------------------------------------

    def _apply_payload(self, seq: int, payload: bytes, now: float) -> bool:
        """Apply one batch; whether it held ``AllBlocksCleared``."""
        self.stats.last_seq = seq
        try:
            batch = decode_batch(payload)
        except DecodeError as err:
            self.stats.decode_errors += 1
            self._lost(
                f"batch {seq} is not a vLLM KV-event batch ({err}), so its events are lost",
                f"check that {self.endpoint} is this engine's KV-event endpoint and that the "
                "engine is a vLLM this gateway reads",
            )
            return False
        self.stats.batches += 1
        self.stats.last_batch_at = now
        self.stats.last_lag_s = max(0.0, now - batch.ts)
        cleared = False
        for event in batch.events:
            self.stats.events += 1
            cleared = cleared or isinstance(event, AllBlocksCleared)
            self._feed(event, seq)
        return cleared

    def _feed(self, event: KVEvent, seq: int) -> None:
        try:
            own = self.translator.translate(event)
        except ValueError as err:
            self.stats.decode_errors += 1
            log.warning("KV events from %s: batch %d: %s; that event was skipped",
                        self.backend_url, seq, err)  # fmt: skip
            return
        if own is None:
            if isinstance(event, BlockStored):
                self.stats.untranslated_blocks += len(event.block_hashes)
            return
        if isinstance(own, BlockStored):
            self.stats.translated_blocks += len(own.block_hashes)
        self.apply(own)

    def _joined(self, first: int, cleared: bool, trouble: _Trouble | None) -> None:
        """The gateway joined the engine's numbering: batches from ``first`` on were applied
        (replayed or live). When the ones before were missed, say once what that means; the
        index is kept (it holds nothing false, only less than the engine has)."""
        self.stats.joined_at = first
        if first == 0 or cleared:
            # Every block the engine holds was announced in what was applied.
            self.translator.stop_recovery()
            return
        self.stats.late_joins += 1
        self.stats.missed_at_join += first
        self.translator.start_recovery()
        url = self.backend_url
        when = f"at batch {first}" if trouble is None else "late"
        if self.stats.restarts:
            when += " after the engine restarted"
        if trouble is None:
            howto = "to recover them, " + _REPLAY_HOWTO.format(url=url)
        else:
            when += ", and " + trouble.what
            howto = trouble.howto
        log.warning(
            "gateway joined %s's KV event stream %s: the blocks that engine cached in batches "
            "0..%d are unknown to the index, so requests that would hit them are routed as "
            "misses until that engine evicts them or they are routed there again; %s, or reset "
            "the engine's prefix cache (POST %s/reset_prefix_cache, served with "
            "VLLM_SERVER_DEV_MODE=1) just before starting the gateway",
            url, when, first - 1, howto, url,
        )  # fmt: skip

    def _lost(self, what: str, howto: str) -> None:
        """Events were lost mid-stream: the index may name evicted blocks; drop its entries."""
        log.warning(
            "KV events from %s: %s; this replica's index entries were dropped (some may name "
            "blocks the engine has since evicted), so its cached prefixes are routed as misses "
            "until new events rebuild them; %s",
            self.backend_url, what, howto,
        )  # fmt: skip
        self.stats.stale_marks += 1
        self.translator.start_recovery()
        self.mark_stale()

    # -- replay -----------------------------------------------------------------------------

    async def _catch_up_at_start(self) -> None:
        """Apply what the replay socket holds before any live batch arrives, so that the index
        knows the engine's cache before the first request is routed."""
        try:
            got = await self._replay(0, None, late=True)
        except _ReplayFailed as err:
            log.info(
                "KV events from %s: %s at start (the engine may not be up yet); what it published "
                "before is asked for again when its first batch arrives",
                self.backend_url, err,
            )  # fmt: skip
            return
        if got.first is not None:  # else nothing published yet: the first live batch tells
            self._joined(got.first, got.cleared, got.trouble)

    async def _resync(self) -> None:
        assert self._pending is not None
        start, held, late = self._pending
        self._pending = None
        held_seq = int.from_bytes(held[1], "big", signed=True)
        self.stats.replays += 1
        try:
            got = await self._replay(start, held_seq, late=late)
        except _ReplayFailed as err:
            got = _Replayed(None, False, err.trouble)
        if late:
            cleared = self._apply_payload(held_seq, held[2], time.time())
            first = held_seq if got.first is None else got.first
            self._joined(first, got.cleared or cleared, got.trouble)
            return
        if got.trouble is not None:
            self._lost(
                f"batches {start}..{held_seq - 1} were lost in transit, and {got.trouble.what}",
                got.trouble.howto,
            )
        self._apply_payload(held_seq, held[2], time.time())

    async def _replay(self, start: int, stop: int | None, *, late: bool) -> _Replayed:
        """Apply the replayed batches of ``[start, stop)`` (``stop`` None: all it holds). When
        ``late`` (nothing of this numbering applied yet), a buffer that no longer holds ``start``
        is used from its oldest batch on; else the first missing batch ends the replay (the
        rest is not applied). Raises :class:`_ReplayFailed`."""
        expected, first, cleared = start, None, False
        trouble = None
        if late and stop is None:
            self._replayed = {}
        async with contextlib.aclosing(self._replayed_batches(start)) as batches:
            async for seq, payload in batches:
                if seq < expected or (stop is not None and seq >= stop):
                    continue
                if seq > expected:
                    trouble = self._not_held(expected, seq)
                    if not (late and first is None):
                        return _Replayed(first, cleared, trouble)
                if first is None:
                    first = seq
                cleared = self._apply_payload(seq, payload, time.time()) or cleared
                if self._replayed is not None:
                    self._replayed[seq] = hash(payload)
                expected = seq + 1
        if stop is not None and expected < stop:
            trouble = self._not_held(expected, stop)
        return _Replayed(first, cleared, trouble)

    def _not_held(self, start: int, stop: int) -> _Trouble:
        return _Trouble(
            f"its replay endpoint {self.replay_endpoint} no longer holds batches "
            f"{start}..{stop - 1}",
            "to keep more for replay, " + _BUFFER_HOWTO,
        )

    async def _replayed_batches(self, start: int) -> AsyncGenerator[tuple[int, bytes]]:
        """``(seq, payload)`` of each batch the replay socket sends for ``start``, until its end
        marker. Raises :class:`_ReplayFailed` when it does not answer in time or not in vLLM's
        format."""
        assert self._ctx is not None and self.replay_address is not None
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        try:
            dealer.connect(self.replay_address)
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                if not await dealer.poll(int(self.replay_timeout_s * 1000)):
                    raise _ReplayFailed(_Trouble(
                        f"its replay endpoint {self.replay_endpoint} did not answer within "
                        f"{self.replay_timeout_s:g} s",
                        'check that it is the "replay_endpoint" in the engine\'s '
                        "--kv-events-config",
                    ))  # fmt: skip
                frames = await dealer.recv_multipart()
                # [b"", (topic,) seq, payload]: vLLM 0.32 sends the topic, earlier ones did not.
                if len(frames) not in (3, 4) or frames[0] or len(frames[-2]) != 8:
                    raise _ReplayFailed(_Trouble(
                        f"its replay endpoint {self.replay_endpoint} answered in a format this "
                        "gateway does not read",
                        'check that it is the "replay_endpoint" in the engine\'s '
                        "--kv-events-config",
                    ))  # fmt: skip
                seq = int.from_bytes(frames[-2], "big", signed=True)
                if seq == END_SEQ:
                    return
                yield seq, frames[-1]
        finally:
            dealer.close(linger=0)
