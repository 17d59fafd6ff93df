"""Routing a 128k-token agent prompt: incremental per-session hashing vs full re-tokenisation.

An agent session is built from the real SWE-agent trajectories in ../shared/traces/swe-agent (their
messages, in order, made distinct per step so no text repeats) until its prompt reaches the target
length with the tiny model's real byte-level BPE tokenizer and chat template. The next call appends
an assistant reply and a tool observation (about 800 tokens, the median append per agent step),
and is routed two ways:

* full: render the chat template, tokenise the whole prompt, hash every block;
* incremental: the gateway's PromptHasher with the session's previous prompt kept.

A third way times a *new* session whose prompt begins like the kept one (its first 90% of
messages: the system prompt and context an agent's sessions share) and then goes its own way (the
same append): the PromptHasher resumes it from the kept prompt.

Both then look the hashes up in a prefix index and let the agent_aware policy choose among 4
replicas, as the gateway does per request. The script checks both give the same hashes and prints
median/p90 milliseconds, the speed-up (target >= 10x), and the tokeniser's own time on the rendered
prompt (Hugging Face ``encode``), which bounds what the full way could save.

    .venv/bin/python benchmarks/gateway_hashing.py [--tokens 131072] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from kvharness.gateway.prompt_hasher import PromptHasher
from kvharness.gateway.router import Routed, Router
from kvharness.gateway.tokenizer import load_engine_tokenizer
from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy
from kvharness.testing.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / ".." / "shared" / "traces" / "swe-agent"
BS = 128


def trace_messages() -> list[dict[str, str]]:
    out = []
    for path in sorted(TRACES.glob("*.traj")):
        for m in json.loads(path.read_text())["history"]:
            content = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            role = m["role"] if m["role"] in ("user", "assistant") else "user"
            out.append({"role": role, "content": content})
    if not out:
        raise SystemExit(f"no trajectories under {TRACES}")
    return out


def build_session(tok: Any, target: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(messages of a ~target-token prompt, the 2 messages the next call appends)."""
    pool = trace_messages()
    msgs = [{"role": "system", "content": "You are a coding agent working in a repository."}]
    i = 0
    assert tok.template is not None
    count = 0  # tokens, counted per message (the template adds a few more)
    while count < target:
        m = pool[i % len(pool)]
        msgs.append({"role": m["role"], "content": f"[step {i}] " + m["content"][:6000]})
        count += len(tok.encode_ids(msgs[-1]["content"]))
        i += 1
    reply = {"role": "assistant", "content": "I will open the file and fix the comparison."}
    obs_text = pool[(i + 7) % len(pool)]["content"]
    while len(tok.encode_ids(obs_text)) < 800:
        obs_text += "\n" + pool[(i + 11) % len(pool)]["content"]
    obs = {"role": "user", "content": "[observation] " + tok_trim(tok, obs_text, 800)}
    return msgs, [reply, obs]


def tok_trim(tok: Any, text: str, n: int) -> str:
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tok.encode_ids(text[:mid])) <= n:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def route(router: Router, hashes: tuple[int, ...], n: int, now: float) -> Routed:
    req = RouteRequest("r", "s", hashes, n, 256)
    out = router.route(req, now)
    assert isinstance(out, Routed)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=131072, help="prompt length before the append")
    ap.add_argument("--repeats", type=int, default=15, help="timed repetitions of each way")
    args = ap.parse_args()

    tok = load_engine_tokenizer(ensure_tiny_model(REPO / ".cache" / "tiny-llama"))
    prefix, append = build_session(tok, args.tokens)
    nxt = prefix + append
    states = [ReplicaState(f"r{i}", capacity_blocks=20000, block_size=BS) for i in range(4)]
    index = PrefixIndex(4)
    router = Router(make_policy("agent_aware"), states, index)

    assert tok.template is not None
    text = tok.template.render(nxt, add_generation_prompt=True)
    forked = prefix[: len(prefix) * 9 // 10] + append
    forked_full = PromptHasher(tok, BS).chat(forked, None)
    full_ms, inc_ms, tok_ms, fork_ms = [], [], [], []
    for rep in range(args.repeats):
        # The tokeniser alone on the rendered prompt: what full hashing costs beyond it is ours.
        t0 = time.perf_counter()
        tok.encode_ids(text)
        tok_ms.append(1000 * (time.perf_counter() - t0))

        # Full: a hasher with no memory of the session.
        t0 = time.perf_counter()
        full = PromptHasher(tok, BS).chat(nxt, None)
        route(router, full.block_hashes, full.num_tokens, float(rep))
        full_ms.append(1000 * (time.perf_counter() - t0))

        # Incremental: the session's previous prompt is known (hashed when it was routed).
        h = PromptHasher(tok, BS)
        h.chat(prefix, "s")
        index.record_routed(0, h.chat(prefix, "s").block_hashes)
        t0 = time.perf_counter()
        inc = h.chat(nxt, "s")
        route(router, inc.block_hashes, inc.num_tokens, float(rep))
        inc_ms.append(1000 * (time.perf_counter() - t0))
        assert inc.block_hashes == full.block_hashes and inc.num_tokens == full.num_tokens

        # A new session beginning like the kept one.
        t0 = time.perf_counter()
        fork = h.chat(forked, "t")
        route(router, fork.block_hashes, fork.num_tokens, float(rep))
        fork_ms.append(1000 * (time.perf_counter() - t0))
        assert fork.block_hashes == forked_full.block_hashes and h.stats.shared == 1

    def stats(xs: list[float]) -> str:
        xs = sorted(xs)
        return f"median {statistics.median(xs):8.2f} ms  p90 {xs[int(0.9 * (len(xs) - 1))]:8.2f} ms"

    print(f"prompt: {full.num_tokens} tokens ({len(nxt)} messages, {len(full.block_hashes)} blocks "
          f"of {BS}); appended {full.num_tokens - inc.reused_tokens} tokens re-tokenised")  # fmt: skip
    print(f"full re-tokenisation + route : {stats(full_ms)}")
    print(f"  of which the tokeniser alone: {stats(tok_ms)}")
    print(f"incremental (session) + route: {stats(inc_ms)}")
    print(f"new session, {forked_full.num_tokens} tokens, {fork.reused_tokens} of them taken over "
          f"from the kept one + route: {stats(fork_ms)}")  # fmt: skip
    speedup = statistics.median(full_ms) / statistics.median(inc_ms)
    print(
        f"speed-up (median): {speedup:.1f}x  (target >= 10x: {'met' if speedup >= 10 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
