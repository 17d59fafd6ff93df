"""mini-swe-agent as an env agent: the real third-party harness, scored by the env's hidden tests.

``kvharness env run --agent mini-swe-agent`` runs, for each episode, mini-swe-agent's own ``mini``
command (PyPI ``mini-swe-agent`` 2.4.6, ``python -m minisweagent.run.mini``) as a subprocess of
its own virtual environment, ``.venv-mini-swe-agent`` (``make mini-swe-agent``; its dependencies,
litellm among them, never enter kvharness's). Nothing of its package is changed; kvharness only
configures it:

* **Configuration.** mini-swe-agent's own ``mini.yaml`` (its prompts and observation templates),
  then a file kvharness writes over it (:func:`mini_config`): the ``default`` (non-interactive)
  agent with ``step_limit`` = the run's ``--max-steps`` and no cost limit; litellm's
  ``openai/<model>`` provider with ``api_base`` = the endpoint's ``/v1``, the run's
  ``max_tokens`` and ``temperature``, and ``cost_tracking: ignore_errors`` (an unknown model has
  no price; litellm's cost map is read locally, ``LITELLM_LOCAL_MODEL_COST_MAP=True``, so nothing
  is fetched); the key (``--api-key``, or a dummy one) in ``OPENAI_API_KEY``, never in a file.
* **Commands in the sandbox.** Its *environment* is ``kvharness_mswea.KvharnessEnvironment``, a
  small module kvharness ships for mini's side (``_mswea_path/kvharness_mswea.py``, on the
  subprocess's ``PYTHONPATH``). Its ``execute()`` sends each command over a socket pair to this
  process, which runs it as a ``bash`` action of the episode's :class:`AsyncCodingEnv`: in the
  episode's bubblewrap sandbox, on its copy of the repository, within the env's limits and step
  budget. mini never runs a command on the host.
* **Submission and grading.** mini-swe-agent submits by printing
  ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` as the first line of a command's output; the
  environment then asks for a ``submit`` action (the env's grading: hidden tests on a clean copy,
  partial credit, the reward rule) and ends the run as mini's own environments do. That one
  final submission ends the episode: mini-swe-agent has no intermediate submissions, so this
  harness uses none (the run's ``--max-submissions`` is not reached). A run that stops otherwise
  (step limit, repeated format errors) is not graded and scores 0, as an agent that never
  submits.
* **Recording.** mini-swe-agent writes its own trajectory (``.traj.json``, format
  ``mini-swe-agent-1.1``) to ``OUT/trajectories/<task>/<k>.traj.json`` beside the rollouts, and
  its console output to ``<k>.log`` there. The episode's model calls are read from that file
  (:func:`trajectory_calls`): one per assistant message, and one per reply that did not parse
  (mini keeps such a reply only inside the format-error message it answers with), with litellm's
  ``usage`` (prompt, cached and completion tokens) and the send and answer times its model
  wrapper (``kvharness_mswea.TimedLitellmModel``) noted. The rollout's messages are the
  conversation as mini sent it (its messages without their ``extra``).

Budgets: ``--max-steps`` bounds mini's model calls (its ``step_limit``); the env allows one
action more (the graded submit after the last command). Several commands in one reply each take an
action; a spent budget ends the run as mini's step limit does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kvharness.env.actions import Bash, Submit
from kvharness.env.api import AsyncCodingEnv, EnvConfig
from kvharness.env.harness.client import ChatClient, ModelCall
from kvharness.env.harness.episode import MINI_SWE_AGENT, CallRecord, EpisodeResult, ToolRun
from kvharness.env.sandbox import REPO_MOUNT
from kvharness.env.task import AnyTask
from kvharness.errors import UserError

__all__ = [
    "AGENT",
    "MINI_TOOLS",
    "TrajectoryCall",
    "mini_config",
    "mini_python",
    "read_trajectory",
    "run_mini_episode",
    "task_prompt",
    "trajectory_calls",
    "trajectory_path",
]

AGENT = MINI_SWE_AGENT
"""The name of this harness in ``kvharness env run --agent``."""

_REPO = Path(__file__).resolve().parents[4]
_SIDE = Path(__file__).resolve().parent / "_mswea_path"
PYTHON_VAR = "KVHARNESS_MINI_SWE_AGENT_PYTHON"

MINI_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Execute a bash command",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to execute"}
                },
                "required": ["command"],
            },
        },
    },
)
"""The ``tools`` mini-swe-agent 2.4.6 sends with every call (its ``BASH_TOOL``; a test checks it
against the installed package), for tokenising its prompts as the server did."""

_UNGRADED_ENDS = frozenset({"LimitsExceeded", "TimeExceeded", "RepeatedFormatError"})
"""Exit statuses of a run that ended by mini's own rules without submitting (not an error)."""


def mini_python() -> Path:
    """The interpreter of mini-swe-agent's environment; :class:`UserError` saying how to build it."""
    env = os.environ.get(PYTHON_VAR)
    path = Path(env) if env else _REPO / ".venv-mini-swe-agent" / "bin" / "python"
    if not path.exists():
        raise UserError(
            f"--agent {AGENT} needs mini-swe-agent's own environment, and there is none at "
            f"{path}: `make mini-swe-agent` builds it (or set {PYTHON_VAR} to its python)"
        )
    return path


