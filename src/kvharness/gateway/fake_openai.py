"""A FAKE OpenAI-compatible server: canned answers, no model. For measuring the gateway's own
overhead (an engine's time would drown it) and for fault tests that need a backend to misbehave
on cue. Not an engine: tests of real serving use vLLM.

Answers ``/v1/chat/completions`` and ``/v1/completions`` (streaming or not) with ``max_tokens``
(default 8, capped at 4096) tokens of the word "tok", ``/v1/models``, ``/health``, a ``/metrics``
that reports a vLLM-style ``vllm:cache_config_info`` and prefix-cache counters, and, given
``--tokenizer`` (a ``tokenizer.json``), vLLM's ``/tokenize``. Its "prefix cache" remembers whole
prompts: a prompt seen before counts as all cached (``cached_tokens`` in ``usage`` and
``vllm:prefix_cache_hits``), any other as none. A request whose client disconnects is cancelled,
as vLLM aborts it. Request headers steer faults:

* ``x-fake-cut-after: N``: send N stream chunks, then drop the connection (a mid-stream death).
* ``x-fake-status: CODE``: answer CODE with an error body.
* ``x-fake-delay-ms: MS``: wait before answering.
* ``x-fake-token-ms: MS``: pace streamed tokens MS apart (default ``--token-ms``, 0).

Run: ``python -m kvharness.gateway.fake_openai --port PORT [--block-size B]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time

from aiohttp import web

__all__ = ["main", "make_app"]

MODEL = "fake-model"


def _usage(prompt_tokens: int, completion: int, cached: int) -> dict[str, object]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def make_app(
    block_size: int = 16,
    num_blocks: int = 1000,
    name: str = "",
    token_ms: float = 0.0,
    tokenizer: str | None = None,
) -> web.Application:
    ids = itertools.count()
    stats = {"requests": 0, "inflight": 0, "queries": 0, "hits": 0}
    seen: set[int] = set()

    async def generate(request: web.Request) -> web.StreamResponse:
        stats["requests"] += 1
        stats["inflight"] += 1
        try:
            return await _generate(request)
        finally:
            stats["inflight"] -= 1

    async def _generate(request: web.Request) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        body = await request.json()
        delay = request.headers.get("x-fake-delay-ms")
        if delay:
            await asyncio.sleep(int(delay) / 1000)
        status = request.headers.get("x-fake-status")
        if status:
            code = int(status)
            err = {"error": {"message": f"fake failure {code}", "type": "fake", "code": code}}
            return web.json_response(err, status=code)
        n = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 8), 4096)
        prompt = body.get("messages") if chat else body.get("prompt")
        text = json.dumps(prompt)
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)  # token ids, counted as an engine counts them
        else:
            prompt_tokens = len(text) // 4
        key = hash(text)
        del text
        cached = prompt_tokens if key in seen else 0
        seen.add(key)
        stats["queries"] += prompt_tokens
        stats["hits"] += cached
        rid = f"fake-{next(ids)}"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            if chat:
                choice: dict[str, object] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": " tok" * n},
                    "finish_reason": "length",
                }
            else:
                choice = {"index": 0, "text": " tok" * n, "finish_reason": "length"}
            return web.json_response(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": MODEL,
                    "choices": [choice],
                    "usage": _usage(prompt_tokens, n, cached),
                    "served_by": name,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        cut = request.headers.get("x-fake-cut-after")
        pace = float(request.headers.get("x-fake-token-ms") or token_ms) / 1000
        if chat:
            delta: dict[str, object] = {"index": 0, "delta": {"content": " tok"}}
        else:
            delta = {"index": 0, "text": " tok"}
        chunk = {"id": rid, "object": obj + ".chunk", "created": created, "model": MODEL}
        chunk["choices"] = [delta]
        # Every token's chunk is the same: encoded once, so the fake costs little per chunk.
        event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for i in range(n):
            if pace and i:
                await asyncio.sleep(pace)
            if cut is not None and i == int(cut):
                assert request.transport is not None
                request.transport.abort()
                return resp
            await resp.write(event)
        last = {"id": rid, "object": obj + ".chunk", "created": created, "model": MODEL}
        last["choices"] = []
        last["usage"] = _usage(prompt_tokens, n, cached)
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
        )

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(request: web.Request) -> web.Response:
        text = (
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{num_blocks}"}} 1.0\n'
            f"fake_requests_total {stats['requests']}\n"
            # As if the engine ran one request at a time and queued the rest.
            f'vllm:num_requests_running{{engine="0"}} {min(1, stats["inflight"])}\n'
            f'vllm:num_requests_waiting{{engine="0"}} {max(0, stats["inflight"] - 1)}\n'
            f'vllm:kv_cache_usage_perc{{engine="0"}} {0.1 * stats["inflight"]}\n'
            "# TYPE vllm:prefix_cache_queries_total counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {stats["queries"]}\n'
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {stats["hits"]}\n'
        )
        return web.Response(text=text)

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        assert tok is not None
        enc = tok.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
        return web.json_response({"count": len(enc.ids), "tokens": enc.ids})

    app = web.Application(client_max_size=256 * 1024 * 1024)
    tok = None
    if tokenizer is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(tokenizer)
        app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_post("/v1/completions", generate)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a FAKE OpenAI-compatible server (no model)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, required=True, help="port to listen on")
    parser.add_argument("--block-size", type=int, default=16, help="block size /metrics reports")
    parser.add_argument("--name", default="", help="name put in non-streamed answers")
    parser.add_argument("--token-ms", type=float, default=0.0, help="pause between streamed tokens")
    parser.add_argument("--tokenizer", help="tokenizer.json that /tokenize answers with")
    args = parser.parse_args(argv)
    print(f"fake OpenAI server on {args.host}:{args.port}", file=sys.stderr, flush=True)
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    web.run_app(
        make_app(args.block_size, name=args.name, token_ms=args.token_ms, tokenizer=args.tokenizer),
        loop=loop,
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        handler_cancellation=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
