"""Eviction policies by name."""

from __future__ import annotations

import pytest

from kvharness.engine.eviction import EVICTIONS, LRU, SessionTTL, ToolTTL, make_eviction


def test_eviction_policies_by_name_share_the_runs_ttls() -> None:
    ttls = ToolTTL()
    assert EVICTIONS.names() == ["lru", "ttl"]
    assert type(make_eviction("lru", ttls)) is LRU
    ttl = make_eviction("ttl", ttls)
    assert isinstance(ttl, SessionTTL) and ttl.ttls is ttls
    assert isinstance(make_eviction("ttl"), SessionTTL)
    with pytest.raises(ValueError, match=r"^unknown eviction policy 'fifo'; choose from lru, ttl$"):
        make_eviction("fifo")
