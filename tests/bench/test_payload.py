"""Request bodies: token-id prompts equal the chain's materialisation; chat turns carry the
session's messages so far."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

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


def test_api_chat_sends_a_hash_only_turn_as_one_user_message_of_its_text(
    agent_workload: Callable[..., Workload],
) -> None:
    w = agent_workload(sessions=1, turns=2, repo_tokens=300)
    words = ["alpha", "beta", 'quo"te', "delta"]
    text = PayloadBuilder("m", 1000, words=words)
    chat = PayloadBuilder("m", 1000, words=words, chat=True)
    s = w.sessions[0]
    for i in range(len(s.turns)):
        path, body = chat.request(s, i, [])
        req = json.loads(body)
        assert path == CHAT and "prompt" not in req
        # The user message is exactly the text a text completion of the same turn sends.
        assert req["messages"] == [
            {"role": "user", "content": json.loads(text.request(s, i, [])[1])["prompt"]}
        ]
        assert req["max_tokens"] == s.turns[i].output_tokens and req["stream"] is True
    with pytest.raises(ValueError, match="need words"):
        PayloadBuilder("m", 1000, chat=True)


def test_an_image_turn_is_one_user_message_of_text_and_image_parts_in_prompt_order() -> None:
    from kvharness.workload.images import Image

    words = [f"w{i}" for i in range(50)]
    b = ChainBuilder(16)
    b.extend_segment(1, 20)
    shot = Image(b.num_tokens, 30, 64, 40, 99)
    b.extend_image(shot.hash, shot.tokens)
    b.extend_segment(2, 7)
    turn = Turn(b.chain(), 3, images=(shot,))
    asked: list[Image] = []

    def url(im: Image) -> str:
        asked.append(im)
        return f"data:image/png;base64,{im.hash}"

    pb = PayloadBuilder("m", 1000, words=words, image_url=url)
    path, body = pb.request(Session("s", (turn,)), 0, [])
    assert path == CHAT
    (msg,) = json.loads(body)["messages"]
    first, image, last = msg["content"]
    assert image == {"type": "image_url", "image_url": {"url": "data:image/png;base64,99"}}
    # The text parts are the words of the chain's tokens around the image, nothing else.
    whole = json.loads(PayloadBuilder("m", 1000, words=words).completions(b.chain(), 1))["prompt"]
    toks = whole.split(" ")[1:]
    assert first["text"].split(" ")[1:] == toks[:20]
    assert last["text"].split(" ")[1:] == toks[50:]
    pb.request(Session("s", (turn,)), 0, [])
    assert asked == [shot]  # each image's URL is made once
    with pytest.raises(ValueError, match="need words and an image_url"):
        PayloadBuilder("m", 1000).request(Session("s", (turn,)), 0, [])
