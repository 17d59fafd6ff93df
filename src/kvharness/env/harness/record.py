"""Rollouts as data: a kvharness workload for bench and sim, and a rollouts JSONL for training.

:func:`to_workload`: each episode is a :class:`Session` (id ``<task>/<k>``, ``group`` = the task,
whose repository all its episodes share; ``start`` = when its first model call was sent), each
model call a :class:`Turn` whose chain is the tokenised conversation up to that call: either the
server's own token ids of the prompt (vLLM's ``/tokenize``: exactly what the engine cached), or
the messages rendered and tokenised one by one, as :mod:`kvharness.workload.tokenize` does for
SWE-agent trajectories (so a turn's chain extends the previous turn's; a chat template that drops
tool calls makes the server's prompt shorter than this rendering), ``output_tokens`` the completion
tokens the server reported, ``gap`` the tool time before the call, ``tool`` the tools that ran in
it (comma-joined) and ``messages`` the messages appended since the previous call.

:func:`rollout_line`: one JSON object per episode with the full trajectory (messages), rewards and
submissions, and every model call and tool run with its measurements; :func:`read_rollouts` reads
such a file back into episodes (``kvharness env run --resume`` rebuilds its workload from them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec

from kvharness.env.harness.client import ModelCall
from kvharness.env.harness.episode import CallRecord, Compaction, EpisodeResult, Resume, ToolRun
from kvharness.env.reward import Submission
from kvharness.errors import FormatError
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.tokenize import Tokenizer, message_tokens

__all__ = [
    "call_prompts",
    "episode_from_line",
    "episode_session",
    "read_rollouts",
    "rollout_doc",
    "rollout_line",
    "to_workload",
    "write_rollouts",
]


def call_prompts(ep: EpisodeResult) -> list[list[dict[str, Any]]]:
    """The whole conversation sent at each of the episode's model calls (a call's ``keep``
    cuts the previous prompt before its messages are appended)."""
    out: list[list[dict[str, Any]]] = []
    sofar: list[dict[str, Any]] = []
    for rec in ep.calls:
        kept = sofar if rec.keep is None else sofar[: rec.keep]
        sofar = kept + list(rec.appended)
        out.append(sofar)
    return out


def _append_only(ep: EpisodeResult) -> bool:
    """True when every call's prompt extends the previous one (no compaction cut it)."""
    return all(rec.keep is None for rec in ep.calls[1:])


