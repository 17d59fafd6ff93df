"""Reading Prometheus exposition text: counters' totals and histograms' sums over label sets."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvharness.bench.scrape import totals


def test_totals_sum_counters_and_histograms_over_labels() -> None:
    reg = CollectorRegistry()
    tokens = Counter("vllm:prompt_tokens", "prompt tokens", ["engine"], registry=reg)
    tokens.labels("0").inc(100)
    tokens.labels("1").inc(23)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["engine"], registry=reg)
    for engine, seconds in (("0", 0.25), ("0", 0.5), ("1", 2.0)):
        ttft.labels(engine).observe(seconds)
    Gauge("vllm:num_requests_running", "running", registry=reg).set(7)
    Counter("other_total", "not asked for", registry=reg).inc(5)
    text = generate_latest(reg).decode()

    got = totals(
        text,
        {"vllm:prompt_tokens", "vllm:time_to_first_token_seconds", "vllm:absent"},
    )
    # A counter's _created samples and a histogram's buckets and count are not summed in.
    assert got == {"vllm:prompt_tokens": 123.0, "vllm:time_to_first_token_seconds": 2.75}
    assert totals(text, {"vllm:num_requests_running"}) == {"vllm:num_requests_running": 7.0}


def test_totals_rejects_what_is_not_exposition_text() -> None:
    with pytest.raises(ValueError):
        totals('vllm:prompt_tokens_total{engine="0" 5\n', {"vllm:prompt_tokens"})
