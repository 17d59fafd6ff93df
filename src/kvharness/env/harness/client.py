"""A small OpenAI chat-completions client (streaming, over :mod:`kvharness.wire`) that measures
each call.

One method, :meth:`ChatClient.complete`: messages and tools in, a :class:`ModelReply` out, with the
assistant message assembled from the stream (text and tool-call deltas) and a :class:`ModelCall`
holding what a serving study needs: prompt / completion / cached tokens (``usage`` and
``usage.prompt_tokens_details.cached_tokens``, asked for with ``stream_options.include_usage``),
and the send, first-token and done times (seconds on the caller's clock, ``time.perf_counter``
relative to the ``t0`` the caller gives).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from kvharness.wire import vllm
from kvharness.wire.http import Client, WireError
from kvharness.wire.openai import ToolCallDelta, Usage, decode_chunk
from kvharness.wire.sse import DONE, SSEParser

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
    added when missing). Holds one pooled HTTP client, made on first use in the running event
    loop; close it with :meth:`close` or ``async with``. Safe to share between concurrent
    episodes."""

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
        self.root = self.base_url.removesuffix("/v1")
        self.api_key = api_key
        self._timeout_s = timeout
        self._headers = b"Content-Type: application/json\r\n"
        if api_key:
            self._headers += f"Authorization: Bearer {api_key}\r\n".encode()
        self._client: Client | None = None

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> Client:
        if self._client is None:
            self._client = Client(timeout_s=self._timeout_s)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def resolve_model(self) -> str:
        """The model to ask for: the one given, else the first the endpoint lists."""
        if self.model is None:
            try:
                self.model = await vllm.first_model(self._http(), self.root)
            except WireError as err:
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
        body: dict[str, Any] = {
            "model": await self.resolve_model(),
            "messages": list(messages),
            "add_generation_prompt": True,
        }
        if tools:
            body["tools"] = list(tools)
        try:
            return await vllm.tokenize(self._http(), self.root, body, timeout_s=self._timeout_s)
        except vllm.Unexpected as err:
            raise ModelError(str(err)) from None
        except WireError as err:
            raise ModelError(f"POST /tokenize: {type(err).__name__}: {err}") from None

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        tool_choice: str = "auto",
        t0: float = 0.0,
        max_tokens: int | None = None,
    ) -> ModelReply:
        """One streamed chat completion. ``t0``: the caller's origin on ``time.perf_counter``;
        ``max_tokens``: this call's completion budget (default: the client's). Raises
        :class:`ModelError` on any failure."""
        body: dict[str, Any] = {
            "model": await self.resolve_model(),
            "messages": list(messages),
            "max_tokens": self.max_tokens if max_tokens is None else max_tokens,
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
        usage: Usage | None = None
        finish: str | None = None
        url = self.base_url + "/chat/completions"
        try:
            resp = await self._http().request("POST", url, _json.encode(body), self._headers)
            try:
                if resp.status != 200:
                    text = (await resp.read(65536)).decode("utf-8", "replace")[:300]
                    raise ModelError(f"http {resp.status}: {text}")
                parser = SSEParser()
                while piece := await resp.first():
                    for data in parser.feed(piece):
                        if data == DONE:
                            break
                        chunk = decode_chunk(data)
                        if chunk.usage is not None:
                            usage = chunk.usage
                        for choice in chunk.choices:
                            delta = choice.delta
                            if delta is not None:
                                if first is None and (delta.content or delta.tool_calls):
                                    first = time.perf_counter() - t0
                                if delta.content:
                                    content.append(delta.content)
                                for tc in delta.tool_calls or ():
                                    _merge_tool_call(calls, tc)
                            if choice.finish_reason:
                                finish = choice.finish_reason
            finally:
                resp.release()
        except (WireError, msgspec.DecodeError) as err:
            raise ModelError(f"{type(err).__name__}: {err}") from None
        done = time.perf_counter() - t0
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        call = ModelCall(
            sent=sent,
            first_token=first,
            done=done,
            prompt_tokens=usage.prompt_tokens if usage is not None else 0,
            completion_tokens=usage.completion_tokens if usage is not None else 0,
            cached_tokens=usage.cached_tokens if usage is not None else None,
            finish_reason=finish,
        )
        return ModelReply(message, call)


_json = msgspec.json.Encoder()


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: ToolCallDelta) -> None:
    """Fold one streamed tool-call delta into the calls assembled so far (keyed by index)."""
    call = calls.setdefault(
        delta.index or 0, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if delta.id:
        call["id"] = delta.id
    fn = delta.function
    if fn is not None and fn.name:
        call["function"]["name"] += fn.name
    if fn is not None and fn.arguments:
        call["function"]["arguments"] += fn.arguments
