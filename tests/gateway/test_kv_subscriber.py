"""A subscriber fed by a real ZMQ publisher speaking vLLM's schema: gaps, replay, restarts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kvharness.engine.events import KVEvent
from kvharness.gateway.kv_subscriber import KVEventSubscriber
from kvharness.routing.index import PrefixIndex
from kvharness.testing.vllm import free_port
from kvharness.workload.chain import chain_hashes

BS = 4


def tokens(n: int, base: int = 0) -> list[int]:
    return [base + i for i in range(n)]


# --- real ZMQ ----------------------------------------------------------------------------


class Fed:
    """An index for one replica behind a subscriber, as the gateway wires it."""

    def __init__(self) -> None:
        self.index = PrefixIndex(1)
        self.stale = 0
        self.events: list[KVEvent] = []

    def apply(self, e: KVEvent) -> None:
        self.events.append(e)
        self.index.apply(0, e)

    def mark_stale(self) -> None:
        self.stale += 1
        self.index.mark_stale(0)


@contextlib.asynccontextmanager
async def running(sub: KVEventSubscriber) -> AsyncIterator[KVEventSubscriber]:
    task = asyncio.create_task(sub.run())
    await sub.ready.wait()
    try:
        yield sub
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def connected(pub: Any, sub: KVEventSubscriber, kv_schema: Any, fed: Fed) -> None:
    """PUB/SUB drops messages until the subscription arrives: probe with harmless removals.

    Probes lost before that are a real gap (the subscriber joined late); counters are reset so
    tests see only what follows.
    """
    while sub.stats.batches == 0:
        pub.send([kv_schema.Removed([424242])])
        await asyncio.sleep(0.05)
    sub.stats.gaps = sub.stats.replays = sub.stats.stale_marks = fed.stale = 0


@pytest.mark.parametrize("vllm_binds", [True, False])
async def test_subscriber_feeds_index_over_zmq(
    publishers: Any, kv_schema: Any, vllm_binds: bool
) -> None:
    port = free_port()
    fed = Fed()
    # vLLM's own endpoint setting: a wildcard makes it bind; a concrete host makes it connect.
    vllm_endpoint = f"tcp://*:{port}" if vllm_binds else f"tcp://127.0.0.1:{port}"
    sub = KVEventSubscriber(
        "http://127.0.0.1:1", vllm_endpoint, fed.apply, fed.mark_stale, topic="kv"
    )
    if vllm_binds:
        pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    async with running(sub):
        if not vllm_binds:
            pub = publishers(f"tcp://127.0.0.1:{port}", bind=False)
        await connected(pub, sub, kv_schema, fed)
        ids = tokens(12)
        own = chain_hashes(ids, BS)
        pub.send([kv_schema.Stored([11, 12, 13], None, ids, BS, medium="GPU")])
        await until(lambda: fed.index.match(own) == [3])
        pub.send([kv_schema.Removed([13], medium="GPU")])
        await until(lambda: fed.index.match(own) == [2])
        assert sub.stats.gaps == 0 and fed.stale == 0
        assert sub.stats.last_lag_s < 5


async def test_gap_without_replay_marks_stale_then_recovers(
    publishers: Any, kv_schema: Any
) -> None:
    port = free_port()
    fed = Fed()
    sub = KVEventSubscriber(
        "http://127.0.0.1:1", f"tcp://*:{port}", fed.apply, fed.mark_stale, topic="kv"
    )
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    async with running(sub):
        await connected(pub, sub, kv_schema, fed)
        a, b = tokens(8), tokens(8, 100)
        own_a, own_b = chain_hashes(a, BS), chain_hashes(b, BS)
        pub.send([kv_schema.Stored([1, 2], None, a, BS)])
        await until(lambda: fed.index.match(own_a) == [2])
        pub.send([kv_schema.Removed([1, 2])], drop=True)  # lost: the index would be wrong
        pub.send([kv_schema.Stored([3, 4], None, b, BS)])
        await until(lambda: fed.index.match(own_b) == [2])
        assert fed.stale == 1 and sub.stats.gaps == 1
        assert fed.index.match(own_a) == [0]  # stale entries dropped, not trusted


async def test_gap_is_replayed_from_the_replay_socket(publishers: Any, kv_schema: Any) -> None:
    port, replay_port = free_port(), free_port()
    fed = Fed()
    sub = KVEventSubscriber(
        "http://127.0.0.1:1",
        f"tcp://*:{port}",
        fed.apply,
        fed.mark_stale,
        replay_endpoint=f"tcp://*:{replay_port}",
        topic="kv",
    )
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True, replay=f"tcp://127.0.0.1:{replay_port}")
    async with running(sub):
        await connected(pub, sub, kv_schema, fed)
        ids = tokens(16)
        own = chain_hashes(ids, BS)
        pub.send([kv_schema.Stored([1], None, ids[:4], BS)])
        pub.send([kv_schema.Stored([2], 1, ids[4:8], BS)], drop=True)
        pub.send([kv_schema.Stored([3], 2, ids[8:12], BS)], drop=True)
        pub.send([kv_schema.Stored([4], 3, ids[12:16], BS)])
        await until(lambda: fed.index.match(own) == [4])
        assert sub.stats.gaps == 1 and sub.stats.replays == 1 and fed.stale == 0


async def test_publisher_restart_clears_the_replica(publishers: Any, kv_schema: Any) -> None:
    port = free_port()
    fed = Fed()
    sub = KVEventSubscriber(
        "http://127.0.0.1:1", f"tcp://*:{port}", fed.apply, fed.mark_stale, topic="kv"
    )
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    async with running(sub):
        await connected(pub, sub, kv_schema, fed)
        ids = tokens(8)
        pub.send([kv_schema.Stored([1, 2], None, ids, BS)])
        await until(lambda: fed.index.cached_blocks(0) == 2)
        pub.seq = 0  # the engine restarted: numbering starts again, its cache is empty
        pub.send([kv_schema.Stored([9], None, tokens(4, 50), BS)])
        await until(lambda: sub.stats.restarts == 1)
        await until(lambda: fed.index.cached_blocks(0) == 1)


async def test_garbage_frames_do_not_stop_the_subscriber(publishers: Any, kv_schema: Any) -> None:
    port = free_port()
    fed = Fed()
    sub = KVEventSubscriber(
        "http://127.0.0.1:1", f"tcp://*:{port}", fed.apply, fed.mark_stale, topic="kv"
    )
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    async with running(sub):
        await connected(pub, sub, kv_schema, fed)
        pub.send_raw([b"kv", b"short"])
        pub.send_raw([b"kv", pub.seq.to_bytes(8, "big"), b"\xc1garbage"])
        pub.seq += 1
        ids = tokens(4)
        pub.send([kv_schema.Stored([1], None, ids, BS)])
        await until(lambda: fed.index.match(chain_hashes(ids, BS)) == [1])
        assert sub.stats.decode_errors == 2
