"""One entry point for every workload source, by a spec string.

- ``synthetic`` or ``synthetic:sessions=64,seed=3`` — the coding-agent generator with options;
- a kvharness workload file (its first line is the format header);
- a recording (``kvharness gateway --record DIR``): its folder or one of its parts;
- a SWE-agent ``.traj`` file or a folder of them;
- a Mooncake / AIPerf ``hash_ids`` JSONL trace (any other file).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvharness.errors import FormatError, UserError
from kvharness.workload import format as wformat
from kvharness.workload.model import Workload
from kvharness.workload.mooncake import load_mooncake
from kvharness.workload.recording import is_recording, load_recording
from kvharness.workload.swe_agent import load_swe_agent
from kvharness.workload.synthetic import SyntheticConfig, generate

__all__ = ["load_workload", "parse_synthetic"]


def parse_synthetic(spec: str) -> SyntheticConfig:
    """``synthetic[:k=v,...]`` -> config; unknown keys and bad values are user errors."""
    _, _, opts = spec.partition(":")
    known = {f.name: f for f in dataclasses.fields(SyntheticConfig)}
    values: dict[str, int | float] = {}
    for item in filter(None, (s.strip() for s in opts.split(","))):
        key, eq, raw = item.partition("=")
        if not eq or key not in known:
            raise UserError(
                f"bad synthetic option {item!r}; options are: {', '.join(sorted(known))}"
            )
        kind = int if known[key].type in (int, "int") else float
        try:
            values[key] = kind(raw)
        except ValueError:
            raise UserError(f"synthetic option {key} needs a number, got {raw!r}") from None
    try:
        return SyntheticConfig(**values)  # type: ignore[arg-type]
    except ValueError as err:
        raise UserError(str(err)) from None


def load_workload(spec: str, *, block_size: int = 512, tokenizer: str | None = None) -> Workload:
    """Load a workload from ``spec`` (see module docstring).

    ``block_size`` applies to ``hash_ids`` traces (512 for Mooncake); ``tokenizer`` (a path) to
    SWE-agent trajectories.
    """
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return generate(parse_synthetic(spec))
    path = Path(spec)
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists()
    except OSError as err:
        raise FormatError(spec, None, f"cannot read: {err.strerror or err}") from None
    if not exists:
        raise UserError(
            f"no such workload {spec!r}: give a file, a recording's folder, a folder of .traj files, or synthetic[:k=v,...]"
        )
    if is_recording(path):
        return load_recording(path)
    if is_dir or path.suffix == ".traj":
        return load_swe_agent(path, tokenizer, block_size=128)
    if wformat.is_workload_file(path):
        return wformat.load(path)
    return load_mooncake(path, block_size=block_size)
