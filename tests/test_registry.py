"""The by-name registry that policies, eviction policies and agents are chosen from."""

from __future__ import annotations

import pytest

from kvharness.registry import Registry


class _Thing:
    def __init__(self, size: int = 1) -> None:
        self.size = size


def test_make_passes_options_and_unknown_names_list_the_known() -> None:
    reg: Registry[_Thing] = Registry("thing", {"b": _Thing})
    reg.register("a", lambda: _Thing(7))
    assert reg.make("b", size=3).size == 3 and reg.make("a").size == 7
    assert reg.names() == ["a", "b"] and list(reg) == ["b", "a"] and len(reg) == 2
    assert "a" in reg and reg["b"] is _Thing
    with pytest.raises(ValueError, match=r"^unknown thing 'c'; choose from a, b$"):
        reg.make("c")
    with pytest.raises(ValueError, match="thing 'a' registered twice"):
        reg.register("a", _Thing)
