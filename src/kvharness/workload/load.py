"""One entry point for every workload source, by a spec string.

- ``synthetic`` or ``synthetic:sessions=64,seed=3`` — the coding-agent generator with options;
- ``fixed:requests=40,input=1000,output=32`` — independent requests of one shape
  (:mod:`kvharness.workload.fixed`), the isolated benchmark;
- ``computer-use`` or ``computer-use:sessions=16,keep_last=3`` — computer-use sessions, a
  screenshot after every action (:mod:`kvharness.workload.computer_use`);
- ``long-horizon`` or ``long-horizon:sessions=8,compaction=drop-outputs`` — sessions of hundreds
  to thousands of turns, compacted at the window (:mod:`kvharness.workload.long_horizon`);
- a file or folder in any format of :mod:`kvharness.workload.formats` (kvharness's own workload
  files and recordings, Mooncake / AIPerf / Dynamo ``hash_ids`` traces, Azure CSV traces, OTel
  GenAI spans, agent trajectories, OpenAI request logs), told by what it starts with or named.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypeVar

from kvharness.errors import FormatError, UserError
from kvharness.workload import formats
from kvharness.workload.computer_use import ComputerUseConfig, generate_computer_use
from kvharness.workload.fixed import FixedConfig, generate_fixed
from kvharness.workload.long_horizon import LongHorizonConfig, generate_long_horizon
from kvharness.workload.model import Workload
from kvharness.workload.synthetic import SyntheticConfig, generate

__all__ = [
    "load_workload",
    "parse_computer_use",
    "parse_fixed",
    "parse_long_horizon",
    "parse_synthetic",
]

C = TypeVar("C")


def _parse_options(spec: str, cls: type[C]) -> C:
    """``name[:k=v,...]`` -> ``cls(k=v, ...)``; unknown keys and bad values are user errors."""
    name, _, opts = spec.partition(":")
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, int | float | str] = {}
    for item in filter(None, (s.strip() for s in opts.split(","))):
        key, eq, raw = item.partition("=")
        if not eq or key not in known:
            raise UserError(f"bad {name} option {item!r}; options are: {', '.join(sorted(known))}")
        if known[key].type in (str, "str"):
            values[key] = raw
            continue
        kind = int if known[key].type in (int, "int") else float
        try:
            values[key] = kind(raw)
        except ValueError:
            raise UserError(f"{name} option {key} needs a number, got {raw!r}") from None
    try:
        return cls(**values)
    except ValueError as err:
        raise UserError(str(err)) from None


def parse_synthetic(spec: str) -> SyntheticConfig:
    """``synthetic[:k=v,...]`` -> config; unknown keys and bad values are user errors."""
    return _parse_options(spec, SyntheticConfig)


def parse_computer_use(spec: str) -> ComputerUseConfig:
    """``computer-use[:k=v,...]`` -> config; unknown keys and bad values are user errors."""
    return _parse_options(spec, ComputerUseConfig)


def parse_long_horizon(spec: str) -> LongHorizonConfig:
    """``long-horizon[:k=v,...]`` -> config; unknown keys and bad values are user errors."""
    return _parse_options(spec, LongHorizonConfig)


def parse_fixed(spec: str) -> FixedConfig:
    """``fixed[:k=v,...]`` -> config; unknown keys and bad values are user errors."""
    return _parse_options(spec, FixedConfig)


def load_workload(
    spec: str,
    *,
    block_size: int | None = None,
    tokenizer: str | None = None,
    fmt: str | None = None,
) -> Workload:
    """Load a workload from ``spec`` (see module docstring), in format ``fmt`` (None: detected,
    see :mod:`kvharness.workload.formats`).

    ``block_size`` applies to ``hash_ids`` traces (None: 512, Mooncake's); ``tokenizer`` (a path)
    to formats that carry text.
    """
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return generate(parse_synthetic(spec))
    if spec == "fixed" or spec.startswith("fixed:"):
        return generate_fixed(parse_fixed(spec))
    if spec == "computer-use" or spec.startswith("computer-use:"):
        return generate_computer_use(parse_computer_use(spec))
    if spec == "long-horizon" or spec.startswith("long-horizon:"):
        return generate_long_horizon(parse_long_horizon(spec))
    path = Path(spec)
    try:
        exists = path.is_dir() or path.exists()
    except OSError as err:
        raise FormatError(spec, None, f"cannot read: {err.strerror or err}") from None
    if not exists:
        raise UserError(
            f"no such workload {spec!r}: give a trace file or folder (`kvharness workload "
            "formats` lists what kvharness reads), a recording's folder, synthetic[:k=v,...], fixed[:k=v,...], "
            "computer-use[:k=v,...] or long-horizon[:k=v,...]"
        )
    return formats.load_path(path, fmt, formats.LoadOptions(block_size, tokenizer))
