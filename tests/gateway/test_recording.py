"""``--record``: the gateway writes each routed request as it is answered, in front of FAKE
OpenAI server processes (canned answers), and a gateway killed mid-recording loses nothing it
had answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai

from kvharness.gateway.app import Gateway
from kvharness.testing.procs import wait_up
from kvharness.testing.vllm import free_port
from kvharness.wire.http import Client
from kvharness.workload.chain import block_hash, chain_hashes
from kvharness.workload.recording import load_recording, recording_parts


def _client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="-", max_retries=0)


def _lines(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for part in recording_parts(folder)
        for line in part.read_text().splitlines()[1:]
    ]


async def test_each_routed_request_is_recorded_with_its_session_usage_and_route(
    fake_backends: Any, gateways: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    (b,) = fake_backends(1, tokenizer=str(tiny_model_dir / "tokenizer.json"))
    rec = tmp_path / "rec"
    gw = await gateways(
        backends=(b.url,), tokenizer=str(tiny_model_dir), record=str(rec), record_content=True,
        block_size=16,
    )  # fmt: skip
    usages = []
    async with _client(gw) as c:
        history: list[dict[str, str]] = [{"role": "system", "content": "You fix bugs. " * 20}]
        for turn in range(3):  # a session named by its header, streamed and not
            history.append({"role": "user", "content": f"observation {turn}: " + "ok " * 30})
            kw: dict[str, Any] = {"extra_headers": {"x-session-id": "alpha"}, "max_tokens": 4}
            if turn == 1:
                stream = await c.chat.completions.create(
                    model="fake-model", messages=history, stream=True,
                    stream_options={"include_usage": True}, **kw,
                )  # fmt: skip
                usages += [ch.usage async for ch in stream if ch.usage is not None]
            else:
                answer = await c.chat.completions.create(model="fake-model", messages=history, **kw)
                usages.append(answer.usage)
            history.append({"role": "assistant", "content": " tok" * 4})
            await asyncio.sleep(0.2)  # the tool's time
        ids = list(range(40, 90))
        for extra in (0, 20):  # an unnamed session of token-id prompts: inferred
            await c.completions.create(model="fake-model", prompt=ids + [7] * extra, max_tokens=2)
        with contextlib.suppress(openai.BadRequestError):
            await c.completions.create(
                model="fake-model", prompt=[1, 2, 3], max_tokens=2,
                extra_headers={"x-fake-status": "400"},
            )  # fmt: skip
    lines = _lines(rec)
    assert len(lines) == 6
    alpha = [x for x in lines if x["session"] == "alpha"]
    assert [x["prompt_tokens"] for x in alpha] == [u.prompt_tokens for u in usages]
    assert all(x["output_tokens"] == 4 and x.get("status", 200) == 200 for x in alpha)
    assert {x["replica"] for x in lines} == {b.url} and all(x["reason"] for x in lines)
    assert alpha[1]["gap"] >= 0.2 and alpha[1]["keep"] > 0
    assert alpha[2]["messages_keep"] == 4 and len(alpha[2]["messages"]) == 2
    assert lines[-1]["status"] == 400 and lines[-1]["path"] == "/v1/completions"
    inferred = [x for x in lines if x.get("inferred")]
    assert len(inferred) == 3 and inferred[0]["session"] == inferred[1]["session"]
    assert inferred[0]["ids"] == ids and inferred[1]["ids_keep"] == 50
    assert gw.status()["recording"]["requests"] == 6

    w = load_recording(rec)
    assert sorted(len(s.turns) for s in w.sessions) == [2, 3] and w.meta["not_answered"] == 1
    for s in w.sessions:
        for t in s.turns:
            # The whole prompt's chain, as the engine hashes it, tail block included.
            got = t.prompt_ids
            assert got is not None and len(got) == t.input_tokens
            full = chain_hashes(got, 16)
            tail = [block_hash(full[-1], got[len(full) * 16 :])] if len(got) % 16 else []
            assert t.input.hashes == (*full, *tail)


async def test_without_content_only_hashes_and_lengths_are_kept(
    fake_backends: Any, gateways: Any, tmp_path: Path
) -> None:
    (b,) = fake_backends(1)
    gw = await gateways(backends=(b.url,), record=str(tmp_path), block_size=16)
    async with _client(gw) as c:
        msgs = [{"role": "user", "content": "secret source code " * 40}]
        await c.chat.completions.create(model="fake-model", messages=msgs, max_tokens=3)
        msgs += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more " * 30}]
        await c.chat.completions.create(model="fake-model", messages=msgs, max_tokens=3)
    lines = _lines(tmp_path)
    assert len(lines) == 2 and "secret" not in (tmp_path / "part-000001.jsonl").read_text()
    assert not any("ids" in x or "messages" in x for x in lines)
    # No tokenizer: prompts are hashed approximately, and the session is inferred from them.
    assert lines[0]["session"] == lines[1]["session"] and lines[1]["keep"] > 0
    assert load_recording(tmp_path).num_turns == 2


async def _session(client: Client, url: str, sid: str, seen: list[int]) -> None:
    """Turns of one agent session until cancelled; ``seen`` counts the answers that ended."""
    prompt = list(range(100, 140))
    while True:
        body = json.dumps(
            {"model": "fake-model", "prompt": prompt, "max_tokens": 8, "stream": True}
        ).encode()
        resp = await client.request(
            "POST", url + "/v1/completions", body,
            b"content-type: application/json\r\nx-session-id: " + sid.encode() + b"\r\n",
            timeout_s=30,
        )  # fmt: skip
        try:
            data = await resp.read()
        finally:
            resp.release()
        assert resp.status == 200 and data.rstrip().endswith(b"data: [DONE]")
        seen.append(len(prompt))
        prompt = prompt + [seen[-1] % 50] * 9


async def test_a_gateway_killed_mid_recording_loses_no_answered_request(
    fake_backends: Any, tmp_path: Path
) -> None:
    (b,) = fake_backends(1)
    rec = tmp_path / "rec"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness", "gateway", "--backend", b.url, "--port", str(port),
         "--block-size", "16", "--record", str(rec), "--record-part-bytes", "20000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url + "/health", proc, timeout=60)
        seen: dict[str, list[int]] = {f"s{i}": [] for i in range(6)}
        client = Client()
        tasks = [asyncio.ensure_future(_session(client, url, sid, n)) for sid, n in seen.items()]
        while sum(map(len, seen.values())) < 120:
            await asyncio.sleep(0.05)
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
        os.kill(proc.pid, signal.SIGKILL)  # requests are in flight now
        proc.wait(10)
        await asyncio.gather(*tasks, return_exceptions=True)
        client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(recording_parts(rec)) > 1, "the test should cross a part boundary"
    w = load_recording(rec)
    recorded = {s.id: [t.input_tokens for t in s.turns] for s in w.sessions}
    for sid, answered in seen.items():
        got = recorded.get(sid, [])
        # Every answer a client saw end is there; at most one more (recorded, not yet seen).
        assert got[: len(answered)] == answered and len(got) - len(answered) in (0, 1), sid