def episode_session(
    ep: EpisodeResult,
    tokenizer: Tokenizer | None,
    block_size: int,
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> Session | None:
    """The episode as a session (None when it made no model call). With ``prompt_ids`` (the
    server's own token ids of each call's prompt, see :meth:`ChatClient.tokenize`) the chains are
    exactly what the engine saw; otherwise ``tokenizer`` tokenises the messages one by one. An
    episode whose context was compacted has prompts that do not extend each other: its turns
    carry their chains only, no messages (a replay sends the chains' tokens), and a compaction's
    summary call is a turn whose ``tool`` is ``summarize``."""
    if not ep.calls:
        return None
    if prompt_ids is not None and len(prompt_ids) != len(ep.calls):
        raise ValueError(f"{ep.episode}: {len(prompt_ids)} prompts for {len(ep.calls)} calls")
    if prompt_ids is None and tokenizer is None:
        raise ValueError("give a tokenizer or the prompts' token ids")
    append_only = _append_only(ep)
    builder = ChainBuilder(block_size)
    turns = []
    tokens: list[list[int]] = []  # of each message of the previous prompt
    for i, rec in enumerate(ep.calls):
        if prompt_ids is not None:
            builder = ChainBuilder(block_size)
            builder.extend_tokens(prompt_ids[i])
        else:
            assert tokenizer is not None
            if rec.keep is not None and i:
                tokens = tokens[: rec.keep]
                builder = ChainBuilder(block_size)
                for kept in tokens:
                    builder.extend_tokens(kept)
            for message in rec.appended:
                tokens.append(message_tokens(tokenizer, message))
                builder.extend_tokens(tokens[-1])
        turns.append(
            Turn(
                input=builder.chain(),
                output_tokens=rec.call.completion_tokens,
                gap=rec.gap if i else 0.0,
                tool=rec.purpose or ",".join(dict.fromkeys(rec.tools)) or None,
                messages=rec.appended if append_only else None,
            )
        )
    return Session(
        ep.episode, tuple(turns), start=max(0.0, ep.calls[0].call.sent), group=ep.task_id
    )


def to_workload(
    episodes: Sequence[EpisodeResult],
    tokenizer: Tokenizer | None,
    *,
    block_size: int = 128,
    name: str = "env-rollouts",
    meta: Mapping[str, Any] | None = None,
    prompt_ids: Sequence[Sequence[Sequence[int]]] | None = None,
) -> Workload:
    """The episodes' model calls as a workload (sessions in the given order; start times as
    recorded, so ``Arrival("trace")`` replays the run's own arrival pattern). ``prompt_ids``:
    per episode, per call, the server's token ids (then ``tokenizer`` may be None)."""
    sessions = []
    for k, ep in enumerate(episodes):
        ids = prompt_ids[k] if prompt_ids is not None else None
        session = episode_session(ep, tokenizer, block_size, ids)
        if session is not None:
            sessions.append(session)
    tok_name = "server" if prompt_ids is not None or tokenizer is None else tokenizer.name
    full_meta = {"source": "kvharness env run", "tokenizer": tok_name, **(meta or {})}
    return Workload(tuple(sessions), block_size, name, Arrival("trace"), full_meta)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def rollout_line(ep: EpisodeResult) -> str:
    """One episode as a JSON line (no trailing newline)."""
    return json.dumps(rollout_doc(ep), sort_keys=False)


def rollout_doc(ep: EpisodeResult) -> dict[str, Any]:
    """One episode as the JSON object of its rollout line (:func:`episode_from_line` reads it)."""
    doc = {
        "episode": ep.episode,
        "task": ep.task_id,
        "agent": ep.agent,
        "reward": ep.reward,
        "submissions": [asdict(s) for s in ep.submissions],
        "terminated": ep.terminated,
        "truncated": ep.truncated,
        "steps": ep.steps,
        "error": ep.error,
        "calls": [_call_doc(c) for c in ep.calls],
        "tool_runs": [asdict(t) for t in ep.tool_runs],
        "messages": _jsonable(ep.messages),
    }
    if ep.compactions:
        doc["compactions"] = [asdict(c) for c in ep.compactions]
    if ep.resumes:
        doc["resumes"] = [asdict(r) for r in ep.resumes]
    return doc


def _call_doc(c: CallRecord) -> dict[str, Any]:
    doc = {**asdict(c.call), "gap": c.gap, "tools": list(c.tools), "appended": len(c.appended)}
    for key in ("keep", "policy_version", "purpose"):
        value = getattr(c, key)
        if value is not None:
            doc[key] = value
    return doc


def write_rollouts(episodes: Iterable[EpisodeResult], path: Path) -> None:
    """Write every episode to ``path`` as JSON Lines (replacing it)."""
    with path.open("w") as f:
        for ep in episodes:
            f.write(rollout_line(ep) + "\n")


def episode_from_line(doc: Mapping[str, Any]) -> EpisodeResult:
    """The episode a :func:`rollout_line` object describes (each call's appended messages are the
    next ``appended`` messages of the trajectory). Raises ``KeyError``, ``TypeError`` or
    ``ValueError`` when ``doc`` is not such an object."""
    messages = list(doc["messages"])
    calls, pos = [], 0
    for c in doc["calls"]:
        fields = dict(c)
        n, gap, tools = fields.pop("appended"), fields.pop("gap"), fields.pop("tools")
        extra = {k: fields.pop(k) for k in ("keep", "policy_version", "purpose") if k in fields}
        calls.append(
            CallRecord(
                ModelCall(**fields), tuple(messages[pos : pos + n]), gap, tuple(tools), **extra
            )
        )
        pos += n
    if pos > len(messages):
        raise ValueError(f"calls append {pos} messages, the trajectory has {len(messages)}")
    return EpisodeResult(
        episode=str(doc["episode"]), task_id=str(doc["task"]), agent=str(doc["agent"]),
        reward=float(doc["reward"]), submissions=[Submission(**s) for s in doc["submissions"]],
        terminated=bool(doc["terminated"]), truncated=bool(doc["truncated"]),
        steps=int(doc["steps"]), messages=messages, calls=calls,
        tool_runs=[ToolRun(**t) for t in doc["tool_runs"]], error=doc["error"],
        compactions=[Compaction(**c) for c in doc.get("compactions", ())],
        resumes=[Resume(**r) for r in doc.get("resumes", ())],
    )  # fmt: skip


def read_rollouts(path: Path) -> list[EpisodeResult]:
    """The episodes of a rollouts file, each once: a later line of an episode replaces the
    earlier one in its place (``env run --resume`` appends the retry of an episode a model
    failure ended). A torn final line (no newline: an interrupted write) is ignored, any other
    bad line raises :class:`FormatError` with its line number."""
    out: list[EpisodeResult] = []
    where: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                ep = episode_from_line(msgspec.json.decode(line))
                if ep.episode in where:
                    out[where[ep.episode]] = ep
                else:
                    where[ep.episode] = len(out)
                    out.append(ep)
            except msgspec.DecodeError as err:
                if not line.endswith(b"\n"):
                    break
                raise FormatError(str(path), lineno, f"bad JSON: {err}") from None
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise FormatError(str(path), lineno, f"not a rollout: {err!r}") from None
    return out
