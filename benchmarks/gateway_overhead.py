"""Latency the gateway adds per request, vs going straight to the replica.

The replica is a FAKE OpenAI server process (kvharness.testing.fake_openai: canned tokens, no
model) so the engine's time does not drown the gateway's; it streams ``--tokens`` tokens paced
``--token-ms`` apart, as an engine decodes. The gateway runs as its own process
(``python -m kvharness gateway``, policy agent_aware, hashing with the tiny model's real tokenizer
and chat template), and the load generator as a third. At each concurrency (1, 50, 200 streams,
closed loop: each stream sends its next request when the last one finished) the same chat request
(a ~300-token prompt, ``stream: true``) runs for ``--seconds`` (and at least ``--min-requests``
requests) direct and through the gateway, alternating twice; time to first byte and to the end of
the stream are recorded per request. The streams' starts are spread over one answer's length, so
requests arrive spread out as from independent clients (``--burst``: all at the same instant, a
worst case where the last of N waits for the N - 1 before it at each hop). With 2 or more CPUs the
gateway gets one of its own, as in production, and the load generator and the replica share the
rest alike on both sides of the comparison (``--no-pin``: all three share all).
The load generator is a minimal HTTP/1.1 client on uvloop (one keep-alive connection per stream,
framing parsed in ``data_received``), so it is not what limits the rate; its busy share of one
core is printed.

Printed: p50/p99 of both, direct and via the gateway, and their differences (the added latency;
targets p50 < 1 ms, p99 < 5 ms), and the gateway's and the fake replica's CPU time per request
(user + system, from /proc; the gateway's bounds what it adds on an idle core and hardly depends
on other load).
On a machine whose cores are busy with other work, each extra process hop also waits to be
scheduled, which inflates the latency differences; the command line is printed so the run can be
repeated elsewhere.

    .venv/bin/python benchmarks/gateway_overhead.py [--concurrency 1 50 200] [--seconds 8]

Before and after (``--compare SRC``): a second gateway, the kvharness in the folder SRC (e.g. a
``git worktree`` of an earlier commit, its ``src``), runs beside this tree's on the same CPU in
front of the same replica; at each level the direct phase and both gateways' phases alternate,
and each gateway's row is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kvharness.testing.procs import cpu_seconds, stop_process, wait_up
from kvharness.testing.tiny_model import ensure_tiny_model
from kvharness.testing.vllm import free_port

REPO = Path(__file__).resolve().parents[1]


def body(i: int, tokens: int) -> bytes:
    text = " ".join(f"line {k}: x = compute(x, {k})" for k in range(40))
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"task {i % 16}\n{text}"},
    ]
    return json.dumps(
        {"model": "fake-model", "messages": msgs, "max_tokens": tokens, "stream": True}
    ).encode()


class _Stream(asyncio.Protocol):
    """One closed-loop stream on one keep-alive connection: a minimal HTTP/1.1 client (one
    write per request; response head, chunked framing and end found in ``data_received``) so
    the load generator spends little CPU per request and per streamed chunk."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.buf = bytearray()
        self.t0 = self.t1 = 0.0
        self.state = 0  # 0 head, 1 chunk size, 2 chunk data (+CRLF), 3 finished
        self.need = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def send(self, request: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.buf.clear()
        self.state, self.t1 = 0, 0.0
        self.t0 = time.perf_counter()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while True:
            if self.state == 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = bytes(buf[:end]).lower()
                if (
                    not head.startswith(b"http/1.1 200")
                    or b"transfer-encoding: chunked" not in head
                ):
                    self._fail(f"unexpected response: {head[:200]!r}")
                    return
                pos, self.state = end + 4, 1
            elif self.state == 1:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                size = int(buf[pos:end], 16)
                pos = end + 2
                if size == 0:  # the last chunk (no trailers): the answer is complete
                    self.state = 3
                    if self.done is not None:
                        self.done.set_result(None)
                    break
                self.state, self.need = 2, size + 2
                if not self.t1:
                    self.t1 = time.perf_counter()
            else:
                take = min(self.need, len(buf) - pos)
                pos += take
                self.need -= take
                if self.need:
                    break
                self.state = 1
        del buf[:pos]

    def _fail(self, why: str) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(RuntimeError(why))


async def phase(
    url: str, concurrency: int, seconds: float, tokens: int, spread: float = 0.0
) -> tuple[list[float], list[float]]:
    """Closed-loop streams for ``seconds``; (ttfb, total) per request, seconds. TTFB is the
    first byte of the answer's body. Stream ``w`` starts ``w / concurrency * spread`` seconds
    in: with ``spread`` the length of one answer, requests arrive evenly spread, as from
    independent clients, instead of all streams sending at the same instant."""
    ttfb: list[float] = []
    total: list[float] = []
    stop = time.perf_counter() + seconds
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()

    async def worker(w: int) -> None:
        payload = body(w, tokens)
        request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nx-session-id: w{w}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
        transport, conn = await loop.create_connection(_Stream, host, int(port))
        await asyncio.sleep(w / concurrency * spread)
        try:
            while time.perf_counter() < stop:
                await conn.send(request)
                t2 = time.perf_counter()
                ttfb.append(conn.t1 - conn.t0)
                total.append(t2 - conn.t0)
        finally:
            transport.close()

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return ttfb, total


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) * 1000


