"""Decoding vLLM's KV-event batches, and the endpoints they come from."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored
from kvharness.gateway.kv_events import (
    DecodeError,
    decode_batch,
    event_endpoint_mode,
    parse_event_specs,
)

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
