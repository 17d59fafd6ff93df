"""SWE-agent ``.traj`` trajectories: real agent conversations as sessions.

A trajectory holds ``history`` (the chat messages) and ``trajectory`` (one step per action, with
``execution_time`` in newer files). Every assistant message in ``history`` is one model call: its
prompt is every message before it, its output the assistant message itself. Each call becomes a
turn whose chain is the tokenised prompt and whose ``messages`` are those appended since the
previous call; the gap before it is the previous action's ``execution_time`` where recorded
(0 otherwise) and ``tool`` is that action's command name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvharness.errors import FormatError
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.tokenize import Tokenizer, load_tokenizer, message_tokens

__all__ = ["load_swe_agent", "trajectory_session"]

_KEEP_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _line_of(text: str, needle: str) -> int:
    """1-based line of the first occurrence of ``needle`` (1 when absent)."""
    pos = text.find(needle)
    return text.count("\n", 0, pos) + 1 if pos >= 0 else 1


def _normalise(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: message[k] for k in _KEEP_KEYS if k in message and message[k] is not None}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return out


def trajectory_session(path: Path, tokenizer: Tokenizer, block_size: int = 128) -> Session:
    """One ``.traj`` file as a session. Raises :class:`FormatError` naming file and line."""
    where = str(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise FormatError(where, 0, f"cannot read: {err}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise FormatError(where, err.lineno, f"bad JSON: {err.msg}") from None
    if not isinstance(doc, dict):
        raise FormatError(where, 1, "expected a JSON object with 'history' and 'trajectory'")
    history = doc.get("history")
    if not isinstance(history, list):
        raise FormatError(where, _line_of(text, '"history"'), "missing or non-list 'history'")
    steps = doc.get("trajectory", [])
    if not isinstance(steps, list):
        raise FormatError(where, _line_of(text, '"trajectory"'), "'trajectory' must be a list")
    for i, m in enumerate(history):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise FormatError(
                where, _line_of(text, '"history"'), f"history[{i}] has no string 'role'"
            )
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise FormatError(
                where, _line_of(text, '"history"'), f"history[{i}].content must be text"
            )
    for i, step in enumerate(steps):
        et = step.get("execution_time") if isinstance(step, dict) else None
        if et is not None and (not isinstance(et, int | float) or et < 0):
            raise FormatError(
                where,
                _line_of(text, '"execution_time"'),
                f"trajectory[{i}].execution_time must be a number >= 0, got {et!r}",
            )

    builder = ChainBuilder(block_size)
    turns: list[Turn] = []
    start = 0
    for i, raw in enumerate(history):
        if raw["role"] != "assistant":
            continue
        new = [_normalise(m) for m in history[start:i]]
        for m in new:
            builder.extend_tokens(message_tokens(tokenizer, m))
        reply = _normalise(raw)
        output = len(tokenizer.encode(str(reply.get("content", "")))) or 1
        k = len(turns)
        gap, tool = 0.0, None
        if k > 0 and k - 1 < len(steps) and isinstance(steps[k - 1], dict):
            step = steps[k - 1]
            gap = float(step.get("execution_time") or 0.0)
            action = str(step.get("action") or "").strip()
            tool = action.split(maxsplit=1)[0] if action else None
        turns.append(Turn(builder.chain(), output, gap, tool, tuple(new)))
        start = i
    if not turns:
        raise FormatError(where, _line_of(text, '"history"'), "no assistant message in history")
    return Session(path.stem, tuple(turns))


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(sorted(p.glob("*.traj")) if p.is_dir() else [p])
    return out


def load_swe_agent(
    path: str | Path, tokenizer: str | Path | Tokenizer | None = None, block_size: int = 128
) -> Workload:
    """Load one ``.traj`` file or a folder of them (each a session, starting together)."""
    tok = (
        load_tokenizer(tokenizer)
        if tokenizer is None or isinstance(tokenizer, str | Path)
        else tokenizer
    )
    files = _files([Path(path)])
    if not files:
        raise FormatError(str(path), 0, "no .traj files found")
    sessions = tuple(trajectory_session(f, tok, block_size) for f in files)
    meta = {"source": "swe-agent", "path": str(path), "tokenizer": tok.name}
    return Workload(sessions, block_size, Path(path).stem, Arrival("trace"), meta)
