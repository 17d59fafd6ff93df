"""Latency each router adds to one request on an idle real vLLM-CPU replica, by prompt length.

``gateway_overhead.py`` measures the gateway alone against a fake replica under many streams; this
puts the routers of ``gateway_compare.py`` (the kvharness gateway, sglang-router, vllm-router, each
configured as there) in front of one real vLLM-CPU replica of the tiny model and sends streamed
completions one at a time, so nothing but the router's own work separates a routed request from a
direct one. For each prompt length and round, ``--requests`` prompts are first sent straight to the
replica (so that every target then finds them all in the prefix cache: the engine's work is the
same for all), then each target gets that round's prompts, for ``--rounds`` rounds in rotating
order. Every prompt is distinct from its first characters on and no session header is sent, so
each is new to every router: the kvharness gateway tokenises and hashes every prompt in full, its
worst case (a prompt continuing or beginning like one it has seen is resumed from that one's
tokens). Time to first byte is to the first piece of the answer's body.

Printed per prompt length: the prompt's tokens (vLLM's usage), direct time to first byte p50 and
p90, and for each router its p50 and p90 and the p50 it added.

    .venv/bin/python benchmarks/gateway_hop.py [--routers kvharness sglang vllm]
        [--words 50 1000 3500] [--requests 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gateway_compare import REPO, router_command, wait_routable

from kvharness.testing import ReplicaConfig, ensure_tiny_model
from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import VllmReplica, free_port, start_replicas


def prompt(i: int, words: int, r: int = 0) -> str:
    """Prompt ``i`` of round ``r``, of ``words`` words, distinct from its first word on."""
    return f"{r}.{i}: " + " ".join(f"w{(i * 31 + r * 7 + k) % 997}" for k in range(words))


def p50_p90(xs: list[float]) -> tuple[float, float]:
    """Median and 90th percentile of ``xs`` seconds, in milliseconds."""
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return 1000 * statistics.median(xs), 1000 * q[8]


class Target:
    """One keep-alive HTTP connection to a server sending streamed completions."""

    def __init__(self, name: str, port: int, model: str) -> None:
        self.name = name
        self.model = model
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def send(self, text: str) -> tuple[float, int]:
        """(seconds to the first piece of the answer's body, prompt tokens from the usage)."""
        body = json.dumps({
            "model": self.model, "prompt": text, "max_tokens": 4, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True},
        })  # fmt: skip
        t = time.perf_counter()
        self.conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        if resp.status != 200:
            raise SystemExit(f"{self.name} answered {resp.status}: {resp.read()[:300]!r}")
        first = resp.read1(65536)
        ttfb = time.perf_counter() - t
        rest = first + resp.read()
        tokens = 0
        for line in rest.decode().splitlines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                tokens = usage.get("prompt_tokens", tokens)
        return ttfb, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routers", nargs="+", default=["kvharness", "sglang", "vllm"],
                    help="routers to put in front of the replica (names as in gateway_compare)")  # fmt: skip
    ap.add_argument("--words", nargs="+", type=int, default=[50, 1000, 3500],
                    help="prompt lengths, in words (about 4 tokens each with the tiny tokenizer)")  # fmt: skip
    ap.add_argument("--requests", type=int, default=8, help="distinct prompts per length")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the targets")
    ap.add_argument("--routers-venv", type=Path, default=REPO / ".cache" / "routers",
                    help="virtual environment holding sglang-router and vllm-router")  # fmt: skip
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "gateway-hop",
                    help="folder for the replica's and routers' logs")  # fmt: skip
    args = ap.parse_args()

    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    args.out.mkdir(parents=True, exist_ok=True)
    print("starting a vLLM-CPU replica ...", file=sys.stderr, flush=True)
    reps: list[VllmReplica] = start_replicas(
        1, ReplicaConfig(model_dir=model), log_dir=args.out / "vllm-logs"
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        targets = [Target("direct", int(reps[0].url.rsplit(":", 1)[1]), reps[0].model)]
        for name in args.routers:
            port = free_port()
            cmd, health = router_command(name, reps, port, model, args.routers_venv, [])
            log = (args.out / f"{name}.log").open("wb")
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            procs.append(proc)
            wait_up(f"http://127.0.0.1:{port}{health}", proc)
            wait_routable(f"http://127.0.0.1:{port}", reps[0].model, proc)
            targets.append(Target(name, port, reps[0].model))
        time.sleep(2.0)

        print(f"one idle vLLM-CPU replica (tiny Llama); streamed completions one at a time; "
              f"{args.requests} prompts x {args.rounds} rounds per target and length; "
              f"time to first byte, ms")  # fmt: skip
        head = f"{'words':>6} {'tokens':>7} {'direct p50/p90':>15}"
        for t in targets[1:]:
            head += f" | {t.name + ' p50/p90':>22} {'added':>7}"
        print(head)
        for words in args.words:
            rounds = [
                [prompt(i, words, r) for i in range(args.requests)] for r in range(args.rounds)
            ]
            tokens = [targets[0].send(p)[1] for ps in rounds for p in ps]  # cached for all now
            warm = prompt(args.requests, words, args.rounds)
            for t in targets:
                t.send(warm)  # the connection and the router's own warm-up
            times: dict[str, list[float]] = {t.name: [] for t in targets}
            for r, prompts in enumerate(rounds):
                for t in targets[r % len(targets) :] + targets[: r % len(targets)]:
                    times[t.name] += [t.send(p)[0] for p in prompts]

            d50, d90 = p50_p90(times["direct"])
            row = f"{words:>6} {statistics.median(tokens):>7.0f} {d50:>7.1f}/{d90:<7.1f}"
            for t in targets[1:]:
                m50, m90 = p50_p90(times[t.name])
                row += f" | {m50:>11.1f}/{m90:<10.1f} {m50 - d50:>+7.1f}"
            print(row, flush=True)
    finally:
        for proc in procs:
            stop_process(proc, 15)
        for rep in reps:
            rep.stop()


if __name__ == "__main__":
    main()