async def run(args: argparse.Namespace) -> None:
    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    bport = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    backend = subprocess.Popen(
        [sys.executable, "-m", "kvharness.testing.fake_openai", "--port", str(bport),
         "--token-ms", str(args.token_ms)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    sides = {"this": env}
    if args.compare is not None:
        sides["other"] = {**env, "PYTHONPATH": str(args.compare.resolve())}
    gateways: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    gateway_cmd: list[str] = []
    for side, side_env in sides.items():
        gport = free_port()
        gateway_cmd = [
            sys.executable, "-m", "kvharness", "gateway", "--backend", f"http://127.0.0.1:{bport}",
            "--port", str(gport), "--policy", "agent_aware", "--tokenizer", str(model),
            "--max-queue", "100000",
        ]  # fmt: skip
        proc = subprocess.Popen(
            gateway_cmd, env=side_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        gateways[side] = (proc, f"http://127.0.0.1:{gport}")
    placement = "not pinned"
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) >= 2:
        # The gateway on a core of its own, as it runs in production; the load generator and
        # the fake replica share the others, the same on both sides of the comparison.
        rest = set(cpus[:-1])
        os.sched_setaffinity(0, rest)
        os.sched_setaffinity(backend.pid, rest)
        for proc, _ in gateways.values():
            os.sched_setaffinity(proc.pid, {cpus[-1]})
        placement = f"gateway on CPU {cpus[-1]}, load generator and replica on CPUs {sorted(rest)}"
    try:
        wait_up(f"http://127.0.0.1:{bport}/health", backend, timeout=60, every=0.1)
        for proc, url in gateways.values():
            wait_up(url + "/health", proc, timeout=60, every=0.1)
        direct = f"http://127.0.0.1:{bport}"
        await phase(direct, 4, 1.0, args.tokens)  # warm every path
        for _, url in gateways.values():
            await phase(url, 4, 1.0, args.tokens)
        print(f"gateway: {' '.join(gateway_cmd[1:])}")
        if args.compare is not None:
            print(f"rows 'this': {REPO / 'src'}; rows 'other': {args.compare}")
        print(f"fake replica: {args.tokens} tokens/answer, {args.token_ms} ms apart; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; niceness "
              f"{os.getpriority(os.PRIO_PROCESS, 0)}; {placement}; at least {args.seconds} s "
              f"and {args.min_requests} requests per side and concurrency\n")  # fmt: skip
        head = (f"{'side':<5} {'streams':>7} {'reqs':>6} | {'TTFB p50':>9} {'p99':>7} direct | "
                f"{'p50':>7} {'p99':>7} gateway | {'added p50':>9} {'p99':>7} | end-to-end added "
                "p50 / p99 | CPU ms/request: gateway, replica; load-gen busy")  # fmt: skip
        print(head)
        answer_s = args.tokens * args.token_ms / 1000
        spread = 0.0 if args.burst else answer_s
        for c in args.concurrency:
            d_ttfb: list[float] = []
            d_tot: list[float] = []
            g_ttfb: dict[str, list[float]] = {side: [] for side in gateways}
            g_tot: dict[str, list[float]] = {side: [] for side in gateways}
            gw_cpu = dict.fromkeys(gateways, 0.0)
            be_cpu = dict.fromkeys(gateways, 0.0)
            gen_cpu = dict.fromkeys(gateways, 0.0)
            gen_wall = dict.fromkeys(gateways, 0.0)
            # Long enough for --min-requests per side (at 1 stream, a request lasts an answer).
            seconds = max(args.seconds, args.min_requests * answer_s / c)
            for rep in range(2):
                a, b = await phase(direct, c, seconds / 2, args.tokens, spread)
                d_ttfb += a
                d_tot += b
                order = list(gateways) if rep % 2 == 0 else list(gateways)[::-1]
                for side in order:
                    proc, url = gateways[side]
                    cpu0, be0 = cpu_seconds(proc.pid), cpu_seconds(backend.pid)
                    own0, wall0 = time.process_time(), time.perf_counter()
                    a, b = await phase(url, c, seconds / 2, args.tokens, spread)
                    gen_cpu[side] += time.process_time() - own0
                    gen_wall[side] += time.perf_counter() - wall0
                    gw_cpu[side] += cpu_seconds(proc.pid) - cpu0
                    be_cpu[side] += cpu_seconds(backend.pid) - be0
                    g_ttfb[side] += a
                    g_tot[side] += b
            for side in gateways:
                gt, gtot = g_ttfb[side], g_tot[side]
                n = max(1, len(gtot))
                print(
                    f"{side:<5} {c:>7} {len(gtot):>6} | {pct(d_ttfb, 50):>8.2f}ms "
                    f"{pct(d_ttfb, 99):>6.2f}ms        | {pct(gt, 50):>6.2f}ms {pct(gt, 99):>6.2f}ms"
                    f"         | {pct(gt, 50) - pct(d_ttfb, 50):>8.2f}ms "
                    f"{pct(gt, 99) - pct(d_ttfb, 99):>6.2f}ms | "
                    f"{pct(gtot, 50) - pct(d_tot, 50):.2f} ms / {pct(gtot, 99) - pct(d_tot, 99):.2f} ms"
                    f" | {1000 * gw_cpu[side] / n:.2f}, {1000 * be_cpu[side] / n:.2f}; "
                    f"{100 * gen_cpu[side] / max(gen_wall[side], 1e-9):.0f}%",
                    flush=True,
                )
    finally:
        for proc, _ in gateways.values():
            stop_process(proc)
        stop_process(backend)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 50, 200],
        help="concurrent streams to measure at",
    )
    ap.add_argument(
        "--seconds", type=float, default=8.0, help="measured seconds per side and level"
    )
    ap.add_argument("--min-requests", type=int, default=60,
                    help="run a level longer than --seconds until about this many requests per "
                         "side (for percentiles at 1 stream)")  # fmt: skip
    ap.add_argument("--tokens", type=int, default=32, help="tokens per streamed answer")
    ap.add_argument("--token-ms", type=float, default=20.0, help="ms between streamed tokens")  # fmt: skip
    ap.add_argument("--nice", type=int, default=0,
                    help="run this script, the fake replica and the gateway at this niceness "
                         "(negative needs root): on a machine busy with other work, it measures "
                         "the gateway rather than the wait for a CPU")  # fmt: skip
    ap.add_argument("--burst", action="store_true",
                    help="start every stream at the same instant (requests then arrive in "
                         "bursts of --concurrency; the default spreads the streams' starts over "
                         "one answer's length)")  # fmt: skip
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="give the gateway a CPU of its own and the load generator and replica "
                         "the rest (with 2 or more CPUs; --no-pin lets all three share them)")  # fmt: skip
    ap.add_argument("--compare", type=Path, metavar="SRC",
                    help="also run the gateway of the kvharness in SRC beside this one")  # fmt: skip
    args = ap.parse_args()
    if args.compare is not None and not (args.compare / "kvharness" / "__init__.py").exists():
        ap.error(f"--compare: no kvharness package in {args.compare}")
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # children inherit it
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
