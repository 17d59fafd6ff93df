"""Instructions per request of the bench client and of the gateway, counted by callgrind.

On a shared, noisy machine timings of the same code differ by 10-20% from run to run;
``valgrind --tool=callgrind`` counts the instructions a process executes, which repeat to a few
parts in a thousand. Each subject runs twice under callgrind, with a small and a larger number
of requests, and the difference of the two totals over the difference of the request counts is
the cost of one request (start-up and imports cancel out).

* ``client``: the bench sends closed-loop sessions (``benchmarks/client_capacity.py``'s
  workload and its ``measure``) to the FAKE OpenAI server (``kvharness.testing.fake_openai``, 8
  streamed tokens per answer, sent at once) running outside callgrind.
* ``gateway``: ``kvharness gateway`` (policy agent_aware, the tiny model's tokenizer) in front of
  the fake server (32 tokens per answer, each written on its own); 8 closed-loop streams of chat
  requests (``gateway_overhead.py``'s requests and load generator) run outside callgrind.

``--compare SRC`` counts the same for the kvharness in the folder SRC (its ``benchmarks/``
beside it, e.g. a ``git worktree`` of an earlier commit) and prints the ratio. BLAS and OpenMP
are held to one thread, so no idle pool thread's spinning is counted.

    .venv/bin/python benchmarks/instructions.py client gateway --compare /tmp/before/src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import free_port

REPO = Path(__file__).resolve().parents[1]
_COLLECTED = re.compile(r"Collected : (\d+)")
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_CLIENT = """import pathlib, sys, tempfile
sys.path.insert(0, sys.argv[1])
import client_capacity as cc
with tempfile.TemporaryDirectory() as tmp:
    m = cc.measure(sys.argv[2], int(sys.argv[3]), 4, 0.01, pathlib.Path(tmp) / "run")
print("requests", int(m["turns_ok"]))
"""


def _collected(stderr: str) -> int:
    found = _COLLECTED.search(stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no total:\n{stderr[-2000:]}")
    return int(found.group(1))


def _callgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def client(src: Path, fake: str, sessions: int, tmp: Path) -> tuple[int, int]:
    """(instructions, requests) of the bench in ``src`` sending ``sessions`` x 4 turns."""
    env = {**os.environ, **_ONE_THREAD, "PYTHONPATH": str(src)}
    bench_dir = str(src.parent / "benchmarks")
    done = subprocess.run(
        [*_callgrind(tmp / "client.out"), sys.executable, "-c", _CLIENT, bench_dir, fake,
         str(sessions)],
        env=env, cwd=tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the bench in {src} failed:\n{done.stderr[-2000:]}")
    requests = int(done.stdout.split("requests")[-1])
    return _collected(done.stderr), requests


async def _load(port: int, requests: int) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gateway_overhead as go

    loop = asyncio.get_running_loop()

    async def stream(w: int, k: int) -> None:
        payload = go.body(w, 32)
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nx-session-id: w{w}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        transport, conn = await loop.create_connection(go._Stream, "127.0.0.1", port)
        try:
            for _ in range(k):
                await conn.send(head.encode() + payload)
        finally:
            transport.close()

    await asyncio.gather(*(stream(w, requests // 8) for w in range(8)))


def gateway(src: Path, fake: str, requests: int, tmp: Path) -> tuple[int, int]:
    """(instructions, requests) of the gateway in ``src`` serving ``requests`` chat requests."""
    port = free_port()
    model = REPO / ".cache" / "tiny-llama"
    env = {**os.environ, **_ONE_THREAD, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        [*_callgrind(tmp / "gateway.out"), sys.executable, "-m", "kvharness", "gateway",
         "--backend", fake, "--port", str(port), "--policy", "agent_aware", "--tokenizer",
         str(model), "--health-interval", "1000"],
        env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_up(f"http://127.0.0.1:{port}/health", proc, timeout=900, every=1.0)
        asyncio.run(_load(port, requests))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            stop_process(proc)
    return _collected(err), requests // 8 * 8


def per_request(subject: str, src: Path, fake: str, small: int, large: int) -> float:
    run = client if subject == "client" else gateway
    with tempfile.TemporaryDirectory() as tmp:
        i0, r0 = run(src, fake, small, Path(tmp))
        i1, r1 = run(src, fake, large, Path(tmp))
    return (i1 - i0) / (r1 - r0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("subjects", nargs="+", choices=("client", "gateway"), help="what to count")
    ap.add_argument("--compare", type=Path, metavar="SRC",
                    help="also count the kvharness in SRC and print the ratio")  # fmt: skip
    ap.add_argument("--sessions", type=int, nargs=2, default=(20, 60), metavar=("A", "B"),
                    help="client: sessions of 4 turns in the two runs (default 20 60)")  # fmt: skip
    ap.add_argument("--requests", type=int, nargs=2, default=(80, 240), metavar=("A", "B"),
                    help="gateway: requests in the two runs (default 80 240)")  # fmt: skip
    args = ap.parse_args()
    if args.compare is not None and not (args.compare / "kvharness" / "__init__.py").exists():
        ap.error(f"--compare: no kvharness package in {args.compare}")
    # The client's answers come whole (8 tokens); the gateway's token by token (32, a write
    # each), so it relays them piece by piece as it does an engine's.
    fakes = {"client": ["--tokens", "8"], "gateway": ["--token-ms", "1"]}
    procs = {}
    for subject, extra in fakes.items():
        port = free_port()
        procs[subject] = subprocess.Popen(
            [sys.executable, "-m", "kvharness.testing.fake_openai", "--port", str(port), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        fakes[subject] = [f"http://127.0.0.1:{port}"]
    try:
        for subject, proc in procs.items():
            wait_up(fakes[subject][0] + "/health", proc, timeout=60, every=0.1)
        for subject in args.subjects:
            url = fakes[subject][0]
            sizes = args.sessions if subject == "client" else args.requests
            this = per_request(subject, REPO / "src", url, *sizes)
            line = f"{subject}: {this:,.0f} instructions per request ({REPO / 'src'})"
            if args.compare is not None:
                other = per_request(subject, args.compare.resolve(), url, *sizes)
                line += f"; {other:,.0f} ({args.compare}); ratio {this / other:.3f}"
            print(line, flush=True)
    finally:
        for proc in procs.values():
            stop_process(proc)


if __name__ == "__main__":
    main()
