"""The wire's HTTP/1.1 client against a scripted raw HTTP server on loopback: framing split
anywhere, keep-alive reuse, stale connections, cuts, silences, deadlines, limits, TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvharness.testing.vllm import free_port
from kvharness.wire.framing import Headers
from kvharness.wire.http import (
    BadBody,
    BadHead,
    BodyError,
    BodyTimeout,
    Client,
    ConnectError,
    HeadTimeout,
    TooLarge,
    Unreachable,
    WireError,
    encode_headers,
    parse_head,
)

from .conftest import bytewise, chunked

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENTS = [b'data: {"n": %d}\n\n' % i for i in range(5)]
JSON = encode_headers([("Content-Type", "application/json")])


async def relay_all(client: Client, url: str) -> tuple[int, bytes]:
    r = await client.request("POST", url + "/v1/x", b"{}", JSON)
    first = await r.first()
    got = [first]
    assert await r.relay(lambda d: got.append(d) or True, lambda: True)
    r.release()
    return r.status, b"".join(got)


async def test_chunked_stream_split_anywhere_is_relayed_whole_and_reused(serve: Any) -> None:
    body = SSE_HEAD + chunked(*EVENTS)
    srv = await serve(lambda req: bytewise(body))
    client = Client()
    for _ in range(3):
        status, data = await relay_all(client, srv.url)
        assert status == 200 and data == b"".join(EVENTS)
    assert srv.connections == 1  # kept alive and reused
    req = srv.requests[0]
    assert req.startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 2\r\n" in req and req.endswith(b"\r\n\r\n{}")
    assert b"accept-encoding" not in req.lower()
    client.close()


async def test_length_close_delimited_interim_and_extensions(serve: Any) -> None:
    answers = {
        b"/len": [
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 418 No\r\nContent-Length: 5\r\n\r\nhello"
        ],
        b"/ext": [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
        ],
        b"/eof": [b"HTTP/1.0 200 OK\r\n\r\nuntil", 0.05, b" close", None],
        b"/none": [b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n"],
    }
    srv = await serve(lambda req: answers[req.split(b" ")[1]])
    client = Client()
    assert await client.post(srv.url + "/len", b"") == (418, b"hello")
    assert await client.post(srv.url + "/ext", b"") == (200, b"abc")
    assert await client.post(srv.url + "/eof", b"") == (200, b"until close")
    assert await client.get(srv.url + "/none") == (204, b"")
    assert await client.post(srv.url + "/len", b"") == (418, b"hello")
    assert srv.connections == 2  # the HTTP/1.0 answer's connection is not reused
    assert b"Content-Length" not in srv.requests[3]  # a GET without a body says none
    client.close()


async def test_cut_mid_body_and_refused_connection(serve: Any) -> None:
    srv = await serve(lambda req: [SSE_HEAD, chunked(*EVENTS)[:60], 0.05, None])
    client = Client()
    r = await client.request("POST", srv.url + "/", b"")
    assert (await r.first()).startswith(b'data: {"n": 0}')
    with pytest.raises(BodyError, match="mid-body"):
        await r.relay(lambda d: True, lambda: True)
    r.release()
    with pytest.raises(Unreachable, match="cannot connect"):
        await client.request("POST", f"http://127.0.0.1:{free_port()}/", b"")
    hangs_up = await serve(lambda req: [None])
    with pytest.raises(ConnectError, match="before the response head"):
        await client.request("POST", hangs_up.url + "/", b"")
    client.close()


async def test_read_timeout_and_deadline(serve: Any) -> None:
    srv = await serve(lambda req: [SSE_HEAD, chunked(EVENTS[0])[:-5], 2.0])
    client = Client(read_timeout_s=0.2)
    r = await client.request("POST", srv.url + "/", b"")
    await r.first()
    with pytest.raises(BodyTimeout, match=r"no data for 0\.2 s"):
        await r.relay(lambda d: True, lambda: True)
    r.release()
    silent = await serve(lambda req: [2.0])
    with pytest.raises(HeadTimeout, match=r"no data for 0\.2 s"):
        await client.request("POST", silent.url + "/", b"")
    # A deadline bounds the whole exchange, however steadily the server sends.
    steady: list[bytes | float | None] = [SSE_HEAD]
    for e in EVENTS * 4:
        steady += [chunked(e)[:-5], 0.05]
    trickle = await serve(lambda req: steady)
    r = await client.request("POST", trickle.url + "/", b"", timeout_s=0.3)
    with pytest.raises(BodyTimeout, match=r"no complete answer within 0\.3 s"):
        await r.read()
    r.release()
    client.close()


async def test_stale_keepalive_connection_is_replaced_once(serve: Any) -> None:
    srv = await serve(lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    client = Client()
    assert await client.post(srv.url + "/", b"") == (200, b"ok")
    for w in srv.writers:  # the server drops its idle connection
        w.transport.abort()
    await asyncio.sleep(0.05)
    assert await client.post(srv.url + "/", b"") == (200, b"ok")
    assert srv.connections == 2
    client.close()


async def test_relay_stops_when_receiver_gone_and_waits_when_full(serve: Any) -> None:
    paced: list[bytes | float | None] = [SSE_HEAD]
    for e in EVENTS:
        paced += [chunked(e)[:-5], 0.05]
    srv = await serve(lambda req: [*paced, 2.0])
    client = Client()
    r = await client.request("POST", srv.url + "/", b"")
    await r.first()
    seen: list[bytes] = []
    assert not await r.relay(lambda d: seen.append(d) or len(seen) < 2, lambda: True)
    r.release()  # not read whole: closed, not pooled
    srv2 = await serve(lambda req: [SSE_HEAD, chunked(EVENTS[0])[:-5], 0.05, chunked(*EVENTS[1:])])
    r = await client.request("POST", srv2.url + "/", b"")
    first = await r.first()
    room = asyncio.Event()
    got = [first]
    task = asyncio.create_task(r.relay(lambda d: got.append(d) or True, room.is_set))
    await asyncio.sleep(0.1)
    assert not task.done()  # paused: the receiver has no room
    room.set()
    assert await task
    assert b"".join(got) == b"".join(EVENTS)
    r.release()
    client.close()


async def test_malformed_heads_and_bodies_and_a_limit(serve: Any) -> None:
    answers = {
        b"/ftp": [b"FTP/1.0 200 OK\r\n\r\n"],
        b"/colon": [b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
        b"/chunk": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
        b"/big": [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100],
    }
    srv = await serve(lambda req: answers[req.split(b" ")[1]])
    client = Client()
    with pytest.raises(BadHead, match="bad status line"):
        await client.get(srv.url + "/ftp")
    with pytest.raises(BadHead, match="bad header line"):
        await client.get(srv.url + "/colon")
    with pytest.raises(BadBody, match="malformed response"):
        await client.get(srv.url + "/chunk")
    with pytest.raises(TooLarge, match="over 10 bytes"):
        await client.get(srv.url + "/big", limit=10)
    assert await client.get(srv.url + "/big", limit=100) == (200, b"x" * 100)
    client.close()


class Recorder:
    """A receiver that writes down what it is told, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.done = asyncio.get_running_loop().create_future()

    def head(self, status: int, headers: Headers) -> None:
        self.calls.append(("head", status))

    def data(self, piece: bytes) -> None:
        self.calls.append(("data", piece))

    def end(self) -> None:
        self.calls.append(("end", None))
        self.done.set_result(None)

    def fail(self, error: WireError) -> None:
        self.calls.append(("fail", type(error).__name__))
        self.done.set_result(None)


