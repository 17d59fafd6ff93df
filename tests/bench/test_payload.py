"""Request bodies: token-id prompts equal the chain's materialisation; chat turns carry the
session's messages so far."""

from __future__ import annotations

import json
from collections.abc import Callable

from kvharness.bench.payload import CHAT, COMPLETIONS, PayloadBuilder, encode_messages
from kvharness.workload.chain import ChainBuilder, materialise
from kvharness.workload.model import Session, Turn, Workload


def test_completion_body_is_the_materialised_chain(agent_workload: Callable[..., Workload]) -> None:
    w = agent_workload(sessions=2, turns=3, repo_tokens=700)
    pb = PayloadBuilder("m", 1000)
    pb.prepare(t.input for s in w.sessions for t in s.turns)
    for s in w.sessions:
        for i, t in enumerate(s.turns):
            path, body = pb.request(s, i, [])
            req = json.loads(body)
            assert path == COMPLETIONS
            assert req["prompt"] == materialise(t.input, 1000)
            assert req["max_tokens"] == t.output_tokens and req["ignore_eos"] is True
            assert req["temperature"] == 0
            assert req["stream"] is True and req["stream_options"] == {"include_usage": True}
            assert req["model"] == "m"


def test_chat_body_accumulates_the_sessions_messages() -> None:
    b = ChainBuilder(16)
    turns = []
    for i in range(3):
        b.extend_tokens(range(10 * i, 10 * i + 10))
        msgs = ({"role": "user", "content": f"step {i}"},)
        if i:
            msgs = ({"role": "assistant", "content": f"answer {i - 1}"}, *msgs)
        turns.append(Turn(b.chain(), 5, messages=msgs))
    s = Session("c", tuple(turns))
    pb = PayloadBuilder("m", 1024, ignore_eos=False)
    path, body = pb.request(s, 2, encode_messages(s))
    req = json.loads(body)
    assert path == CHAT and "ignore_eos" not in req
    assert [m["content"] for m in req["messages"]] == [
        "step 0", "answer 0", "step 1", "answer 1", "step 2",
    ]  # fmt: skip
