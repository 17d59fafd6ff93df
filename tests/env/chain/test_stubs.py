"""Stubbing functions and ordering a chain: pure, on hand-written sources."""

from __future__ import annotations

import textwrap

import pytest

from kvharness.env.chain.stubs import StubError, apply_stubs, chain_order, make_stub

SOURCE = textwrap.dedent(
    '''\
    import functools


    def base(x):
        """Double x.

        More words here."""
        return 2 * x


    @functools.lru_cache
    def uses_base(x):
        y = base(x)
        return y + 1


    def top(x):
        return uses_base(x) + base(x)


    def one_liner(x): return x


    def only_doc():
        """Nothing else."""
    '''
)


def test_a_stub_keeps_decorators_signature_and_docstring() -> None:
    stub = make_stub("m.py", SOURCE, "base")
    assert (
        stub.stub
        == 'def base(x):\n    """Double x.\n\n    More words here."""\n    raise NotImplementedError\n'
    )
    assert stub.original.endswith("    return 2 * x\n")
    assert stub.doc == "Double x."
    assert stub.calls == frozenset()
    decorated = make_stub("m.py", SOURCE, "uses_base")
    assert decorated.stub.startswith("@functools.lru_cache\ndef uses_base(x):\n")
    assert decorated.stub.endswith("    raise NotImplementedError\n")
    assert decorated.calls == {"base"}
    lines = SOURCE.splitlines()
    assert lines[decorated.line - 1] == "@functools.lru_cache"
    assert lines[decorated.end_line - 1] == "    return y + 1"


def test_apply_stubs_replaces_only_the_stubbed_functions() -> None:
    stubs = [make_stub("m.py", SOURCE, n) for n in ("base", "top")]
    out = apply_stubs(SOURCE, stubs)
    namespace: dict[str, object] = {}
    exec(compile(out, "m.py", "exec"), namespace)
    with pytest.raises(NotImplementedError):
        namespace["base"](1)  # type: ignore[operator]
    with pytest.raises(NotImplementedError):
        namespace["top"](1)  # type: ignore[operator]
    assert "return y + 1" in out and "return 2 * x" not in out
    assert apply_stubs(SOURCE, []) == SOURCE


@pytest.mark.parametrize(
    ("name", "why"),
    [("missing", "0 top-level"), ("one_liner", "on the line"), ("only_doc", "docstring")],
)
def test_functions_that_cannot_be_stubbed_are_refused(name: str, why: str) -> None:
    with pytest.raises(StubError, match=why):
        make_stub("m.py", SOURCE, name)


def test_chain_order_puts_callees_first_and_keeps_the_given_order_otherwise() -> None:
    stubs = [make_stub("m.py", SOURCE, n) for n in ("top", "uses_base", "base")]
    assert [s.name for s in chain_order(stubs)] == ["base", "uses_base", "top"]
    free = [make_stub("m.py", SOURCE, n) for n in ("base", "uses_base")]
    assert [s.name for s in chain_order(free)] == ["base", "uses_base"]


def test_a_call_cycle_is_refused() -> None:
    source = "def a():\n    return b()\n\n\ndef b():\n    return a()\n"
    with pytest.raises(ValueError, match="cycle: a, b"):
        chain_order([make_stub("m.py", source, "a"), make_stub("m.py", source, "b")])
