"""The request pipeline's parse-and-hash step, built from its parts without the aiohttp app or
any socket: the router, the replicas (never started) and the engines' real tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.metrics import GatewayMetrics
from kvharness.gateway.pipeline import Pipeline
from kvharness.gateway.replicas import Replicas
from kvharness.gateway.requests import BadRequest
from kvharness.gateway.router import Router
from kvharness.gateway.tokenizer import EngineTokenizer, load_engine_tokenizer
from kvharness.routing.base import ReplicaState
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy
from kvharness.workload.chain import chain_hashes

BS = 16


def pipeline(
    tokenizer: EngineTokenizer | None, capacity: int = 10_000, **config: object
) -> Pipeline:
    cfg = GatewayConfig(backends=("http://127.0.0.1:9",), block_size=BS, **config)  # type: ignore[arg-type]
    states = [ReplicaState(u, capacity_blocks=capacity, block_size=BS) for u in cfg.backends]
    router = Router(make_policy("round_robin"), states, PrefixIndex(1))
    return Pipeline(cfg, router, Replicas(cfg, router, tokenizer), GatewayMetrics(), tokenizer)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> EngineTokenizer:
    return load_engine_tokenizer(tiny_model_dir)


def test_a_text_prompt_is_hashed_as_the_engine_tokenises_it_and_sent_as_ids(
    tok: EngineTokenizer,
) -> None:
    p = pipeline(tok)
    text = "def main():\n    return 42  # " + "context " * 40
    body = json.dumps({"prompt": text, "max_tokens": 7, "temperature": 0}).encode()
    prep = p.prepare(body, "completion", "s1")
    ids = tok.encode_ids(text, add_special_tokens=True)
    assert prep.hashed.num_tokens == len(ids) and list(prep.hashed.token_ids) == ids
    assert list(prep.hashed.block_hashes) == chain_hashes(ids, BS)
    assert prep.max_output_tokens == 7
    assert prep.as_ids is not None
    sent = msgspec.json.decode(prep.as_ids)
    assert sent == {"prompt": ids, "max_tokens": 7, "temperature": 0}
    again = p.prepare(body, "completion", "s1")  # the session's repeat: reused, same hashes
    assert again.hashed.block_hashes == prep.hashed.block_hashes
    assert p.hasher.stats.tokens_reused >= len(ids)


def test_chains_are_cut_at_the_largest_replicas_capacity_and_echo_goes_as_text(
    tok: EngineTokenizer,
) -> None:
    p = pipeline(tok, capacity=3)
    body = json.dumps({"prompt": "word " * 400, "echo": True}).encode()
    prep = p.prepare(body, "completion", None)
    assert len(prep.hashed.block_hashes) == 3 and prep.hashed.num_tokens > 3 * BS
    assert prep.as_ids is None  # echo repeats the prompt's text: the engine needs the text
    off = pipeline(tok, forward_token_ids=False).prepare(
        json.dumps({"prompt": "word " * 40}).encode(), "completion", None
    )
    assert off.as_ids is None


def test_without_a_tokenizer_prompts_are_hashed_by_their_bytes() -> None:
    p = pipeline(None)
    text = "x" * (4 * BS * 5 + 3)
    prep = p.prepare(json.dumps({"prompt": text}).encode(), "completion", None)
    assert len(prep.hashed.block_hashes) == 5 and prep.hashed.num_tokens == len(text) // 4
    assert prep.as_ids is None and prep.hashed.token_ids == ()


@pytest.mark.parametrize(
    ("body", "kind", "reason"),
    [
        (b"{not json", "completion", "JSON"),
        (b'{"prompt": "x", "add_special_tokens": 1}', "completion", "add_special_tokens"),
        (b'{"messages": "hello"}', "chat", "messages"),
    ],
)
def test_bodies_it_cannot_take_are_refused_with_a_reason(
    tok: EngineTokenizer, body: bytes, kind: str, reason: str
) -> None:
    with pytest.raises(BadRequest, match=reason):
        pipeline(tok).prepare(body, kind, None)  # type: ignore[arg-type]