def task_prompt(task: AnyTask) -> str:
    """What mini-swe-agent is asked to do (its ``{{task}}``): the issue, and where the repository
    is."""
    return (
        f"{task.issue.strip()}\n\n"
        f"The repository is at {REPO_MOUNT}, the working directory of every command (there is "
        "no network). Hidden tests judge your fix when you submit."
    )


def mini_config(
    *,
    model: str,
    base_url: str,
    step_limit: int,
    max_tokens: int,
    temperature: float,
    output: Path,
) -> dict[str, Any]:
    """The configuration kvharness lays over mini-swe-agent's ``mini.yaml`` (module docstring)."""
    return {
        "agent": {
            "agent_class": "default",
            "step_limit": step_limit,
            "cost_limit": 0,
            "output_path": str(output),
        },
        "model": {
            "model_class": "kvharness_mswea.TimedLitellmModel",
            "model_name": f"openai/{model}",
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": base_url,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "drop_params": True,
            },
        },
        "environment": {
            "environment_class": "kvharness_mswea.KvharnessEnvironment",
            "cwd": REPO_MOUNT,
        },
    }


def trajectory_path(root: Path, episode: str) -> Path:
    """Where an episode's trajectory goes under ``root``: ``<task>/<k>.traj.json``."""
    task_id, _, k = episode.rpartition("/")
    return root / (task_id or "episode") / f"{k}.traj.json"


class TrajectoryCall(NamedTuple):
    """One model call in a trajectory: ``position`` is the index of the message that holds its
    reply (the conversation it was sent is every message before); times are wall-clock seconds
    (``time.time()``), None where the trajectory does not say."""

    position: int
    sent: float | None
    done: float | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    finish_reason: str | None


