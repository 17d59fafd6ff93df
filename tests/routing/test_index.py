from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kvharness.routing.index import PrefixIndex


def test_match_counts_leading_blocks_per_replica() -> None:
    idx = PrefixIndex(3)
    idx.apply(0, BlockStored((1, 2, 3), None))
    idx.apply(1, BlockStored((1, 2), None))
    idx.apply(2, BlockStored((2, 3), 1))  # holds 2 and 3 but not the first block
    assert idx.match([1, 2, 3, 4]) == [3, 2, 0]
    assert idx.match([1, 9, 3]) == [1, 1, 0]
    assert idx.match([7]) == [0, 0, 0]
    assert idx.match([]) == [0, 0, 0]


def test_removal_cuts_the_prefix_at_the_hole() -> None:
    idx = PrefixIndex(1)
    idx.apply(0, BlockStored((1, 2, 3, 4), None))
    idx.apply(0, BlockRemoved((3,)))
    assert idx.match([1, 2, 3, 4]) == [2]
    assert idx.cached_blocks(0) == 3


def test_all_blocks_cleared_touches_only_that_replica() -> None:
    idx = PrefixIndex(2)
    idx.apply(0, BlockStored((1, 2), None))
    idx.apply(1, BlockStored((1, 2), None))
    idx.apply(0, AllBlocksCleared())
    assert idx.match([1, 2]) == [0, 2]


def test_cpu_tier_counts_until_both_tiers_drop_the_block() -> None:
    idx = PrefixIndex(1)
    idx.apply(0, BlockStored((1, 2), None))
    idx.apply(0, BlockStored((1, 2), None, medium="CPU"))
    idx.apply(0, BlockRemoved((1, 2), medium="GPU"))
    assert idx.match([1, 2]) == [2]
    assert idx.match([1, 2], device_only=True) == [0]
    idx.apply(0, BlockRemoved((2,), medium="CPU"))
    assert idx.match([1, 2]) == [1]


def test_mark_stale_forgets_a_replica_until_new_events_arrive() -> None:
    idx = PrefixIndex(2)
    idx.apply(0, BlockStored((1, 2), None))
    idx.apply(1, BlockStored((1,), None))
    idx.mark_stale(0)
    assert idx.match([1, 2]) == [0, 1]
    idx.apply(0, BlockStored((1,), None))
    assert idx.match([1, 2]) == [1, 1]


def test_record_routed_is_a_bounded_lru() -> None:
    idx = PrefixIndex(2, lru_capacity=4)
    idx.record_routed(0, [1, 2, 3])
    idx.record_routed(0, [1, 2])  # touches 1, 2: now 3 is the least recently used
    idx.record_routed(0, [1, 5, 6, 7])  # three new blocks: evicts 3, then 2 (1 was touched)
    assert idx.cached_blocks(0) == 4
    assert idx.match([1, 2]) == [1, 0]
    assert idx.match([1, 5, 6, 7]) == [4, 0]
    assert not idx.holds(0, 3)


def test_lru_capacity_per_replica_and_shrinking() -> None:
    idx = PrefixIndex(2, lru_capacity=[2, 10])
    idx.record_routed(0, [1, 2, 3])
    idx.record_routed(1, [1, 2, 3])
    assert idx.match([1, 2, 3]) == [0, 3]  # replica 0 kept only 2 and 3
    idx.set_lru_capacity(1, 1)
    assert idx.cached_blocks(1) == 1
    assert idx.holds(1, 3)


def test_add_replica() -> None:
    idx = PrefixIndex(0)
    assert idx.add_replica() == 0
    idx.apply(0, BlockStored((4,), None))
    assert idx.match([4]) == [1]


def test_match_cost_does_not_scan_unrelated_blocks() -> None:
    """Match touches only the request's blocks: a huge unrelated cache changes nothing."""
    idx = PrefixIndex(4)
    for r in range(4):
        idx.apply(r, BlockStored(tuple(range(r * 100_000, r * 100_000 + 50_000)), None))
    idx.apply(2, BlockStored((-1, -2), None))
    calls = 0
    where = idx._where

    class Spy(dict[int, set[int]]):
        def get(self, key, default=None):  # type: ignore[no-untyped-def, override]
            nonlocal calls
            calls += 1
            return where.get(key, default)

    idx._where = Spy()
    assert idx.match([-1, -2, -3]) == [0, 0, 2, 0]
    assert calls <= 3


# --- property: the index equals the ground truth after random event streams ---------------------

HASHES = st.integers(min_value=0, max_value=12)
MEDIA = st.sampled_from([None, "GPU", "CPU"])
EVENT = st.one_of(
    st.builds(
        lambda hs, m: BlockStored(tuple(hs), None, medium=m), st.lists(HASHES, max_size=5), MEDIA
    ),
    st.builds(lambda hs, m: BlockRemoved(tuple(hs), medium=m), st.lists(HASHES, max_size=5), MEDIA),
    st.just(AllBlocksCleared()),
)
STEP = st.one_of(
    st.tuples(st.just("event"), st.integers(0, 2), EVENT),
    st.tuples(st.just("stale"), st.integers(0, 2), st.none()),
)


def _tier(medium: str | None) -> str:
    return "CPU" if medium == "CPU" else "GPU"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(STEP, max_size=40),
    st.lists(st.lists(HASHES, max_size=8), min_size=1, max_size=5),
)
def test_index_equals_ground_truth_after_random_event_streams(
    steps: list[tuple[str, int, KVEvent | None]], queries: list[list[int]]
) -> None:
    idx = PrefixIndex(3)
    truth: list[dict[str, set[int]]] = [{"GPU": set(), "CPU": set()} for _ in range(3)]
    for kind, r, event in steps:
        if kind == "stale":
            idx.mark_stale(r)
            truth[r] = {"GPU": set(), "CPU": set()}
            continue
        assert event is not None
        idx.apply(r, event)
        if isinstance(event, BlockStored):
            truth[r][_tier(event.medium)] |= set(event.block_hashes)
        elif isinstance(event, BlockRemoved):
            truth[r][_tier(event.medium)] -= set(event.block_hashes)
        else:
            truth[r] = {"GPU": set(), "CPU": set()}

    def leading(blocks: list[int], held: set[int]) -> int:
        n = 0
        for h in blocks:
            if h not in held:
                break
            n += 1
        return n

    for q in queries:
        assert idx.match(q) == [leading(q, t["GPU"] | t["CPU"]) for t in truth]
        assert idx.match(q, device_only=True) == [leading(q, t["GPU"]) for t in truth]
    for r in range(3):
        assert idx.cached_blocks(r) == len(truth[r]["GPU"] | truth[r]["CPU"])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.integers(0, 1), st.lists(HASHES, max_size=6)), max_size=30),
)
def test_record_routed_equals_a_reference_lru(
    capacity: int, routed: list[tuple[int, list[int]]]
) -> None:
    idx = PrefixIndex(2, lru_capacity=capacity)
    ref: list[list[int]] = [[], []]  # least recently used first
    for r, blocks in routed:
        idx.record_routed(r, blocks)
        for h in blocks:
            if h in ref[r]:
                ref[r].remove(h)
            ref[r].append(h)
            if len(ref[r]) > capacity:
                ref[r].pop(0)
    for r in range(2):
        assert {h for h in range(13) if idx.holds(r, h)} == set(ref[r])
