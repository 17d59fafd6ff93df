"""Configurations to JSON and back: one path, secrets masked, older field names still read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest

from kvharness.configs import SECRET_SET, from_json, mib, opt, option, to_json_dict


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    timeout_s: float = opt(300.0, help="seconds per attempt", formerly=("timeout",))

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    backends: tuple[str, ...] = opt(help="base URLs", formerly=("targets",))
    key: str | None = opt(None, help="an API key", secret=True)
    options: Mapping[str, object] = opt(factory=dict, help="options")
    where: Path = opt(Path("out"), help="output folder")
    retry: Retry = field(default_factory=Retry)


def test_to_json_dict_keeps_field_order_and_masks_secrets() -> None:
    cfg = Run(backends=("http://a",), key="k-123", options={"x": 1})
    data = to_json_dict(cfg)
    assert list(data) == ["backends", "key", "options", "where", "retry"]
    assert data["key"] == SECRET_SET and "k-123" not in json.dumps(data)
    assert data["where"] == "out" and data["retry"] == {"timeout_s": 300.0}
    assert to_json_dict(Run(backends=()))["key"] is None
    assert "k-123" not in repr(cfg)


def test_to_json_dict_takes_structs_and_mappings_and_refuses_the_rest() -> None:
    class S(msgspec.Struct):
        a: int = 1

    assert to_json_dict(S()) == {"a": 1}
    assert to_json_dict({"a": 1, "p": Path("x")}) == {"a": 1, "p": "x"}
    with pytest.raises(TypeError, match="a configuration must be"):
        to_json_dict([1, 2])


def test_a_round_trip_gives_the_same_config() -> None:
    cfg = Run(backends=("http://a", "http://b"), options={"x": [1, 2]}, retry=Retry(timeout_s=5))
    text = msgspec.json.encode(to_json_dict(cfg))
    assert from_json(Run, text) == cfg
    assert from_json(Run, json.loads(text)) == cfg


def test_fields_under_their_former_names_are_read() -> None:
    old = b'{"targets": ["http://a"], "retry": {"timeout": 7.5}, "label": "gone"}'
    assert from_json(Run, old) == Run(backends=("http://a",), retry=Retry(timeout_s=7.5))
    both = {"targets": ["http://old"], "backends": ["http://new"]}
    assert from_json(Run, both).backends == ("http://new",)


@pytest.mark.parametrize(
    ("text", "message"),
    [(b"[1]", "expected a JSON object"), (b"{}", "missing required field `backends`"),
     (b'{"backends": [], "retry": {"timeout_s": 0}}', "timeout_s must be > 0"),
     (b"{", "truncated")],
)  # fmt: skip
def test_bad_json_says_what_is_wrong(text: bytes, message: str) -> None:
    with pytest.raises(msgspec.DecodeError, match=message):
        from_json(Run, text)


def test_the_option_is_read_back_from_the_field() -> None:
    from dataclasses import fields

    o = option(fields(Run)[0])
    assert o is not None and o.help == "base URLs" and o.formerly == ("targets",)
    assert option(fields(Run)[-1]) is None
    assert mib(64 << 20) == "64 MiB" and mib(1000) == "1000 bytes"
