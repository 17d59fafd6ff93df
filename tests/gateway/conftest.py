"""Gateway test helpers: a real ZMQ publisher speaking vLLM's KV-event schema, FAKE OpenAI
server processes (canned answers, no model: for the gateway's own behaviour), gateways.

The structs below restate vLLM 0.32's wire schema (``vllm/distributed/kv_events.py``): the batch is
an array-like struct, events are tagged structs encoded as maps with a ``type`` key; older vLLM
encoded events as tagged arrays (``StoredA`` / ``RemovedA``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
import zmq

from kvharness.gateway.app import Gateway
from kvharness.gateway.config import GatewayConfig
from kvharness.testing.vllm import free_port


class Batch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class Stored(msgspec.Struct, tag="BlockStored", omit_defaults=True):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None


class Removed(msgspec.Struct, tag="BlockRemoved", omit_defaults=True):
    block_hashes: list[int | bytes]
    medium: str | None = None


class Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class StoredA(msgspec.Struct, tag="BlockStored", array_like=True):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class RemovedA(msgspec.Struct, tag="BlockRemoved", array_like=True):
    block_hashes: list[int | bytes]
    medium: str | None


_encoder = msgspec.msgpack.Encoder()


def encode_batch(events: list[Any], ts: float | None = None) -> bytes:
    return _encoder.encode(Batch(time.time() if ts is None else ts, events, 0))


class Publisher:
    """A PUB socket (bound or connecting, as vLLM does) plus an optional replay ROUTER that
    answers like vLLM 0.32's (see ``_serve_replay``)."""

    def __init__(self, endpoint: str, *, bind: bool, replay: str | None = None, topic: str = "kv"):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        if bind:
            self.pub.bind(endpoint)
        else:
            self.pub.connect(endpoint)
        self.topic = topic.encode()
        self.seq = 0
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=1000)
        self._stop = threading.Event()
        self._thread = None
        if replay is not None:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay)
            self._thread = threading.Thread(target=self._serve_replay, daemon=True)
            self._thread.start()

    def send(self, events: list[Any], *, drop: bool = False, ts: float | None = None) -> int:
        """Publish one batch (``drop``: number it and buffer it, but do not send: a lost one)."""
        seq = self.seq
        self.seq += 1
        payload = encode_batch(events, ts)
        self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def send_raw(self, frames: list[bytes]) -> None:
        self.pub.send_multipart(frames)

    def _serve_replay(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            ident, _, start = self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            # vLLM 0.32's replies: [id, b"", topic, seq, payload]..., then [id, b"", b"", -1, b""].
            for seq, payload in list(self.buffer):
                if seq >= first:
                    self.router.send_multipart(
                        [ident, b"", self.topic, seq.to_bytes(8, "big"), payload]
                    )
            self.router.send_multipart([ident, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.router.close(0)
        self.pub.close(0)
        self.ctx.term()


@pytest.fixture
def publishers() -> Any:
    made: list[Publisher] = []

    def make(endpoint: str, **kw: Any) -> Publisher:
        p = Publisher(endpoint, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def kv_schema() -> Any:
    """vLLM's event structs and the batch encoder, for tests to build messages with."""
    import types

    return types.SimpleNamespace(
        Stored=Stored,
        Removed=Removed,
        Cleared=Cleared,
        StoredA=StoredA,
        RemovedA=RemovedA,
        Batch=Batch,
        encode_batch=encode_batch,
    )


# --- fake backends and gateways ----------------------------------------------------------


class FakeBackend:
    """A FAKE OpenAI server process (kvharness.testing.fake_openai): canned answers, no model."""

    def __init__(self, block_size: int = 16, name: str = "", tokenizer: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvharness.testing.fake_openai", "--port", str(self.port),
             "--block-size", str(block_size), "--name", name,
             *(["--tokenizer", tokenizer] if tokenizer else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.kill()
                    raise RuntimeError("fake backend did not start") from None
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def fake_backends() -> Iterator[Callable[..., list[FakeBackend]]]:
    made: list[FakeBackend] = []

    def make(n: int = 1, **kw: Any) -> list[FakeBackend]:
        out = [FakeBackend(name=f"b{len(made) + i}", **kw) for i in range(n)]
        made.extend(out)
        return out

    yield make
    for b in made:
        b.kill()


@pytest.fixture
async def gateways() -> Any:
    """``await gateways(backends=(...), **config)`` -> a started Gateway (port 0), stopped after."""
    made: list[Gateway] = []

    async def make(**kw: Any) -> Gateway:
        kw.setdefault("port", 0)
        kw.setdefault("health_interval_s", 0.2)
        gw = Gateway(GatewayConfig(**kw))
        await gw.start()
        made.append(gw)
        return gw

    yield make
    for gw in made:
        await gw.stop()


class GatewayThread:
    """A gateway served from its own thread and event loop (for synchronous clients)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.gateway: Gateway | None = None
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)

            async def start() -> None:
                self.gateway = Gateway(config)
                await self.gateway.start()
                ready.set()

            self.loop.run_until_complete(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise RuntimeError("gateway did not start")
        assert self.gateway is not None
        self.url = f"http://127.0.0.1:{self.gateway.port}"

    def close(self) -> None:
        """Stop the gateway and its loop (again: nothing)."""
        assert self.gateway is not None
        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.gateway.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def gateway_thread() -> Iterator[Callable[..., GatewayThread]]:
    made: list[GatewayThread] = []

    def make(**kw: Any) -> GatewayThread:
        kw.setdefault("port", 0)
        kw.setdefault("health_interval_s", 0.2)
        g = GatewayThread(GatewayConfig(**kw))
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def say_hi(url: str) -> dict[str, Any]:
    """A one-message chat completion through the gateway at ``url``; its answer."""
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": "hi there"}]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    answer: dict[str, Any] = json.loads(urllib.request.urlopen(req, timeout=10).read())
    return answer


KEEP_MORE_REMEDY = (
    'to keep more for replay, raise "buffer_steps" in the engine\'s --kv-events-config (vLLM '
    "keeps the last 10000 batches by default)"
)


def reset_remedy(url: str) -> str:
    return (
        f"or reset the engine's prefix cache (POST {url}/reset_prefix_cache, served with "
        "VLLM_SERVER_DEV_MODE=1) just before starting the gateway"
    )


def joined_late_without_replay(url: str, at: int) -> str:
    """The whole warning for a gateway that joined ``url``'s stream at batch ``at``."""
    return (
        f"gateway joined {url}'s KV event stream at batch {at}: the blocks that engine cached in "
        f"batches 0..{at - 1} are unknown to the index, so requests that would hit them are "
        "routed as misses until that engine evicts them or they are routed there again; to "
        'recover them, set "replay_endpoint": "tcp://*:PORT" in the engine\'s --kv-events-config '
        f"and give it to the gateway as --kv-replay {url}=tcp://*:PORT, " + reset_remedy(url)
    )
