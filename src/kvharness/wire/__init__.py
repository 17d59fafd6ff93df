"""wire: how kvharness talks to OpenAI-compatible and vLLM servers, written once.

Modules:

* :mod:`~kvharness.wire.http` — the HTTP/1.1 client: keep-alive pool, receivers fed from the
  socket's callbacks, the stock awaitable :class:`~kvharness.wire.http.Response`.
* :mod:`~kvharness.wire.sse` — server-sent event framing.
* :mod:`~kvharness.wire.openai` — OpenAI bodies: stream chunks, usage and cached tokens, error
  objects.
* :mod:`~kvharness.wire.vllm` — vLLM's endpoints (``/v1/models``, ``/tokenize``, ``/metrics``,
  ``/health``, ``/reset_prefix_cache``) and what its Prometheus text says.
* :mod:`~kvharness.wire.blocking` — the same calls for code without an event loop (the CLI,
  test helpers).

Above :mod:`kvharness.errors` only: bench, gateway, env and testing all talk through it.
"""
