"""Text prompts (``--prompt-format text``) and the session header, without a model: words from the
tiny model's real BPE tokenizer, request bodies, and headers as a real aiohttp server on loopback
receives them from both HTTP clients."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import web
from tokenizers import Tokenizer, models, pre_tokenizers

from kvharness.bench.config import BenchConfig
from kvharness.bench.payload import COMPLETIONS, PayloadBuilder
from kvharness.bench.run import run_bench
from kvharness.bench.transport import header_value
from kvharness.bench.words import prompt_words, tokenizer_words
from kvharness.cli import main
from kvharness.errors import UserError
from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.workload.chain import BlockChain, ChainBuilder, default_words, materialise_words
from kvharness.workload.format import save
from kvharness.workload.ideal import IdealCache, engine_cached_tokens
from kvharness.workload.model import Workload


def _tok(tiny_model_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def _chain(seed: int, n: int, block_size: int = 128) -> BlockChain:
    b = ChainBuilder(block_size)
    b.extend_segment(seed, n // 2)
    b.extend_segment(seed + 1, n - n // 2)
    return b.chain()


def test_tiny_tokenizer_words_give_one_token_per_word(tiny_model_dir: Path) -> None:
    pw = prompt_words(str(tiny_model_dir))
    tok = _tok(tiny_model_dir)
    assert pw.exact and len(pw.words) >= 64 and pw.special_tokens == 1
    assert list(pw.words) == sorted(pw.words) and all(w.isascii() and w.isalpha() for w in pw.words)
    for seed, n in ((1, 1000), (7, 2049), (9, 37)):
        chain = _chain(seed, n)
        text = materialise_words(chain, pw.words)
        assert len(tok.encode(text, add_special_tokens=False).ids) == n
        assert len(tok.encode(text).ids) == n + 1  # plus the BOS
    # a prefix chain (full blocks and a partial tail of the longer chain's block) is a string
    # prefix, and its tokens are a prefix of the longer chain's tokens
    long = _chain(3, 1500)
    short = BlockChain(128, long.hashes[:6], 5 * 128 + 77)
    t_long, t_short = materialise_words(long, pw.words), materialise_words(short, pw.words)
    assert t_long.startswith(t_short) and len(t_short) < len(t_long)
    ids_long, ids_short = tok.encode(t_long).ids, tok.encode(t_short).ids
    assert len(ids_short) == short.num_tokens + 1 and ids_long[: len(ids_short)] == ids_short


def test_run_together_check_drops_words_that_merge() -> None:
    vocab = {f"word{chr(97 + i // 26)}{chr(97 + i % 26)}": i for i in range(100)}
    vocab["[UNK]"] = len(vocab)
    split = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    split.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert len(tokenizer_words(split).words) == 100
    # Without a pre-tokenizer each " word" alone is one (unknown) token, but a run of words is
    # one token too: the long-run check must find that and refuse.
    whole = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    assert len(whole.encode(" wordaa", add_special_tokens=False).ids) == 1
    with pytest.raises(UserError, match="one token each"):
        tokenizer_words(whole)


def test_without_a_tokenizer_the_builtin_words_are_used() -> None:
    pw = prompt_words(None)
    assert pw.words == default_words() and not pw.exact and pw.special_tokens == 0
    with pytest.raises(UserError, match="no tokenizer at"):
        prompt_words("/nonexistent/tokenizer")


def test_text_body_is_the_chains_words_and_cheap_to_grow(tiny_model_dir: Path) -> None:
    pw = prompt_words(str(tiny_model_dir))
    pb = PayloadBuilder("m", 1024, words=pw.words)
    long = _chain(5, 900)
    short = BlockChain(128, long.hashes[:3], 2 * 128 + 10)
    for chain in (short, long):
        req = json.loads(pb.completions(chain, 4))
        assert req["prompt"] == materialise_words(chain, pw.words)
        assert req["max_tokens"] == 4 and req["stream"] is True
    # one fragment per (block, length): short's 3 (its tail its own) + long's blocks 2..7
    assert len(pb._blocks) == 3 + 6


def test_header_values_cannot_break_a_request_head() -> None:
    assert header_value("syn-3") == "syn-3"
    assert header_value("a\r\nx-evil: 1") == "a%0D%0Ax-evil:%201"
    assert header_value("sessión") == "sessi%C3%B3n"


# -- a real aiohttp server on loopback ----------------------------------------------------------

_SSE = (
    b'data: {"choices":[{"text":"a"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
    b"data: [DONE]\n\n"
)


class _Recorder:
    """An aiohttp server in its own thread that answers completions and keeps each request's
    headers and JSON body."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], dict[str, object]]] = []
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(({k.lower(): v for k, v in request.headers.items()}, body))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_SSE % len(body["prompt"]))
        await resp.write_eof()
        return resp

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post(COMPLETIONS, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def __enter__(self) -> _Recorder:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    with _Recorder() as r:
        yield r


def _save(w: Workload, tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    save(w, path)
    return path


def test_session_mode_sends_the_session_id_header_from_both_clients(
    tmp_path: Path, recorder: _Recorder, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig], tiny_model_dir: Path,
) -> None:  # fmt: skip
    w = agent_workload(sessions=3, turns=3, repo_tokens=300, gap=0.01, start_spacing=0.02)
    cfg = bench_config([recorder.url], _save(w, tmp_path), prompt_format="text",
                       tokenizer=str(tiny_model_dir))  # fmt: skip
    res = run_bench(cfg, tmp_path / "run")
    assert res.failure_line() is None and len(recorder.seen) == 9
    pw = prompt_words(str(tiny_model_dir))
    texts = {materialise_words(t.input, pw.words): s.id for s in w.sessions for t in s.turns}
    for headers, body in recorder.seen:
        assert isinstance(body["prompt"], str)
        assert headers["x-session-id"] == texts[body["prompt"]]  # the prompt's own session
    assert sorted(h["x-session-id"] for h, _ in recorder.seen) == sorted(
        s.id for s in w.sessions for _ in s.turns
    )
    saved = msgspec.json.decode((tmp_path / "run" / "config.json").read_bytes())
    assert saved["prompt_format"] == "text" and saved["session_header"] == "x-session-id"


@pytest.mark.parametrize(
    ("kw", "name"),
    [({"mode": "isolated"}, "x-session-id"), ({"session_header": None}, "x-session-id"),
     ({"session_header": "x-agent-run"}, "x-agent-run")],
)  # fmt: skip
def test_isolated_mode_and_other_header_names(
    tmp_path: Path, recorder: _Recorder, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig], kw: dict[str, object], name: str,
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, turns=2, repo_tokens=200, gap=0.01, start_spacing=0.0)
    res = run_bench(bench_config([recorder.url], _save(w, tmp_path), **kw), tmp_path / "run")
    assert res.failure_line() is None and len(recorder.seen) == 4
    got = [h.get(name) for h, _ in recorder.seen]
    assert all(isinstance(b["prompt"], list) for _, b in recorder.seen)  # tokens: the default
    if name == "x-agent-run":
        assert sorted(got) == ["s0", "s0", "s1", "s1"]
        assert all("x-session-id" not in h for h, _ in recorder.seen)
    else:
        assert got == [None] * 4