async def test_a_receiver_hears_head_data_end_once_each_in_order(serve: Any) -> None:
    body = SSE_HEAD + chunked(*EVENTS)
    srv = await serve(lambda req: bytewise(body))
    client = Client()
    rec = Recorder()
    client.start("POST", srv.url + "/", rec, b"{}")
    await rec.done
    kinds = [k for k, _ in rec.calls]
    assert kinds[0] == "head" and kinds[-1] == "end" and set(kinds[1:-1]) == {"data"}
    assert b"".join(p for k, p in rec.calls if k == "data") == b"".join(EVENTS)
    # An exchange aborted before its answer tells its receiver nothing more.
    quiet = await serve(lambda req: [0.2, *bytewise(body)])
    rec = Recorder()
    ex = client.start("POST", quiet.url + "/", rec, b"{}")
    await asyncio.sleep(0.05)
    ex.abort()
    await asyncio.sleep(0.3)
    assert rec.calls == [] and not rec.done.done()
    client.close()


async def test_a_large_body_goes_out_whole(serve: Any) -> None:
    srv = await serve(lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    client = Client()
    big = bytes(range(256)) * 20_000  # 5 MB: written in pieces as the socket takes them
    assert await client.post(srv.url + "/up", big) == (200, b"")
    assert srv.requests[0].endswith(b"\r\n\r\n" + big)
    client.close()


def _self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_https_with_a_trusted_certificate_and_a_refused_one(
    serve: Any, tmp_path: Path
) -> None:
    server_ctx, client_ctx = _self_signed(tmp_path)
    srv = await serve(lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], server_ctx)
    assert srv.url.startswith("https://")
    client = Client(ssl_context=client_ctx)
    for _ in range(2):
        assert await client.get(srv.url + "/x") == (200, b"ok")
    assert srv.connections == 1
    client.close()
    untrusting = Client()  # the system's trust store does not know the certificate
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        await untrusting.get(srv.url + "/x")
    untrusting.close()


def test_heads_and_header_lines() -> None:
    head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type:  a/b \r\nX-A: 1\r\nx-a: 2")
    first, headers = head.first, head.headers
    assert first == [b"HTTP/1.1", b"200", b"OK"] and headers == {"content-type": "a/b", "x-a": "2"}
    assert (head.chunked, head.length, head.close) == (False, None, False)
    head = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nConnection: Close")
    assert (head.chunked, head.length, head.close) == (True, None, True)
    assert parse_head(b"GET / HTTP/1.1\r\ncontent-length: 12").length == 12
    assert headers.get("CONTENT-TYPE") == "a/b" and headers["X-a"] == "2"  # any case, the last
    assert headers.get("absent") is None and headers.raw(b"x-a") == b"2"
    with pytest.raises(KeyError):
        headers["absent"]
    with pytest.raises(ValueError, match="bad header line"):
        parse_head(b"GET / HTTP/1.1\r\nbroken")
    lines = encode_headers([("A", "1"), ("B", "x\r\nEvil: 1"), ("C", "é")])
    assert lines == "A: 1\r\nC: é\r\n".encode()
    with pytest.raises(ValueError, match="not an http"):
        asyncio.run(_start_bad_url())


async def _start_bad_url() -> None:
    client = Client()
    try:
        client.start("GET", "ftp://x/", Recorder())
    finally:
        client.close()
