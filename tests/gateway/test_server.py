"""The gateway over real HTTP on loopback, in front of FAKE OpenAI server processes.

The official ``openai`` client is the caller. The fakes answer instantly with canned text, so these
tests exercise the gateway (routing, proxying, faults, metrics); tests against real vLLM replicas
are in test_vllm.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from kvharness.gateway.app import Gateway


def client(gw: Gateway, **kw: Any) -> openai.AsyncOpenAI:
    kw.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none", **kw)


async def get(gw: Gateway, path: str) -> tuple[int, str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{gw.port}{path}") as r,
    ):
        return r.status, await r.text(), r.headers


async def post(gw: Gateway, path: str, body: bytes, **headers: str) -> tuple[int, Any, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"http://127.0.0.1:{gw.port}{path}",
            data=body,
            headers={"Content-Type": "application/json", **headers},
        ) as r,
    ):
        text = await r.text()
        try:
            return r.status, json.loads(text), r.headers
        except ValueError:
            return r.status, text, r.headers


MSGS = [{"role": "user", "content": "hello there, fix my code please"}]
LONG = [{"role": "user", "content": "context " * 200}]


async def test_chat_and_completions_with_the_openai_client(
    fake_backends: Any, gateways: Any
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), policy="round_robin")
    async with client(gw) as c:
        chat = await c.chat.completions.create(model="fake-model", messages=MSGS, max_tokens=5)
        assert chat.choices[0].message.content == " tok" * 5
        assert chat.usage is not None and chat.usage.completion_tokens == 5
        comp = await c.completions.create(model="fake-model", prompt=[1, 2, 3, 4], max_tokens=3)
        assert comp.choices[0].text == " tok" * 3
        stream = await c.chat.completions.create(
            model="fake-model", messages=MSGS, max_tokens=4, stream=True
        )
        parts = [ch.choices[0].delta.content async for ch in stream if ch.choices]
        assert "".join(p or "" for p in parts) == " tok" * 4
        cstream = await c.completions.create(
            model="fake-model", prompt="def f():", max_tokens=6, stream=True
        )
        texts = [ch.choices[0].text async for ch in cstream if ch.choices]
        assert "".join(texts) == " tok" * 6
        models = await c.models.list()
        assert [m.id for m in models.data] == ["fake-model"]
    status, text, _ = await get(gw, "/metrics")
    assert status == 200
    assert 'kvharness_gateway_requests_total{endpoint="chat",outcome="ok"' in text
    assert 'kvharness_gateway_routing_decisions_total{reason="rotation"}' in text
    # The two streamed answers' first bytes, timed from dispatch, under the replica's URL.
    assert f'kvharness_gateway_upstream_first_byte_seconds_count{{replica="{b.url}"}} 2.0' in text
    status, text, _ = await get(gw, "/status")
    st = json.loads(text)
    assert st["replicas"][0]["healthy"] and st["block_size"] == 16  # read from /metrics


async def test_errors_are_400_with_reasons(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,))
    cases = [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"model": "m"}', "'messages' must be a non-empty list"),
        (b'{"messages": [{"content": "x"}]}', "role must be a non-empty string"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "content must be"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "'stream'"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', "'max_tokens'"),
    ]
    for body, reason in cases:
        status, data, _ = await post(gw, "/v1/chat/completions", body)
        assert status == 400, body
        assert reason in data["error"]["message"], (body, data)
    status, data, _ = await post(gw, "/v1/completions", b'{"prompt": {"a": 1}}')
    assert status == 400 and "'prompt'" in data["error"]["message"]
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError, match="non-empty list"):
            await c.chat.completions.create(model="m", messages=[])
    status, data, _ = await post(gw, "/v1/nothing", b"{}")
    assert status == 404 and data["error"]["type"] == "invalid_request_error"


async def test_upstream_errors_are_relayed(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,))
    body = json.dumps({"messages": MSGS}).encode()
    status, data, headers = await post(gw, "/v1/chat/completions", body, **{"x-fake-status": "418"})
    assert status == 418 and data["error"]["message"] == "fake failure 418"
    assert headers["x-kvharness-replica"] == b.url


async def test_429_when_every_replica_is_full(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), max_queue=1, retry_after_s=2)
    body = json.dumps({"messages": MSGS}).encode()
    slow = asyncio.create_task(post(gw, "/v1/chat/completions", body, **{"x-fake-delay-ms": "800"}))
    await asyncio.sleep(0.3)
    status, data, headers = await post(gw, "/v1/chat/completions", body)
    assert status == 429 and headers["Retry-After"] == "2"
    assert "queue limit" in data["error"]["message"]
    assert (await slow)[0] == 200
    async with client(gw) as c:
        assert (await c.chat.completions.create(model="m", messages=MSGS)).choices


async def test_dead_replica_is_retried_and_taken_out(fake_backends: Any, gateways: Any) -> None:
    a, b = fake_backends(2)
    gw = await gateways(backends=(a.url, b.url), policy="round_robin", health_interval_s=30)
    async with client(gw) as c:
        for _ in range(2):  # one each: the index learns from the decisions
            await c.chat.completions.create(model="m", messages=LONG, max_tokens=2)
        held = gw.index.cached_blocks(1)
        assert held > 0
        b.kill()
        for _ in range(6):
            r = await c.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
            assert r.choices[0].message.content == " tok" * 2
    assert not gw.router.healthy[1] and gw.router.healthy[0]
    # Only suspected (no health check has failed yet): what the index knows of it is kept.
    assert gw.index.cached_blocks(1) == held
    _, text, _ = await get(gw, "/metrics")
    assert 'kvharness_gateway_retries_total{reason="upstream_failed"} 1.0' in text
    assert f'kvharness_gateway_replica_healthy{{replica="{b.url}"}} 0.0' in text
    assert f'kvharness_gateway_replica_healthy{{replica="{a.url}"}} 1.0' in text


async def test_health_checks_take_out_and_bring_back(fake_backends: Any, gateways: Any) -> None:
    a, b = fake_backends(2)
    gw = await gateways(
        backends=(a.url, b.url), policy="round_robin", health_interval_s=0.1, unhealthy_after=2
    )
    async with client(gw) as c:
        for _ in range(2):
            await c.chat.completions.create(model="m", messages=LONG, max_tokens=2)
    assert gw.index.cached_blocks(1) > 0
    b.kill()
    for _ in range(50):
        if not gw.router.healthy[1]:
            break
        await asyncio.sleep(0.1)
    assert not gw.router.healthy[1]
    assert gw.index.cached_blocks(1) == 0  # confirmed down: it will come back empty
    status, text, _ = await get(gw, "/health")
    assert status == 200 and json.loads(text)["healthy_replicas"] == 1
    a.kill()
    for _ in range(50):
        if not gw.router.healthy[0]:
            break
        await asyncio.sleep(0.1)
    status, text, _ = await get(gw, "/health")
    assert status == 503
    status, data, _ = await post(
        gw, "/v1/chat/completions", json.dumps({"messages": MSGS}).encode()
    )
    assert status == 503 and "no replica" in data["error"]["message"]


async def test_stream_cut_midway_ends_with_an_error_event(
    fake_backends: Any, gateways: Any
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), health_interval_s=30)
    async with client(gw) as c:
        stream = await c.chat.completions.create(
            model="m",
            messages=MSGS,
            max_tokens=50,
            stream=True,
            extra_headers={"x-fake-cut-after": "3"},
        )
        got = []
        with pytest.raises(openai.APIError, match="failed mid-stream"):
            async for ch in stream:
                got.append(ch)
        assert len(got) == 3
    _, text, _ = await get(gw, "/metrics")
    assert 'kvharness_gateway_errors_total{kind="midstream"} 1.0' in text


async def test_killed_replica_loses_no_unstarted_requests(
    fake_backends: Any, gateways: Any
) -> None:
    """40 requests in flight over 2 replicas; one process is killed while they wait for it.
    None had started answering, so every one is answered (by the survivor)."""
    a, b = fake_backends(2)
    gw = await gateways(backends=(a.url, b.url), policy="round_robin", health_interval_s=30)
    async with client(gw) as c:

        async def one(i: int) -> str:
            r = await c.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"task {i}"}],
                max_tokens=2,
                extra_headers={"x-fake-delay-ms": "1500"},
            )
            return r.choices[0].message.content or ""

        tasks = [asyncio.create_task(one(i)) for i in range(40)]
        await asyncio.sleep(0.7)
        assert gw.router.inflight[1] > 0
        b.kill()
        answers = await asyncio.gather(*tasks)
    assert answers == [" tok" * 2] * 40
    assert not gw.router.healthy[1]


async def test_sessions_stick_and_index_learns_from_decisions(
    fake_backends: Any, gateways: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvharness.gateway.pipeline")
    backends = fake_backends(3)
    gw = await gateways(backends=tuple(x.url for x in backends), policy="agent_aware")
    served: dict[str, set[str]] = {}
    async with client(gw) as c:
        for turn in range(4):
            for s in range(6):
                msgs = [{"role": "user", "content": f"session {s} " + "context " * 200}]
                msgs += [{"role": "user", "content": f"step {t}"} for t in range(turn)]
                raw = await c.chat.completions.with_raw_response.create(
                    model="m", messages=msgs, extra_headers={"x-session-id": f"s{s}"}
                )
                served.setdefault(f"s{s}", set()).add(raw.headers["x-kvharness-replica"])
    assert all(len(v) == 1 for v in served.values())  # affinity
    # At DEBUG, each decision is logged: session, replica, reason.
    routes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("route ")]
    assert len(routes) == 24
    (s0,) = served["s0"]
    assert "route session=s0 tokens=" in routes[0] and f"-> {s0} (place, 0 blocks" in routes[0]
    assert sum(f"-> {s0} (affinity" in line for line in routes if "session=s0 " in line) == 3
    # No tokenizer: prompts are hashed approximately and the index is fed by the decisions, so
    # later turns find their prefix where the session ran.
    assert sum(gw.index.cached_blocks(i) for i in range(3)) > 0
    _, text, _ = await get(gw, "/metrics")
    ratio_sum = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("kvharness_gateway_matched_prefix_ratio_sum")
    )
    assert ratio_sum > 6 * 3 * 0.5  # 18 later turns, each mostly matched


async def test_engine_load_is_scraped(fake_backends: Any, gateways: Any) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), scrape_interval_s=0.1)
    body = json.dumps({"messages": MSGS}).encode()
    slow = [
        asyncio.create_task(post(gw, "/v1/chat/completions", body, **{"x-fake-delay-ms": "1500"}))
        for _ in range(3)
    ]
    s = gw.router.states[0]
    for _ in range(40):
        await asyncio.sleep(0.05)
        if s.waiting == 2:
            break
    # The fake reports one running and the rest queued, KV usage 0.1 per request.
    assert (s.running, s.waiting) == (1, 2)
    assert s.used_blocks == round(0.3 * s.capacity_blocks)
    assert [r[0] for r in await asyncio.gather(*slow)] == [200] * 3


async def test_streams_relay_to_http10_and_http11_clients_byte_for_byte(
    fake_backends: Any, gateways: Any
) -> None:
    """The relayed payload is the replica's, unchanged: chunk-framed for HTTP/1.1 clients (read
    with a keep-alive connection used twice), raw and closed for HTTP/1.0 ones."""
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,))
    body = json.dumps({"messages": MSGS, "max_tokens": 12, "stream": True}).encode()

    async def raw(version: str, times: int) -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        out = []
        for _ in range(times):
            writer.write(
                f"POST /v1/chat/completions HTTP/{version}\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(f"HTTP/{version} 200".encode()), head
            if b"chunked" in head.lower():
                payload = b""
                while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                    payload += (await reader.readexactly(size + 2))[:-2]
                assert await reader.readexactly(2) == b"\r\n"
            else:
                payload = await reader.read()  # until the gateway closes
            out.append(payload)
        writer.close()
        return out

    for payload in [*await raw("1.1", 2), *await raw("1.0", 1)]:
        events = payload.split(b"\n\n")
        assert events[-2:] == [b"data: [DONE]", b""], payload[-80:]
        chunks = [json.loads(e[6:]) for e in events[:-2]]
        assert "".join(c["choices"][0]["delta"]["content"] for c in chunks[:-1]) == " tok" * 12
        assert chunks[-1]["usage"]["completion_tokens"] == 12


async def test_text_completions_can_be_forwarded_as_token_ids(
    fake_backends: Any, gateways: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """By default a gateway with the engines' tokenizer sends a replica the prompt as its token
    ids (the fake counts ids one per token, text at four characters per token): BOS included
    unless the request turns special tokens off; echo, which repeats the prompt's text, and chat
    requests are sent as they came. Only to a replica whose /tokenize gives the gateway's tokens,
    asked when the gateway starts; not with forward_token_ids off."""
    from kvharness.gateway.replicas import PROBE_TEXT as _PROBE
    from kvharness.gateway.tokenizer import load_engine_tokenizer

    tok = load_engine_tokenizer(tiny_model_dir)
    (b,) = fake_backends(1, tokenizer=str(tiny_model_dir / "tokenizer.json"))
    gw = await gateways(backends=(b.url,), tokenizer=str(tiny_model_dir))
    text = "def main():\n    print('hello world')  # " + "words " * 50
    ids = tok.encode_ids(text, add_special_tokens=True)
    as_text = len(json.dumps(text)) // 4
    async with client(gw) as c:
        got = await c.completions.create(model="fake-model", prompt=text, max_tokens=2)
        assert got.usage is not None and got.usage.prompt_tokens == len(ids)
        stream = await c.completions.create(
            model="fake-model", prompt=[text], max_tokens=2, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        usage = [x.usage for x in [x async for x in stream] if x.usage]
        assert usage and usage[-1].prompt_tokens == len(ids)
        plain = await c.completions.create(
            model="fake-model", prompt=text, max_tokens=2, extra_body={"add_special_tokens": False}
        )
        assert plain.usage is not None and plain.usage.prompt_tokens == len(ids) - 1
        echo = await c.completions.create(model="fake-model", prompt=text, max_tokens=2, echo=True)
        assert echo.usage is not None and echo.usage.prompt_tokens == as_text
        chat = await c.chat.completions.create(model="fake-model", messages=MSGS, max_tokens=2)
        assert chat.usage is not None and chat.usage.prompt_tokens == len(json.dumps(MSGS)) // 4
    status, body, _ = await post(
        gw, "/v1/completions", json.dumps({"prompt": "x", "add_special_tokens": 1}).encode()
    )
    assert status == 400 and "add_special_tokens" in body["error"]["message"]
    assert gw.replicas.alike == [True]

    # A replica that cannot say how it tokenises, and one whose tokenizer differs (two tokens of
    # the probe swapped), get text.
    spec = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    first, second = tok._tok.encode(_PROBE).tokens[:2]
    vocab = spec["model"]["vocab"]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    unknown, other = (
        fake_backends(1)[0],
        fake_backends(1, tokenizer=str(tmp_path / "tokenizer.json"))[0],
    )
    for backend in (unknown, other):
        gw2 = await gateways(backends=(backend.url,), tokenizer=str(tiny_model_dir))
        for _ in range(500):
            if gw2.replicas.alike[0] is not None:
                break
            await asyncio.sleep(0.01)
        assert gw2.replicas.alike == [False]  # found out before any request
        async with client(gw2) as c:
            got = await c.completions.create(model="fake-model", prompt=text, max_tokens=2)
            assert got.usage is not None and got.usage.prompt_tokens == as_text
    off = await gateways(backends=(b.url,), tokenizer=str(tiny_model_dir), forward_token_ids=False)
    async with client(off) as c:
        got = await c.completions.create(model="fake-model", prompt=text, max_tokens=2)
        assert got.usage is not None and got.usage.prompt_tokens == as_text
    assert off.replicas.alike == [None]


async def test_tokenize_is_answered_by_a_replica(
    fake_backends: Any, gateways: Any, tiny_model_dir: Path
) -> None:
    """A client counting its prompts as the engine does (``kvharness env run``) can through the
    gateway; with no replica up it hears so."""
    (b,) = fake_backends(1, tokenizer=str(tiny_model_dir / "tokenizer.json"))
    gw = await gateways(backends=(b.url,))
    body = json.dumps({"model": "fake-model", "prompt": "hello there world"}).encode()
    status, through, _ = await post(gw, "/tokenize", body)
    async with aiohttp.ClientSession() as s, s.post(b.url + "/tokenize", data=body) as r:
        direct = await r.json()
    assert status == 200 and through == direct and through["count"] > 0
    b.kill()
    for _ in range(100):
        if not gw.router.healthy[0]:
            break
        await asyncio.sleep(0.1)
    status, answer, _ = await post(gw, "/tokenize", body)
    assert status == 503 and "no healthy replica" in answer["error"]["message"]