def read_trajectory(path: Path) -> dict[str, Any]:
    """A ``.traj.json`` file as its JSON object; ValueError when it is not one."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise ValueError(f"{path}: not a mini-swe-agent trajectory (no messages)")
    return doc


def trajectory_calls(doc: Mapping[str, Any]) -> list[TrajectoryCall]:
    """The model calls of a mini-swe-agent trajectory, in order: each assistant message, and
    each format-error message (a reply that did not parse, kept in that message's ``extra``)."""
    out = []
    for i, msg in enumerate(doc["messages"]):
        extra = msg.get("extra") or {}
        if msg.get("role") != "assistant" and extra.get("interrupt_type") != "FormatError":
            continue
        raw = extra.get("response")
        response: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        usage = response.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        choices = response.get("choices") or [{}]
        timing = extra.get("kvharness_call") or {}
        out.append(
            TrajectoryCall(
                position=i,
                sent=timing.get("sent"),
                done=timing.get("done", extra.get("timestamp")),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                cached_tokens=details.get("cached_tokens"),
                finish_reason=choices[0].get("finish_reason"),
            )
        )
    return out


def _sent_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as mini sends them: without their ``extra`` and its ``exit`` message."""
    return [
        {k: v for k, v in m.items() if k != "extra"} for m in messages if m.get("role") != "exit"
    ]


def _records(doc: Mapping[str, Any], runs: Sequence[ToolRun], clock: float) -> list[CallRecord]:
    """The trajectory's calls as call records on the run's clock (wall time minus ``clock``).
    ``runs``: every action of the episode, in order; the gap before a call is the time of the
    previous reply's commands (and of a submit right after them)."""
    messages = doc["messages"]
    out: list[CallRecord] = []
    prev_pos, prev_done, prev_actions, k = 0, 0.0, 0, 0
    for c in trajectory_calls(doc):
        done = (c.done - clock) if c.done is not None else prev_done
        sent = (c.sent - clock) if c.sent is not None else prev_done
        gap, tools, left = 0.0, [], prev_actions
        while k < len(runs) and (left > 0 or runs[k].tool == "submit"):
            left -= runs[k].tool != "submit"
            gap += runs[k].duration_s
            tools.append(runs[k].tool or "invalid")
            k += 1
        call = ModelCall(
            sent, None, done, c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.finish_reason
        )
        appended = _sent_messages(messages[prev_pos : c.position])
        out.append(CallRecord(call, tuple(appended), gap, tuple(tools)))
        extra = messages[c.position].get("extra") or {}
        prev_pos, prev_done, prev_actions = c.position, done, len(extra.get("actions") or ())
    return out


class _Serve:
    """This process's end of the link: runs mini's commands and its submission in ``env``."""

    def __init__(self, env: AsyncCodingEnv, result: EpisodeResult) -> None:
        self.env = env
        self.result = result
        self.runs: list[ToolRun] = []
        self.over = False

    async def answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if self.over:
            return {"output": "", "returncode": -1, "over": True,
                    "exception_info": "the episode's action budget is spent"}  # fmt: skip
        op = request.get("op")
        step = await self.env.step(Submit() if op == "submit" else Bash(str(request["command"])))
        info = step.info
        run = ToolRun(info["tool"], info["duration_s"], info["error"], info.get("score"))
        self.runs.append(run)
        self.result.tool_runs.append(run)
        self.result.steps += 1
        self.over = step.terminated or step.truncated
        self.result.truncated = step.truncated
        if op == "submit":
            graded = info["error"] is None
            self.result.terminated = self.result.terminated or graded
            return {"output": step.observation, "over": not graded}
        error = info["error"] or ("the command timed out" if info.get("timed_out") else "")
        output = (info.get("stdout") or "") + (info.get("stderr") or "")
        return {
            "output": output if "stdout" in info else step.observation,
            "returncode": info.get("returncode", -1),
            "exception_info": error,
            "over": self.over,
        }

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            reply = await self.answer(json.loads(line))
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()


async def run_mini_episode(
    task: AnyTask,
    client: ChatClient,
    config: EnvConfig,
    *,
    episode: str,
    t0: float,
    trajectories: Path | None = None,
    extra_config: Mapping[str, Any] | None = None,
) -> EpisodeResult:
    """One mini-swe-agent episode of ``task`` against ``client``'s endpoint and model (module
    docstring). The trajectory and log go under ``trajectories`` (default: the episode's scratch
    folder, deleted after). ``extra_config`` is laid over kvharness's configuration (e.g. another
    model class). A :class:`UserError` (no mini-swe-agent environment, no sandbox) propagates;
    other faults end the episode with ``error`` set."""
    python = mini_python()
    model = await client.resolve_model()
    result = EpisodeResult(episode, task.id, AGENT)
    env = AsyncCodingEnv(task, dataclasses.replace(config, max_steps=config.max_steps + 1))
    scratch = Path(tempfile.mkdtemp(prefix="kvh-mswea-", dir=config.workdir))
    root = trajectories if trajectories is not None else scratch / "trajectories"
    traj = trajectory_path(root.resolve(), episode)  # mini runs in a folder of its own
    served: _Serve | None = None
    try:
        traj.parent.mkdir(parents=True, exist_ok=True)
        traj.unlink(missing_ok=True)
        await env.reset()
        cfg = mini_config(
            model=model,
            base_url=client.base_url,
            step_limit=config.max_steps,
            max_tokens=client.max_tokens,
            temperature=client.temperature,
            output=traj,
        )
        cfg_path = scratch / "kvharness.yaml"  # JSON is YAML: mini reads it with yaml.safe_load
        cfg_path.write_text(json.dumps(_merged(cfg, extra_config or {}), indent=2))
        served = _Serve(env, result)
        clock = time.time() - (time.perf_counter() - t0)  # wall time at the run's origin
        rc = await _run_mini(python, cfg_path, task_prompt(task), traj, scratch, client, served)
        if not traj.exists():
            raise RuntimeError(f"mini exited with status {rc} and no trajectory (see {_log(traj)})")
        doc = read_trajectory(traj)
        result.calls = _records(doc, served.runs, clock)
        result.messages = _sent_messages(doc["messages"])
        status = str((doc.get("info") or {}).get("exit_status", ""))
        if status in _UNGRADED_ENDS:
            result.truncated = result.truncated or status != "RepeatedFormatError"
        elif status != "Submitted" or rc != 0:
            last = doc["messages"][-1].get("content") if doc["messages"] else ""
            result.error = f"{AGENT}: {status or f'exit status {rc}'}: {str(last)[:300]}"
    except UserError:
        raise
    except Exception as err:  # one broken task must not take a long run down with it
        result.error = f"{AGENT}: {type(err).__name__}: {err}"
    finally:
        result.submissions = list(env.submissions)
        result.reward = env.episode_reward()
        env.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def _merged(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _log(traj: Path) -> Path:
    return traj.with_name(traj.name.removesuffix(".traj.json") + ".log")


async def _run_mini(
    python: Path,
    cfg_path: Path,
    prompt: str,
    traj: Path,
    scratch: Path,
    client: ChatClient,
    served: _Serve,
) -> int:
    """Run ``mini`` with its built-in ``mini.yaml`` and ``cfg_path`` over it, serving its
    commands until it exits; its exit status."""
    ours, theirs = socket.socketpair()
    home = scratch / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": str(_SIDE),
        "KVHARNESS_MSWEA_FD": str(theirs.fileno()),
        "OPENAI_API_KEY": client.api_key or "kvharness-no-key",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_CONFIGURED": "true",  # no first-run questions
        "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mini-swe-agent"),
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
        "COLUMNS": "120",
    }
    argv = [
        str(python), "-m", "minisweagent.run.mini", "-c", "mini.yaml", "-c", str(cfg_path),
        "-t", prompt, "-o", str(traj),
    ]  # fmt: skip
    with _log(traj).open("wb") as log:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd=scratch,
            )  # fmt: skip
        finally:
            theirs.close()
        try:
            reader, writer = await asyncio.open_connection(sock=ours)
            try:
                await served.serve(reader, writer)
            finally:
                writer.close()
            return await proc.wait()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                await proc.wait()
