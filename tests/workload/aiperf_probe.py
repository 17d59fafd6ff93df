"""Read a Mooncake-style trace with NVIDIA AIPerf's own loader, in-process: no server, no network.

Run with AIPerf's interpreter (``make aiperf``), never kvharness's; pytest does not collect this
file (no ``test_`` prefix), and it imports nothing from kvharness::

    .venv-aiperf/bin/python tests/workload/aiperf_probe.py TRACE [--tokenizer DIR]
        [--block-size N] [--turns]

It prints one JSON object: ``requests`` (turns AIPerf would send), ``sessions`` (its
conversations), ``sessions_turns`` ({session id: turns}; rows without ``session_id`` get a random
one each), ``phase``/``phase_requests`` (the timing mode ``aiperf profile`` picks for the file and
its request count), ``block_size`` (tokens per hash id), ``prompts`` (``synthesized`` or
``skipped``) and, with ``--turns``, each session's turns as ``[timestamp, delay, max_tokens]``.
On an error AIPerf raises it prints ``{"error": ...}`` and exits 1.

Without ``--tokenizer`` it runs the loader's ``load_dataset`` and ``convert_to_conversations`` but
leaves the prompts empty: AIPerf builds them from ``hash_ids`` by decoding tokens of a tokenizer
it would otherwise fetch from the Hub. With ``--tokenizer DIR`` (a local Hugging Face tokenizer,
e.g. the tests' tiny model) it runs the whole composer a profile run uses, prompts included; only
that path checks that ``input_length`` fits ``len(hash_ids)`` blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # no network; AIPerf's decode workers force it anyway


def build_run(trace: str, tokenizer: str | None, block_size: int | None) -> Any:
    """The BenchmarkRun of ``aiperf profile --input-file TRACE --custom-dataset-type
    mooncake_trace``, built by AIPerf's own CLI converter (it picks fixed_schedule when the
    first row has a timestamp) and checked by its dataset and timing resolvers."""
    from aiperf.cli_runner import _make_benchmark_run
    from aiperf.config.dataset.resolver import DatasetResolver
    from aiperf.config.flags import CLIConfig
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan
    from aiperf.config.resolution.resolvers import TimingResolver

    flags: dict[str, Any] = {
        "model_names": ["probe"],
        "urls": ["http://127.0.0.1:9"],  # never contacted
        "input_file": trace,
        "custom_dataset_type": "mooncake_trace",
    }
    if tokenizer is not None:
        flags["tokenizer_name"] = tokenizer
    if block_size is not None:
        flags["prompt_input_tokens_block_size"] = block_size
    plan = build_benchmark_plan(resolve_config(CLIConfig(**flags), None))
    run = _make_benchmark_run(plan.configs[0])
    # The rest of the chain (tokenizer alias look-up, artifact dirs, ZMQ ports) is not about the file.
    DatasetResolver().resolve(run)
    TimingResolver().resolve(run)
    return run


def load(run: Any, tokenizer: str | None) -> tuple[list[Any], int]:
    """AIPerf's conversations for the run's file, and the loader's block size."""
    from aiperf.common import random_generator as rng
    from aiperf.dataset.composer.custom import CustomDatasetComposer

    rng.reset()  # as bootstrap.py does in each AIPerf service before it starts
    rng.init(run.random_seed)

    if tokenizer is not None:
        # What DatasetManager._load_custom_dataset does in a profile run.
        from aiperf.common.tokenizer import Tokenizer

        composer = CustomDatasetComposer(run=run, tokenizer=Tokenizer.from_pretrained(tokenizer))
        conversations = composer.create_dataset()
        return conversations, composer.loader._block_size  # type: ignore[union-attr]

    # The composer's loader construction (_create_loader_instance) with a stand-in for the prompt
    # generator: load_dataset only resets its hash-id cache, and the prompts are not synthesized.
    composer = CustomDatasetComposer(run=run, tokenizer=None)
    composer.prompt_generator = SimpleNamespace(  # type: ignore[assignment]
        tokenizer=None, _cache={}, _hash_id_corpus_rng=SimpleNamespace(set_trace_id=lambda _: None)
    )
    composer._select_trace_prompt_generator = lambda _meta: composer.prompt_generator  # type: ignore[method-assign]
    fmt = composer._explicit_format() or composer._infer_dataset_type(composer._file_path)
    composer._create_loader_instance(fmt)
    loader = composer.loader
    loader.synthesize_prompts_from_hash_ids = lambda reqs: {r.key: "" for r in reqs}  # type: ignore[union-attr]
    conversations = loader.convert_to_conversations(loader.load_dataset())  # type: ignore[union-attr]
    return conversations, loader._block_size  # type: ignore[union-attr]


def as_hub_repo(tokenizer_dir: Path, hub: Path) -> str:
    """Make ``tokenizer_dir`` the snapshot of a repo ``local/tokenizer`` in a Hub cache at ``hub``.

    Offline, AIPerf's Tokenizer looks names up in the Hub cache only (common/tokenizer.py,
    _from_pretrained_local) and refuses a path; its prompt-decoding workers always run offline
    (dataset/generator/parallel_decode.py, _init_worker), so a bare directory cannot serve."""
    repo = hub / "models--local--tokenizer"
    commit = "0" * 40
    (repo / "snapshots").mkdir(parents=True)
    (repo / "snapshots" / commit).symlink_to(tokenizer_dir.resolve(), target_is_directory=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    os.environ["HF_HUB_CACHE"] = str(hub)  # before huggingface_hub is imported; workers inherit it
    return "local/tokenizer"


def probe(args: argparse.Namespace) -> int:
    try:
        run = build_run(args.trace, args.tokenizer, args.block_size)
        conversations, block_size = load(run, args.tokenizer)
    except Exception as e:  # AIPerf's verdict on the file (ValidationError, ValueError...)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    profiling = run.cfg.phases[-1]
    out: dict[str, Any] = {
        "requests": sum(len(c.turns) for c in conversations),
        "sessions": len(conversations),
        "sessions_turns": {c.session_id: len(c.turns) for c in conversations},
        "phase": str(profiling.type),
        "phase_requests": profiling.requests,
        "block_size": block_size,
        "prompts": "synthesized" if args.tokenizer else "skipped",
    }
    if args.turns:
        out["turns"] = {
            c.session_id: [[t.timestamp, t.delay, t.max_tokens] for t in c.turns]
            for c in conversations
        }
    print(json.dumps(out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--tokenizer", help="local tokenizer directory: synthesize the prompts too")
    ap.add_argument("--block-size", type=int, help="AIPerf's --isl-block-size (default 512)")
    ap.add_argument("--turns", action="store_true", help="list each session's turns")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiperf-probe-") as hub:
        if args.tokenizer is not None:
            if not os.path.isdir(args.tokenizer):
                ap.error(f"--tokenizer {args.tokenizer}: not a directory")
            args.tokenizer = as_hub_repo(Path(args.tokenizer), Path(hub))
        return probe(args)


if __name__ == "__main__":  # AIPerf's prompt decoding forks workers from a forkserver
    sys.exit(main())
