"""The live gateway: an OpenAI-compatible proxy that routes each request by KV-cache contents.

Module map (import the module you need; this package imports nothing on its own):

* :mod:`~kvharness.gateway.server` — :class:`Gateway`: the aiohttp app, proxying and streaming,
  retries, 429/400/504, the API key, health, ``/metrics``, ``/status``.
* :mod:`~kvharness.gateway.limits` — the shared byte budget for request bodies (413/503/408).
* :mod:`~kvharness.gateway.router` — the pure routing core: replica bookkeeping around the policy
  (the simulator's policy objects) and the prefix index; no I/O, no clock.
* :mod:`~kvharness.gateway.requests` — parsing and validating request bodies (400 reasons);
  :mod:`~kvharness.gateway.bigjson` — decoding large bodies in slices.
* :mod:`~kvharness.gateway.tokenizer` — the engines' tokenizer and chat template.
* :mod:`~kvharness.gateway.sessions` — incremental per-session tokenisation and block hashing.
* :mod:`~kvharness.gateway.hashing` — the gateway's chained block hashes over token ids.
* :mod:`~kvharness.gateway.kv_events` — vLLM KV events over ZMQ: decoding, sequence checks,
  replay, renaming engine hashes to the gateway's.
* :mod:`~kvharness.gateway.backends` — health checks, reading vLLM's cache config.
* :mod:`~kvharness.gateway.metrics` — Prometheus metrics; :mod:`~kvharness.gateway.engine_metrics`
  — the replicas' own metrics relayed, labelled by replica; :mod:`~kvharness.gateway.status` —
  the ``kvharness gateway status`` view; :mod:`~kvharness.gateway.config` — the configuration.
* :mod:`~kvharness.gateway.fake_openai` — a FAKE OpenAI server (no model) for overhead and fault
  tests.
"""
