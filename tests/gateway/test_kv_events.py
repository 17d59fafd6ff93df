from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kvharness.gateway.hashing import chain_hashes
from kvharness.gateway.kv_events import (
    DecodeError,
    HashTranslator,
    KVEventSubscriber,
    decode_batch,
    event_endpoint_mode,
    parse_event_specs,
)
from kvharness.routing.index import PrefixIndex
from kvharness.testing.vllm import free_port

BS = 4


def tokens(n: int, base: int = 0) -> list[int]:
    return [base + i for i in range(n)]


# --- decoding ----------------------------------------------------------------------------


def test_decode_map_layout_with_bytes_hashes(kv_schema: Any) -> None:
    h1, h2 = b"\x01" * 32, b"\x02" * 32
    payload = kv_schema.encode_batch(
        [
            kv_schema.Stored([h1, h2], None, tokens(8), BS, medium="GPU"),
            kv_schema.Removed([h1], medium="GPU"),
            kv_schema.Cleared(),
        ],
        ts=12.5,
    )
    batch = decode_batch(payload)
    assert batch.ts == 12.5 and batch.dp_rank == 0
    stored, removed, cleared = batch.events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == (int.from_bytes(h1, "big"), int.from_bytes(h2, "big"))
    assert stored.parent_block_hash is None and stored.token_ids == tuple(tokens(8))
    assert stored.block_size == BS and stored.medium == "GPU"
    assert removed == BlockRemoved((int.from_bytes(h1, "big"),), "GPU")
    assert cleared == AllBlocksCleared()


def test_decode_array_layout(kv_schema: Any) -> None:
    payload = kv_schema.encode_batch(
        [kv_schema.StoredA([7, 8], 6, tokens(8), BS, None, None), kv_schema.RemovedA([7], None)]
    )
    stored, removed = decode_batch(payload).events
    assert stored == BlockStored((7, 8), 6, tuple(tokens(8)), BS, None)
    assert removed == BlockRemoved((7,), None)


def test_decode_skips_unknown_event_kinds() -> None:
    payload = msgspec.msgpack.encode([1.0, [{"type": "SomethingNew", "x": 1}], None])
    assert decode_batch(payload).events == ()


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgspec.msgpack.encode("hello"),
        msgspec.msgpack.encode([1.0]),
        msgspec.msgpack.encode(["x", []]),
        msgspec.msgpack.encode([1.0, [{"type": "BlockStored", "block_hashes": "no"}]]),
        msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved", "block_hashes": [1.5]}]]),
        msgspec.msgpack.encode([1.0, [[1, 2, 3]]]),
    ],
)
def test_decode_rejects_malformed(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_batch(payload)


# --- translation -------------------------------------------------------------------------


def test_translator_renames_engine_hashes_to_gateway_chain() -> None:
    t = HashTranslator()
    ids = tokens(12)
    own = chain_hashes(ids, BS)
    first = t.translate(BlockStored((101, 102), None, tuple(ids[:8]), BS))
    assert isinstance(first, BlockStored)
    assert first.block_hashes == tuple(own[:2]) and first.parent_block_hash is None
    # A continuation names its parent by the engine's hash; the gateway's parent is own[1].
    second = t.translate(BlockStored((103,), 102, tuple(ids[8:12]), BS))
    assert isinstance(second, BlockStored)
    assert second.block_hashes == (own[2],) and second.parent_block_hash == own[1]
    assert t.translate(BlockRemoved((103, 999))) == BlockRemoved((own[2],))
    assert t.translate(BlockRemoved((999,))) is None
    assert len(t) == 2


def test_translator_counts_aliases() -> None:
    # Two engine hashes (e.g. different cache salts) for the same tokens: one gateway block,
    # gone only when both are.
    t = HashTranslator()
    ids = tuple(tokens(BS))
    t.translate(BlockStored((1,), None, ids, BS))
    t.translate(BlockStored((2,), None, ids, BS))
    assert t.translate(BlockRemoved((1,))) is None
    assert t.translate(BlockRemoved((2,))) == BlockRemoved(tuple(chain_hashes(list(ids), BS)))


def test_translator_unknown_parent_and_recovery() -> None:
    t = HashTranslator(recovery_stores=2)
    ids = tokens(12)
    own = chain_hashes(ids, BS)
    # The stores of blocks 0-1 were lost: block 2's parent (engine hash 52) is unknown.
    assert t.translate(BlockStored((53,), 52, tuple(ids[8:]), BS)) is None
    t.start_recovery()
    t.learn_route(own, ids, BS)  # the gateway routed this prompt
    got = t.translate(BlockStored((53,), 52, tuple(ids[8:]), BS))
    assert isinstance(got, BlockStored) and got.block_hashes == (own[2],)
    assert got.parent_block_hash == own[1]
    # Recovery ends after `recovery_stores` stores that needed no help.
    t.translate(BlockStored((60,), None, tuple(tokens(BS, 500)), BS))
    t.translate(BlockStored((61,), 60, tuple(tokens(BS, 600)), BS))
    assert not t.recovering


def test_translator_rejects_short_token_ids() -> None:
    with pytest.raises(ValueError, match="carries 3 token ids"):
        HashTranslator().translate(BlockStored((1,), None, (1, 2, 3), BS))


def test_endpoint_modes_mirror_vllm() -> None:
    assert event_endpoint_mode("tcp://*:5557", "http://10.0.0.2:8000") == (
        "connect",
        "tcp://10.0.0.2:5557",
    )
    assert event_endpoint_mode("tcp://127.0.0.1:5557", "http://x:1") == (
        "bind",
        "tcp://127.0.0.1:5557",
    )
    with pytest.raises(ValueError, match="needs a port"):
        event_endpoint_mode("tcp://host", "http://x")
    with pytest.raises(ValueError, match="tcp://"):
        event_endpoint_mode("udp://x:1", "http://x")
    assert parse_event_specs(["http://a:1/=tcp://*:5"], "--kv-events") == {
        "http://a:1": "tcp://*:5"
    }
    with pytest.raises(ValueError, match="BACKEND_URL="):
        parse_event_specs(["tcp://*:5"], "--kv-events")


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
