"""The gateway under abuse: huge bodies, abandoned clients, a hung replica.

The replicas are FAKE OpenAI server processes (kvharness.testing.fake_openai); the gateway runs as
its own process (``python -m kvharness gateway``, default options unless given after ``--``), as
deployed. Three phases, each printed with what it measured:

1. ``bodies``: ``--bodies`` (8) clients send a ``--body-mib`` (60) MiB chat request at once. The
   gateway's resident memory (``/proc/PID/status`` VmRSS) is sampled every 10 ms, and ``/health``
   is asked every 10 ms on its own connection (clients and prober in threads of this process,
   on blocking sockets): printed are the RSS before and at peak, the
   ``/health`` latency p50/p99/max during the phase, and each body's HTTP status.
2. ``abandon``: ``--abandon`` (512) clients send a request that two stalled replicas never
   answer, then disconnect. Printed: the time until the gateway's ``/status`` shows no request in
   flight (the replicas' queue slots released), and the status of a fresh request after it.
3. ``hung``: one request to a replica that never answers; printed: the gateway's read timeout
   (``--read-timeout``, default: the gateway's own) and the seconds until the gateway answered,
   with its status.

Run on any checkout (it only uses the gateway's command line and HTTP API):

    .venv/bin/python benchmarks/gateway_abuse.py [--phases bodies abandon hung] [-- GATEWAY ARGS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import free_port
from kvharness.wire import blocking

STALL = {"x-fake-delay-ms": str(10**9)}
"""Headers that make a fake replica wait ~11 days before answering."""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def processes(replicas: int, gateway_args: list[str]) -> Iterator[tuple[str, int]]:
    """Fake replicas and a gateway in front of them: yields (gateway URL, gateway pid)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        backends = []
        for _ in range(replicas):
            port = free_port()
            p = subprocess.Popen(
                [sys.executable, "-m", "kvharness.testing.fake_openai", "--port", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(p)
            backends.append(f"http://127.0.0.1:{port}")
            wait_up(backends[-1] + "/health", p, timeout=60, every=0.1)
        gport = free_port()
        cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(gport)]
        for b in backends:
            cmd += ["--backend", b]
        gw = subprocess.Popen(
            cmd + gateway_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        procs.append(gw)
        url = f"http://127.0.0.1:{gport}"
        wait_up(url + "/health", gw, timeout=60, every=0.1)
        yield url, gw.pid
    finally:
        for p in reversed(procs):
            stop_process(p)


async def ask(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body); status 0 when the connection broke."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
        )
        writer.write(head.encode())
        writer.write(body)
        await writer.drain()
        data = await reader.read()
    except (ConnectionError, OSError):
        return 0, b""
    finally:
        writer.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0
    return status, data.split(b"\r\n\r\n", 1)[-1]


def chat_body(content: str) -> bytes:
    return json.dumps(
        {"model": "fake-model", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    ).encode()


def send(port: int, head: bytes, body: bytes) -> tuple[int, bytes]:
    """One request on a blocking socket (the syscalls release the GIL, so threads send at once):
    (status, body); status 0 when the connection broke."""
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(head)
            sock.sendall(body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    except OSError:
        return 0, b""
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0
    return status, data.split(b"\r\n\r\n", 1)[-1]


def watch(port: int, pid: int, stop: threading.Event, lat: list[float], rss: list[float]) -> None:
    """Until ``stop``: ask ``/health`` on one keep-alive connection every 10 ms (its latency in
    ``lat``, seconds) and read the gateway's RSS (in ``rss``, MB)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        rss.append(rss_mb(pid))
        t0 = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        lat.append(time.perf_counter() - t0)
        time.sleep(0.01)
    conn.close()


def health_alone(port: int, pid: int, seconds: float) -> np.ndarray:
    """``/health`` latencies (ms) with nothing else sent: what the machine alone costs."""
    lat: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(port, pid, stop, lat, []))
    watcher.start()
    time.sleep(seconds)
    stop.set()
    watcher.join()
    return np.array(lat) * 1000


async def phase_bodies(args: argparse.Namespace, gw_args: list[str]) -> None:
    word = "def f(x): return x  # padding; "
    body = chat_body(word * (args.body_mib * 1024 * 1024 // len(word)))
    with processes(1, gw_args) as (url, pid):
        port = int(url.rsplit(":", 1)[1])
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        idle = health_alone(port, pid, 3.0)
        base = rss_mb(pid)
        lat: list[float] = []
        rss: list[float] = [base]
        stop = threading.Event()
        watcher = threading.Thread(target=watch, args=(port, pid, stop, lat, rss))
        watcher.start()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.bodies) as pool:
            statuses = list(pool.map(lambda _: send(port, head, body), range(args.bodies)))
        took = time.perf_counter() - t0
        stop.set()
        watcher.join()
        ms = np.array(lat) * 1000
        print(f"bodies: {args.bodies} x {len(body) / 2**20:.0f} MiB at once, done in {took:.1f} s")
        print(f"  gateway RSS: {base:.0f} MB before, {max(rss):.0f} MB at peak")
        print(
            f"  /health alone, before ({len(idle)} asks): p50 {np.percentile(idle, 50):.1f} ms, "
            f"p99 {np.percentile(idle, 99):.1f} ms, max {idle.max():.1f} ms"
        )
        print(
            f"  /health during it ({len(ms)} asks): p50 {np.percentile(ms, 50):.1f} ms, "
            f"p99 {np.percentile(ms, 99):.1f} ms, max {ms.max():.1f} ms"
        )
        print(f"  statuses: {sorted(s for s, _ in statuses)}")
        for s, text in statuses:
            if s not in (200, 0):
                print(f"  e.g. {s}: {text[:160].decode(errors='replace')}")
                break


def inflight(url: str) -> int:
    _, body = blocking.get(url + "/status", timeout_s=5)
    return sum(rep["inflight"] for rep in json.loads(body)["replicas"])


async def phase_abandon(args: argparse.Namespace, gw_args: list[str]) -> None:
    body = chat_body("fix the bug in main.py")
    with processes(2, gw_args) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        tasks = [
            asyncio.create_task(ask(port, "POST", "/v1/chat/completions", body, STALL))
            for _ in range(args.abandon)
        ]
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(inflight, url) < min(args.abandon, 512):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        held = await asyncio.to_thread(inflight, url)
        t0 = time.perf_counter()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        left = held
        while left and time.perf_counter() - t0 < args.wait:
            left = await asyncio.to_thread(inflight, url)
            await asyncio.sleep(0.01)
        took = time.perf_counter() - t0
        status, text = await ask(port, "POST", "/v1/chat/completions", body)
        print(f"abandon: {args.abandon} clients to 2 stalled replicas, {held} in flight, then gone")
        if left:
            print(f"  {left} still in flight {took:.1f} s after the clients left")
        else:
            print(f"  all slots released {took * 1000:.0f} ms after the clients left")
        print(f"  a fresh request then: {status} {text[:120].decode(errors='replace')}")


async def phase_hung(args: argparse.Namespace, gw_args: list[str]) -> None:
    body = chat_body("fix the bug in main.py")
    extra = ["--read-timeout", str(args.read_timeout)] if args.read_timeout else []
    with processes(1, gw_args + extra) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        t0 = time.perf_counter()
        try:
            status, text = await asyncio.wait_for(
                ask(port, "POST", "/v1/chat/completions", body, STALL), args.wait
            )
        except TimeoutError:
            status, text = 0, b"no answer"
        took = time.perf_counter() - t0
        _, body = blocking.get(url + "/status", timeout_s=5)
        configured = json.loads(body)["config"]["read_timeout_s"]
        with_default = "(the gateway's default)" if not args.read_timeout else "(--read-timeout)"
        print(f"hung: the gateway's read timeout is {configured} s {with_default}")
        print(f"  answered {status} after {took:.1f} s: {text[:160].decode(errors='replace')}")


async def run(args: argparse.Namespace, gw_args: list[str]) -> None:
    print("command:", " ".join([sys.executable, *sys.argv]))
    for name in args.phases:
        await {"bodies": phase_bodies, "abandon": phase_abandon, "hung": phase_hung}[name](
            args, gw_args
        )


def main() -> None:
    argv = sys.argv[1:]
    gw_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--phases",
        nargs="+",
        choices=["bodies", "abandon", "hung"],
        default=["bodies", "abandon", "hung"],
        help="which phases to run, in order (default: all three)",
    )
    parser.add_argument("--bodies", type=int, default=8, help="concurrent huge bodies (8)")
    parser.add_argument("--body-mib", type=int, default=60, help="size of each, MiB (60)")
    parser.add_argument("--abandon", type=int, default=512, help="clients that leave (512)")
    parser.add_argument(
        "--read-timeout",
        type=float,
        help="the gateway's --read-timeout for the hung phase (default: the gateway's own)",
    )
    parser.add_argument("--wait", type=float, default=20.0, help="longest wait per phase, s (20)")
    asyncio.run(run(parser.parse_args(argv), gw_args))


if __name__ == "__main__":
    main()
