"""The live gateway: an OpenAI-compatible proxy that routes each request by KV-cache contents.

Module map (import the module you need; this package imports nothing on its own):

* :mod:`~kvharness.gateway.app` — :class:`Gateway`: the parts put together, the aiohttp app and
  its lifecycle, ``/v1/models``, ``/health``, ``/metrics``, ``/status``, the API key.
* :mod:`~kvharness.gateway.pipeline` — one proxied request: read, parse, hash, route and retry,
  forward, relay (429/400/504, SSE error events).
* :mod:`~kvharness.gateway.replicas` — the replicas: health checks, discovery, load scrapes, KV
  event subscriptions, the tokenizer probe.
* :mod:`~kvharness.gateway.router` — the pure routing core: replica bookkeeping and health around
  the policy (the simulator's policy objects) and the prefix index; no I/O, no clock.
* :mod:`~kvharness.gateway.limits` — the shared byte budget for request bodies (413/503/408);
  :mod:`~kvharness.gateway.answers` — the gateway's own error answers and relayed streams.
* :mod:`~kvharness.gateway.requests` — parsing and validating request bodies (400 reasons);
  :mod:`~kvharness.gateway.bigjson` — decoding large bodies in slices.
* :mod:`~kvharness.gateway.tokenizer` — the engines' tokenizer and chat template.
* :mod:`~kvharness.gateway.prompt_hasher` — prompts tokenised and hashed incrementally per
  session (the block hash itself is :func:`kvharness.workload.chain.block_hash`);
  :mod:`~kvharness.gateway.byte_hasher` — prompts hashed by their bytes, without a tokenizer.
* :mod:`~kvharness.gateway.kv_events` — vLLM KV events' wire format;
  :mod:`~kvharness.gateway.hash_translator` — engine hashes renamed to the gateway's;
  :mod:`~kvharness.gateway.kv_subscriber` — one backend's events over ZMQ (gaps, replay).
* :mod:`~kvharness.gateway.metrics` — Prometheus metrics; :mod:`~kvharness.gateway.engine_metrics`
  — the replicas' own metrics relayed, labelled by replica; :mod:`~kvharness.gateway.config` —
  the configuration.

Everything said to the replicas goes through :mod:`kvharness.wire`.
"""
