"""A bench run end to end: run directory, configuration, server metrics, records, report.

Run directory (see :mod:`kvharness.report.io`)::

    config.json    the resolved BenchConfig (written first; ``--resume`` reads it back)
    records.jsonl  one TurnRecord per attempt, appended as each ends
    metrics.json   server counters before/after each pass, their deltas, and each engine's
                   KV cache (block size, blocks) as its /metrics says
    bench.json     client-side figures records cannot hold (inter-chunk gaps, counts)
    summary.json, report.html   the report (when :mod:`kvharness.report` is available)
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from kvharness.bench import scrape
from kvharness.bench.config import BenchConfig
from kvharness.bench.progress import live_progress
from kvharness.bench.runner import Counts, Runner, finished_turns
from kvharness.bench.transport import HttpTransport
from kvharness.bench.words import PromptWords, prompt_words
from kvharness.configs import from_json, to_json_dict
from kvharness.errors import UserError
from kvharness.files import read_json, replacing
from kvharness.report.io import write_run_report
from kvharness.report.metrics import Summary
from kvharness.report.records import RecordWriter, TurnRecord, read_records
from kvharness.wire import blocking, vllm
from kvharness.wire.http import Client, WireError
from kvharness.workload.ideal import IdealCache
from kvharness.workload.load import load_workload
from kvharness.workload.model import Session, Workload

__all__ = ["BenchResult", "load_bench_workload", "reset_prefix_cache", "run_bench"]

CONFIG = "config.json"
RECORDS = "records.jsonl"
METRICS = "metrics.json"


@dataclass(slots=True)
class BenchResult:
    """Outcome of one run (all passes, resumes included, as read back from its records)."""

    run_dir: Path
    turns_total: int
    turns_ok: int
    attempts_failed: int
    errors: dict[str, int]
    sessions_abandoned: int
    client_cpu_s: float = 0.0
    """CPU seconds this process spent while the last pass ran (all threads)."""
    attempts_last_pass: int = 0
    records: list[TurnRecord] = field(default_factory=list)
    summary: Summary | None = None
    """The report's summary of the run."""
    server: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def turns_failed(self) -> int:
        return self.turns_total - self.turns_ok

    def failure_line(self) -> str | None:
        """One line saying why the run is a failure, or None when every turn succeeded."""
        if self.turns_failed == 0:
            return None
        causes = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())) or "not run"
        return (
            f"{self.turns_failed} of {self.turns_total} turns failed ({causes}); records in "
            f"{self.run_dir / RECORDS}; finish with `kvharness bench --resume {self.run_dir}`"
        )


def load_bench_workload(cfg: BenchConfig) -> Workload:
    """The config's workload (first ``max_sessions`` sessions)."""
    w = load_workload(cfg.workload, block_size=cfg.workload_block_size, tokenizer=cfg.tokenizer)
    if cfg.max_sessions is not None:
        w = Workload(w.sessions[: cfg.max_sessions], w.block_size, w.name, w.arrival, w.meta)
    if not w.sessions:
        raise UserError(f"workload {cfg.workload!r} has no sessions")
    return w


def discover_model(backend: str) -> str:
    """The first model a server lists at /v1/models."""
    try:
        return blocking.run(lambda c: vllm.first_model(c, backend))
    except WireError as err:
        raise UserError(
            f"cannot list models at {backend}/v1/models ({err}); pass --model"
        ) from None


def reset_prefix_cache(backend: str) -> bool:
    """Ask a vLLM server to drop its prefix cache (POST /reset_prefix_cache, a vLLM dev-mode
    endpoint); False when the server does not offer it."""
    return blocking.run(lambda c: vllm.reset_prefix_cache(c, backend))


def _save_config(run_dir: Path, cfg: BenchConfig) -> None:
    data = msgspec.json.encode(to_json_dict(cfg))
    with replacing(run_dir / CONFIG) as tmp:
        tmp.write_bytes(msgspec.json.format(data, indent=2) + b"\n")


