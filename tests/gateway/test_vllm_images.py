"""The gateway in front of a real vLLM-CPU replica of the tiny VLM (Idefics3), KV events on:
screenshot turns hashed as the engine keys them, the engine naming image blocks by the uuids
the gateway forwarded, and the index crediting the cached image blocks of the turn before."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import zmq

from kvharness.bench.run import reset_prefix_cache
from kvharness.bench.screens import image_png
from kvharness.engine.events import BlockStored, KVEvent
from kvharness.gateway.hash_translator import HashTranslator
from kvharness.gateway.kv_events import decode_batch
from kvharness.testing import VllmReplica
from kvharness.testing.tiny_vlm import image_tokens
from kvharness.workload.recording import load_recording

pytestmark = pytest.mark.vllm

BS = 128
W, H = 640, 400
SYSTEM = "You operate a desktop for the user. Look at each screenshot, then act. " * 12


def wildcard(replica: VllmReplica) -> str:
    assert replica.kv_events is not None
    return "tcp://*:" + replica.kv_events.rsplit(":", 1)[1]


def shot(screens: Path, h: int) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(image_png(h, W, H, screens)).decode()
    return {"type": "image_url", "image_url": {"url": url}}


async def until(cond: Any, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.fixture
def engine_events(vlm_replica: VllmReplica) -> Iterator[list[KVEvent]]:
    """The replica's KV events as they arrive, decoded (a subscriber of the test's own)."""
    assert vlm_replica.kv_events is not None
    events: list[KVEvent] = []
    stop = threading.Event()
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    sock.connect(vlm_replica.kv_events)
    sock.setsockopt(zmq.SUBSCRIBE, b"")

    def run() -> None:
        while not stop.is_set():
            if sock.poll(100):
                events.extend(decode_batch(sock.recv_multipart()[-1]).events)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield events
    finally:
        stop.set()
        thread.join(5)
        sock.close(0)


def forwarded(gw: Any, form: str) -> float:
    value = gw.metrics.registry.get_sample_value(
        "kvharness_gateway_images_forwarded_total", {"form": form}
    )
    return value or 0.0


def refusals(gw: Any) -> float:
    value = gw.metrics.registry.get_sample_value("kvharness_gateway_image_name_refusals_total")
    return value or 0.0


async def test_image_turns_are_credited_and_hashed_as_the_engine_stores_them(
    vlm_replica: VllmReplica,
    tiny_vlm_dir: Path,
    screens_dir: Path,
    gateways: Any,
    engine_events: list[KVEvent],
    tmp_path: Path,
) -> None:
    rep = vlm_replica
    gw = await gateways(
        backends=(rep.url,),
        tokenizer=str(tiny_vlm_dir),
        kv_events={rep.url: wildcard(rep)},
        verify_hashing_every=1,
        record=str(tmp_path / "rec"),
    )
    sub = gw.replicas.subscribers[0]
    assert sub is not None
    await until(lambda: sub._sub is not None)
    await asyncio.sleep(1.0)  # PUB/SUB drops what is published before the subscription
    assert await asyncio.to_thread(reset_prefix_cache, rep.url)
    await until(lambda: gw.pipeline.hasher.block_size == BS)

    turn1: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [
            {"type": "text", "text": "Open the settings page. Here is the screen:"},
            shot(screens_dir, 11),
            {"type": "text", "text": "What do you click? " + "Think it over first. " * 40},
        ]},
    ]  # fmt: skip
    turn2: list[Any] = [
        *turn1,
        {"role": "assistant", "content": "I click the gear icon."},
        {"role": "user", "content": [
            {"type": "text", "text": "Done. The screen now:"},
            {**shot(screens_dir, 12), "uuid": "client-named-12"},
            {"type": "text", "text": "Next?"},
        ]},
    ]  # fmt: skip

    def hashed(messages: list[Any], probe: str) -> Any:
        body = json.dumps({"model": rep.model, "messages": messages}).encode()
        return gw.pipeline.prepare(body, "chat", probe).hashed

    c = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none",
                           max_retries=0, timeout=300)  # fmt: skip
    async with c:
        head = {"x-session-id": "cu-1"}
        first = await c.chat.completions.create(
            model=rep.model, messages=turn1, max_tokens=4, extra_headers=head
        )
        h1 = hashed(turn1, "probe-1")
        assert first.usage is not None and first.usage.prompt_tokens == h1.num_tokens
        (a,) = h1.images
        assert a.name.startswith("kvh-") and a.length == image_tokens(W, H)
        n1 = len(h1.block_hashes)
        assert a.offset + a.length <= n1 * BS  # the image lies in full blocks
        await until(lambda: gw.index.match(h1.block_hashes)[0] == n1)

        # The next turn's prompt, before it is sent: its matched prefix covers turn 1's image.
        h2 = hashed(turn2, "probe-2")
        assert h2.block_hashes[:n1] == h1.block_hashes
        matched = gw.index.match(h2.block_hashes)[0]
        assert matched == n1
        second = await c.chat.completions.create(
            model=rep.model, messages=turn2, max_tokens=4, extra_headers=head
        )
        assert second.usage is not None and second.usage.prompt_tokens == h2.num_tokens
        details = second.usage.prompt_tokens_details
        assert details is not None and details.cached_tokens == n1 * BS
        n2 = len(h2.block_hashes)
        await until(lambda: gw.index.match(h2.block_hashes)[0] == n2)
    # Turn 1's image went whole, then by its name alone: the engine held it, and answered.
    assert forwarded(gw, "whole") == 2 and forwarded(gw, "name") == 1
    assert refusals(gw) == 0

    # The recording places both turns' images, the first under one hash in both.
    (session,) = load_recording(tmp_path / "rec").sessions
    one, two = (t.images for t in session.turns)
    assert [(im.offset, im.tokens, im.width, im.height) for im in two] == [
        (a.offset, a.length, W, H), (h2.images[1].offset, image_tokens(W, H), W, H)
    ]  # fmt: skip
    assert one == two[:1] and two[0].hash != two[1].hash

    # The engine named the image blocks by the gateway's name and the client's uuid, and its
    # stores translate to exactly the gateway's hashes of both prompts.
    def stores() -> list[BlockStored]:
        return [e for e in engine_events if isinstance(e, BlockStored)]

    await until(lambda: sum(len(e.block_hashes) for e in stores()) >= n2)
    keys = [k for e in stores() for ks in e.extra_keys or () for k in ks or ()]
    names = {k[0] for k in keys if isinstance(k, tuple)}
    assert names == {a.name, "client-named-12"}
    t = HashTranslator()
    translated: set[int] = set()
    for e in engine_events:
        x = t.translate(e)
        if isinstance(x, BlockStored):
            translated.update(x.block_hashes)
    assert translated == set(h2.block_hashes)
    assert sub.stats.untranslated_blocks == 0
    assert gw.pipeline.hasher.stats.mismatches == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_an_image_the_engine_does_not_hold_is_sent_whole_after_its_refusal(
    vlm_replica: VllmReplica, tiny_vlm_dir: Path, screens_dir: Path, gateways: Any, stream: bool
) -> None:
    rep = vlm_replica
    gw = await gateways(backends=(rep.url,), tokenizer=str(tiny_vlm_dir))
    messages: list[Any] = [
        {"role": "user", "content": [
            {"type": "text", "text": "The screen:"}, shot(screens_dir, 30 + stream),
            {"type": "text", "text": "Click?"},
        ]},
    ]  # fmt: skip
    body = json.dumps({"model": rep.model, "messages": messages}).encode()
    (image,) = gw.pipeline.prepare(body, "chat", None).hashed.images
    # The gateway takes the engine to hold an image it was never sent, and a few more.
    gw.pipeline.held_images.sent(0, ["kvh-gone-1", "kvh-gone-2", "kvh-gone-3", image.name])
    c = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none",
                           max_retries=0, timeout=300)  # fmt: skip
    async with c:
        if stream:
            chunks = await c.chat.completions.create(
                model=rep.model, messages=messages, max_tokens=4, stream=True
            )
            ends = [ch.choices[0].finish_reason async for ch in chunks if ch.choices]
            assert ends and ends[-1] is not None  # the stream ran to its end
        else:
            answer = await c.chat.completions.create(
                model=rep.model, messages=messages, max_tokens=4
            )
            assert answer.usage is not None and answer.usage.completion_tokens > 0
        # Refused by name, answered whole; the engine holds it now, and less is assumed held.
        assert refusals(gw) == 1 and forwarded(gw, "whole") == 1 and forwarded(gw, "name") == 0
        held = gw.pipeline.held_images.held(0)
        assert image.name in held and "kvh-gone-3" not in held
        assert gw.pipeline.held_images.limit(0) == 2  # half the 4 it was taken to hold
        again = await c.chat.completions.create(model=rep.model, messages=messages, max_tokens=4)
        assert again.usage is not None and again.usage.completion_tokens > 0
    assert refusals(gw) == 1 and forwarded(gw, "name") == 1
