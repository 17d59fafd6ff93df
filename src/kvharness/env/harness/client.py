"""A small OpenAI chat-completions client (aiohttp, streaming) that measures each call.

One method, :meth:`ChatClient.complete`: messages and tools in, a :class:`ModelReply` out, with the
assistant message assembled from the stream (text and tool-call deltas) and a :class:`ModelCall`
holding what a serving study needs: prompt / completion / cached tokens (``usage`` and
``usage.prompt_tokens_details.cached_tokens``, asked for with ``stream_options.include_usage``),
and the send, first-token and done times (seconds on the caller's clock, ``time.perf_counter``
relative to the ``t0`` the caller gives).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

__all__ = ["ChatClient", "ModelCall", "ModelError", "ModelReply"]


class ModelError(RuntimeError):
    """The endpoint failed a call (HTTP status, bad stream, connection error)."""


@dataclass(frozen=True, slots=True)
class ModelCall:
    """Measurements of one chat completion. Times in seconds since the episode's start;
    ``cached_tokens`` is None when the server does not report it."""

    sent: float
    first_token: float | None
    done: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The assistant message (``role``, ``content``, optional ``tool_calls``) and its call."""

    message: dict[str, Any]
    call: ModelCall


class ChatClient:
    """Chat completions against ``endpoint`` (a base URL such as ``http://host:8000``; ``/v1`` is
    added when missing). Holds one aiohttp session; close it with :meth:`close` or ``async
    with``. Safe to share between concurrent episodes."""

    def __init__(
        self,
        endpoint: str,
        model: str | None = None,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        timeout: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        base = endpoint.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def resolve_model(self) -> str:
        """The model to ask for: the one given, else the first the endpoint lists."""
        if self.model is None:
            try:
                async with self._http().get(self.base_url + "/models") as resp:
                    if resp.status != 200:
                        raise ModelError(f"GET /v1/models: http {resp.status}")
                    data = await resp.json()
                self.model = str(data["data"][0]["id"])
            except (aiohttp.ClientError, KeyError, IndexError, ValueError) as err:
                raise ModelError(f"cannot list models at {self.base_url}: {err}") from None
        return self.model

    async def tokenize(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of the prompt the server builds from ``messages`` and ``tools`` (chat
        template applied, generation prompt added), from vLLM's ``POST /tokenize``;
        :class:`ModelError` when the endpoint has none."""
        root = self.base_url.removesuffix("/v1")
        body: dict[str, Any] = {
            "model": await self.resolve_model(),
            "messages": list(messages),
            "add_generation_prompt": True,
        }
        if tools:
            body["tools"] = list(tools)
        try:
            async with self._http().post(root + "/tokenize", json=body) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    raise ModelError(f"POST /tokenize: http {resp.status}: {text}")
                data = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise ModelError(f"POST /tokenize: {type(err).__name__}: {err}") from None
        tokens = data.get("tokens") if isinstance(data, Mapping) else None
        if not isinstance(tokens, list):
            raise ModelError("POST /tokenize: no 'tokens' in the answer")
        return [int(t) for t in tokens]

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        tool_choice: str = "auto",
        t0: float = 0.0,
    ) -> ModelReply:
        """One streamed chat completion. ``t0``: the caller's origin on ``time.perf_counter``.
        Raises :class:`ModelError` on any failure."""
        body: dict[str, Any] = {
            "model": await self.resolve_model(),
            "messages": list(messages),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = tool_choice
        sent = time.perf_counter() - t0
        first: float | None = None
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Mapping[str, Any] = {}
        finish: str | None = None
        try:
            async with self._http().post(self.base_url + "/chat/completions", json=body) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    raise ModelError(f"http {resp.status}: {text}")
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    chunk = json.loads(data)
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if first is None and (delta.get("content") or delta.get("tool_calls")):
                            first = time.perf_counter() - t0
                        if delta.get("content"):
                            content.append(delta["content"])
                        for tc in delta.get("tool_calls") or ():
                            _merge_tool_call(calls, tc)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as err:
            raise ModelError(f"{type(err).__name__}: {err}") from None
        done = time.perf_counter() - t0
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        call = ModelCall(
            sent=sent,
            first_token=first,
            done=done,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cached_tokens=int(cached) if cached is not None else None,
            finish_reason=finish,
        )
        return ModelReply(message, call)


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: Mapping[str, Any]) -> None:
    """Fold one streamed tool-call delta into the calls assembled so far (keyed by index)."""
    index = int(delta.get("index", 0))
    call = calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if delta.get("id"):
        call["id"] = delta["id"]
    fn = delta.get("function") or {}
    if fn.get("name"):
        call["function"]["name"] += fn["name"]
    if fn.get("arguments"):
        call["function"]["arguments"] += fn["arguments"]