def load_config(run_dir: Path) -> BenchConfig:
    """The configuration saved in ``run_dir`` (one written by an older version too)."""
    path = run_dir / CONFIG
    try:
        return from_json(BenchConfig, path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{run_dir} is not a bench run directory (no {CONFIG})") from None
    except msgspec.DecodeError as err:
        raise UserError(f"{path}: {err}") from None


def _rebuild_ideal(workload: Workload, records: list[TurnRecord]) -> IdealCache:
    """The ideal cache as it stood after the finished turns (visited in the order they went)."""
    by_id: dict[str, Session] = {s.id: s for s in workload.sessions}
    ideal = IdealCache()
    for r in sorted((r for r in records if r.ok), key=lambda r: r.sent):
        s = by_id.get(r.session)
        if s is not None and r.turn < len(s.turns):
            ideal.insert(s.turns[r.turn].input)
    return ideal


async def _run(
    cfg: BenchConfig,
    workload: Workload,
    run_dir: Path,
    previous: list[TurnRecord],
    progress: bool,
    words: PromptWords | None,
) -> tuple[Counts, dict[str, Any], array[float]]:
    # perf_counter, not loop.time(): uvloop's loop clock has only millisecond resolution.
    perf = time.perf_counter
    origin = perf() - (time.time() - cfg.started_at)

    def clock() -> float:
        return perf() - origin

    gaps: array[float] = array("d")
    scraper = Client(connect_timeout_s=cfg.retry.connect_timeout_s)
    before = await scrape.scrape_all(scraper, cfg.scraped) if cfg.scrape_metrics else {}
    engines = await scrape.engines(scraper, cfg.scraped) if cfg.scrape_metrics else {}
    transport = HttpTransport(
        clock,
        timeout_s=cfg.retry.timeout_s,
        connect_timeout_s=cfg.retry.connect_timeout_s,
        gaps=gaps,
        session_header=cfg.session_header if cfg.mode == "session" else None,
    )
    try:
        with RecordWriter(run_dir / RECORDS) as writer:
            runner = Runner(
                workload, cfg, transport, writer, clock,
                finished=finished_turns(previous), ideal=_rebuild_ideal(workload, previous),
                words=words,
            )  # fmt: skip
            runner.prepare()
            gc.collect()
            gc.freeze()  # the workload and caches are long-lived: keep them out of GC passes
            cpu0 = time.process_time()
            try:
                async with live_progress(runner.counts, enabled=progress, label=cfg.mode):
                    await runner.run()
            finally:
                gc.unfreeze()
                runner.counts.cpu_s = time.process_time() - cpu0
    finally:
        await transport.close()
    after = await scrape.scrape_all(scraper, cfg.scraped) if cfg.scrape_metrics else {}
    scraper.close()
    server = {
        "before": before,
        "after": after,
        "delta": scrape.delta(before, after),
        "engines": engines,
    }
    return runner.counts, server, gaps


def _loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a run uses (None: asyncio's default)."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise UserError("--event-loop uvloop: uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _write_report(run_dir: Path, cfg: BenchConfig, workload: Workload) -> Summary:
    expected = {s.id: len(s.turns) for s in workload.sessions}
    config = to_json_dict(cfg)
    config["label"] = cfg.label or cfg.mode
    return write_run_report(run_dir, None, config, expected_turns=expected)


def run_bench(
    cfg: BenchConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    progress: bool = False,
    workload: Workload | None = None,
) -> BenchResult:
    """Run (or with ``resume``, continue) a bench pass into ``run_dir`` and write its report.

    ``cfg.model`` None is resolved from the first backend. Faults do not raise: the result counts
    them (see :meth:`BenchResult.failure_line`).
    """
    run_dir = Path(run_dir)
    if resume:
        cfg = dataclasses.replace(load_config(run_dir), backends=cfg.backends)
    workload = workload or load_bench_workload(cfg)
    # Text prompts' words first: a tokenizer that offers too few fails before the run starts.
    words = prompt_words(cfg.tokenizer) if cfg.text_prompts else None
    passes = _read_passes(run_dir / METRICS)
    if resume:
        previous = read_records(run_dir / RECORDS) if (run_dir / RECORDS).exists() else []
    else:
        if (run_dir / RECORDS).exists():
            raise UserError(f"{run_dir} already holds a run; pick another --out or use --resume")
        run_dir.mkdir(parents=True, exist_ok=True)
        previous = []
        if cfg.model is None:
            cfg = dataclasses.replace(cfg, model=discover_model(cfg.backends[0]))
        cfg = dataclasses.replace(cfg, started_at=time.time())
        _save_config(run_dir, cfg)
    with asyncio.Runner(loop_factory=_loop_factory(cfg.event_loop)) as runner:
        counts, server, gaps = runner.run(_run(cfg, workload, run_dir, previous, progress, words))
    _write_passes(run_dir / METRICS, [*passes, server])
    records = read_records(run_dir / RECORDS)
    ok = finished_turns(records)
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            cause = r.error.split(":", 1)[0]
            errors[cause] = errors.get(cause, 0) + 1
    result = BenchResult(
        run_dir=run_dir,
        turns_total=workload.num_turns,
        turns_ok=len(ok),
        attempts_failed=sum(errors.values()),
        errors=errors,
        sessions_abandoned=counts.sessions_abandoned,
        client_cpu_s=counts.cpu_s,
        attempts_last_pass=counts.turns_ok + counts.attempts_failed,
        records=records,
        server=server["delta"],
    )
    _write_bench_json(run_dir, result, gaps)
    result.summary = _write_report(run_dir, cfg, workload)
    return result


def _read_passes(path: Path) -> list[Any]:
    """The JSON list of passes in ``path`` (empty when there is none yet)."""
    if not path.exists():
        return []
    passes: list[Any] = read_json(path, list, "a JSON list of passes")
    return passes


def _write_passes(path: Path, passes: list[Any]) -> None:
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(passes, indent=2) + "\n")


def _write_bench_json(run_dir: Path, result: BenchResult, gaps: array[float]) -> None:
    import numpy as np

    g = np.frombuffer(gaps, dtype=np.float64) if len(gaps) else np.zeros(0)
    data = {
        "turns_total": result.turns_total,
        "turns_ok": result.turns_ok,
        "turns_failed": result.turns_failed,
        "attempts_failed": result.attempts_failed,
        "errors": result.errors,
        "sessions_abandoned_last_pass": result.sessions_abandoned,
        "client_cpu_s_last_pass": result.client_cpu_s,
        "client_cpu_per_attempt_us": (
            result.client_cpu_s / result.attempts_last_pass * 1e6
            if result.attempts_last_pass
            else None
        ),
        "inter_chunk_gap_s": {
            "n": int(g.size),
            **(
                {k: float(np.percentile(g, q)) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))}
                if g.size
                else {}
            ),
        },
        "server_prefix_hit_ratio_last_pass": scrape.hit_ratio(result.server),
    }
    with replacing(run_dir / "bench.json") as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
