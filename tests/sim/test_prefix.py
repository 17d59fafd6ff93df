"""MaskIndex answers exactly as the routing package's PrefixIndex on the same KV events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from kvharness.routing.index import PrefixIndex
from kvharness.sim.prefix import MaskIndex

event = st.one_of(
    st.builds(
        lambda hs, cpu: BlockStored(tuple(hs), None, medium="CPU" if cpu else None),
        st.lists(st.integers(0, 12), max_size=6),
        st.booleans(),
    ),
    st.builds(
        lambda hs, cpu: BlockRemoved(tuple(hs), "CPU" if cpu else None),
        st.lists(st.integers(0, 12), max_size=6),
        st.booleans(),
    ),
    st.just(AllBlocksCleared()),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), event), max_size=40),
    st.lists(st.lists(st.integers(0, 12), max_size=8), min_size=1, max_size=5),
)
def test_same_matches_as_prefix_index(
    stream: list[tuple[int, KVEvent]], queries: list[list[int]]
) -> None:
    ref, fast = PrefixIndex(5), MaskIndex(5)
    for replica, e in stream:
        ref.apply(replica, e)
        fast.apply_all(replica, [e])
        for q in queries:
            assert fast.match(q) == ref.match(q)