# -- ideal cached tokens and resume, against the fake server ------------------------------------


def test_text_mode_ideal_counts_the_bos_and_resume_keeps_text(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig], tiny_model_dir: Path,
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, repos=1, turns=4, repo_tokens=255, task_tokens=100,
                       observation_tokens=140, gap=0.01, start_spacing=0.3,
                       block_size=85)  # fmt: skip
    bodies: list[bytes] = []

    def plan(n: int, body: bytes) -> str | None:
        bodies.append(body)
        return "http 400" if n == 5 else None  # one session fails mid-way

    fake.plan = plan
    cfg = bench_config([fake.url], _save(w, tmp_path), prompt_format="text",
                       tokenizer=str(tiny_model_dir))  # fmt: skip
    first = run_bench(cfg, tmp_path / "run")
    assert first.failure_line() is not None and first.turns_ok < 8
    fake.plan = lambda n, body: bodies.append(body)  # type: ignore[func-returns-value]
    n_before = len(bodies)
    bare = dataclasses.replace(cfg, prompt_format="tokens", tokenizer=None)
    second = run_bench(bare, tmp_path / "run", resume=True)  # config comes from config.json
    assert second.failure_line() is None and second.turns_ok == 8
    assert len(bodies) > n_before
    assert all(isinstance(json.loads(b)["prompt"], str) for b in bodies)
    ideal = IdealCache()
    chains = {(s.id, i): t.input for s in w.sessions for i, t in enumerate(s.turns)}
    for r in sorted((r for r in second.records if r.ok), key=lambda r: r.sent):
        c = chains[(r.session, r.turn)]
        hit = ideal.visit(c).tokens
        assert r.ideal_cached_tokens == engine_cached_tokens(hit + 1 if hit else 0,
                                                             c.num_tokens + 1, 128)  # fmt: skip
    # the sessions share the repository's 255 tokens (3 blocks of 85): with the BOS, 256 tokens,
    # two whole engine blocks (without it only one)
    assert second.records[0].ideal_cached_tokens == 0
    assert sorted(r.ideal_cached_tokens for r in second.records if r.turn == 0)[-1] == 256


def test_old_config_without_the_new_fields_still_resumes(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, turns=2, repo_tokens=200, gap=0.01, start_spacing=0.0)
    cfg = bench_config([fake.url], _save(w, tmp_path))
    fake.plan = lambda n, body: "http 400" if n == 0 else None
    run_bench(cfg, tmp_path / "run")
    path = tmp_path / "run" / "config.json"
    old = json.loads(path.read_text())
    del old["prompt_format"], old["session_header"]
    path.write_text(json.dumps(old))
    fake.plan = None
    res = run_bench(cfg, tmp_path / "run", resume=True)
    assert res.failure_line() is None and res.turns_ok == 4


def test_cli_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for opt in ("--prompt-format {tokens,text}", "--session-header NAME", "--no-session-header"):
        assert opt in out
    assert "approximate" in out
    argv = ["bench", "--backend", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path)]
    assert main([*argv, "--session-header", "bad name"]) == 2
    assert "not a valid HTTP header name" in capsys.readouterr().err


def test_cli_text_without_a_tokenizer_warns_and_uses_the_builtin_words(
    tmp_path: Path, fake: FakeOpenAI, agent_workload_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    bodies: list[bytes] = []
    fake.plan = lambda n, body: bodies.append(body)  # type: ignore[func-returns-value]
    code = main(["bench", "--backend", fake.url, "--model", "stub", "--workload",
                 str(agent_workload_file), "--prompt-format", "text", "--time-scale", "0.05",
                 "--no-metrics", "--no-progress", "--out", str(tmp_path / "run")])  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "ideal cached tokens are approximate" in out
    words = set(default_words())
    prompts = [json.loads(b)["prompt"] for b in bodies]
    assert len(prompts) == 12 and all(
        p.startswith(" ") and set(p.split()) <= words for p in prompts
    )
