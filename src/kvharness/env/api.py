"""The coding environment: ``reset()`` / ``step(action)`` in Gymnasium's shape, sync and async.

An episode works on a private copy of a task's repository (:meth:`Task.checkout`); every shell
command (``bash``, ``search``) runs in a fresh bubblewrap sandbox over that copy, ``read_file`` and
``edit_file`` run on the host with their paths confined to it. A command's writes are bounded by
``limits.workspace_bytes`` (see ``sandbox.py``). ``submit`` grades the agent's change to the
package's source files against the hidden tests (on the pristine repository, in a fresh sandbox;
see ``grading.py``) and scores it in [0, 1]; the episode's reward over its submissions follows a
:class:`RewardRule`. A performance task (``perf/``) goes through the same episode: only its
grader differs (``solution.py``'s correctness and speed against the reference, ``perf/grading.py``).

``step`` returns ``(observation, reward, terminated, truncated, info)``:

* ``observation``: text for the agent (the tool's output, or an error message for an action that
  could not be carried out; a bad action still counts as a step).
* ``reward``: the change in episode reward this step caused (non-zero only on a graded
  ``submit``); an episode's step rewards sum to its episode reward (``reward.py``).
* ``terminated``: the task is solved (score 1.0, when ``stop_on_solve``) or the submission budget
  is spent. ``truncated``: the step budget (or ``max_wall_s``) ran out first.
* ``info``: ``step``, ``tool``, ``duration_s`` (tool time), ``error`` (None or the message),
  ``submissions``, ``episode_reward``; on a graded submit also ``score`` and ``grade`` (the grader's
  result); on ``bash`` also ``returncode``, ``stdout``, ``stderr`` and ``timed_out`` (the
  command's own output, unclipped, for a harness that words its observations itself).

:class:`CodingEnv` runs commands with blocking subprocesses; :class:`AsyncCodingEnv` with asyncio
subprocesses, so one event loop can hold many episodes in flight. Both share one step logic,
written as a generator that yields the commands and gradings it needs (:class:`_Episode`).
"""

from __future__ import annotations

import copy
import shlex
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kvharness.env.actions import (
    TOOL_SCHEMAS,
    Action,
    ActionError,
    Bash,
    EditFile,
    ReadFile,
    Search,
    apply_edit,
    parse_action,
    resolve_in_repo,
    tool_name,
)
from kvharness.env.chain.grading import ChainGrader
from kvharness.env.chain.task import ChainTask
from kvharness.env.grading import Grader, GradeResult
from kvharness.env.perf.grading import PerfGrader, PerfGradeResult
from kvharness.env.perf.task import PerfTask
from kvharness.env.reward import RewardRule, Submission, episode_reward, step_reward
from kvharness.env.sandbox import CommandResult, Limits, Sandbox
from kvharness.env.task import SYSTEM_PROMPT, AnyTask

__all__ = ["SYSTEM_PROMPT", "AsyncCodingEnv", "CodingEnv", "EnvConfig", "StepResult"]

_AnyGrader = Grader | PerfGrader
_AnyGrade = GradeResult | PerfGradeResult


@dataclass(frozen=True, slots=True)
class EnvConfig:
    """Budgets and limits of an episode.

    ``max_steps``: actions per episode (then truncated). ``max_submissions``: graded submits
    (then terminated). ``max_wall_s``: wall time from reset (then truncated; None = no limit).
    ``stop_on_solve``: terminate on a score of 1.0. ``max_observation_chars``: observations are cut
    to this length (a note says how much was dropped). ``limits``: per-command sandbox limits;
    ``python_env``: host paths of the Python environment commands and tests run with (mounted
    read-only; default: this interpreter's, see ``grading.py``). ``workdir``: where episode copies
    go (default: the system temp dir). ``unsafe``: run commands without bubblewrap.
    """

    max_steps: int = 50
    max_submissions: int = 3
    max_wall_s: float | None = None
    reward: RewardRule = field(default_factory=RewardRule)
    stop_on_solve: bool = True
    max_observation_chars: int = 16_000
    limits: Limits = field(default_factory=Limits)
    python_env: tuple[Path, ...] | None = None
    workdir: Path | None = None
    unsafe: bool = False

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_submissions < 1:
            raise ValueError("max_steps and max_submissions must be >= 1")
        if self.max_observation_chars < 100:
            raise ValueError("max_observation_chars must be >= 100")


class StepResult(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class _Run(NamedTuple):
    """A command for the sandbox (shell string, relative to the repository root)."""

    command: str


class _Grade(NamedTuple):
    """Grade the repository copy."""


_Need = _Run | _Grade
_Flow = Generator[_Need, CommandResult | _AnyGrade, tuple[str, dict[str, Any]]]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not shown ...]"


class _Episode:
    """The state and step logic of one episode, free of how commands are run.

    ``flow(action)`` is a generator: it yields :class:`_Run` / :class:`_Grade` requests, is sent
    their results, and returns ``(observation, extra info)``. The driver (sync or async) carries
    out the requests; :meth:`finish_step` then applies budgets and rewards.
    """

    def __init__(self, task: AnyTask, config: EnvConfig, start: float) -> None:
        self.task = task
        self.config = config
        self.start = start
        self.steps = 0
        self.submissions: list[Submission] = []
        self.done = False
        self.tmp = Path(tempfile.mkdtemp(prefix=f"kvh-{task.id}-", dir=config.workdir))
        # The copy goes when the episode is closed, garbage-collected, or at interpreter exit.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.tmp, ignore_errors=True)
        self.repo = task.checkout(self.tmp / "repo")

    def observation0(self) -> str:
        return (
            f"{self.task.issue.strip()}\n\n"
            f"Budget: {self.config.max_steps} actions, {self.config.max_submissions} submissions."
        )

    def flow(self, action: Action) -> _Flow:
        if isinstance(action, Bash):
            result = yield _Run(action.command)
            assert isinstance(result, CommandResult)
            return _command_text(result), {
                "returncode": result.returncode,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "timed_out": result.timed_out,
            }
        if isinstance(action, ReadFile):
            path = _regular_file(self.repo, action.path, "read_file")
            limit = 4 * self.config.max_observation_chars
            with path.open("rb") as f:
                data = f.read(limit + 1)
            return data[:limit].decode("utf-8", errors="replace") + (
                "\n[... file continues ...]" if len(data) > limit else ""
            ), {}
        if isinstance(action, EditFile):
            path = resolve_in_repo(self.repo, action.path)
            if action.search == "":
                if path.exists():
                    raise ActionError(f"edit_file: {action.path} exists; give the text to replace")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(action.replace)
                return f"Created {action.path}.", {}
            path = _regular_file(self.repo, action.path, "edit_file")
            if path.stat().st_size > _MAX_EDIT_BYTES:
                raise ActionError(f"edit_file: {action.path} is too large to edit (use bash)")
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                raise ActionError(f"edit_file: {action.path} is not UTF-8 text") from None
            path.write_text(apply_edit(text, action.search, action.replace, action.path))
            return f"Edited {action.path}.", {}
        if isinstance(action, Search):
            where = "."
            if action.path is not None:
                target = resolve_in_repo(self.repo, action.path)
                where = str(target.relative_to(self.repo.resolve())) or "."
            cmd = (
                f"grep -rnIE --exclude-dir=.git -- {shlex.quote(action.pattern)} "
                f"{shlex.quote(where)} | head -n {_SEARCH_LINES} | cut -c 1-{_SEARCH_WIDTH}"
            )
            result = yield _Run(f"set -o pipefail; {cmd}")
            assert isinstance(result, CommandResult)
            if result.returncode == 1 and not result.stdout:
                return "No matches.", {}
            if result.returncode not in (0, 141) and not result.stdout:
                raise ActionError(f"search: {result.stderr.strip() or 'grep failed'}")
            return result.stdout, {}
        if len(self.submissions) >= self.config.max_submissions:
            raise ActionError("submit: no submissions left")
        grade = yield _Grade()
        assert isinstance(grade, GradeResult | PerfGradeResult)
        sub = Submission(self.steps, max(0.0, time.perf_counter() - self.start), grade.score)
        self.submissions.append(sub)
        left = self.config.max_submissions - len(self.submissions)
        text = f"Score: {grade.score:.3f}. {grade.summary()}. Submissions left: {left}."
        return text, {"score": grade.score, "grade": grade}

    def finish_step(
        self, action: Action | None, obs: str, extra: dict[str, Any], error: str | None, dt: float
    ) -> StepResult:
        graded = "score" in extra
        reward = step_reward(self.submissions, self.config.reward) if graded else 0.0
        self.steps += 1
        solved = graded and extra["score"] >= 1.0 and self.config.stop_on_solve
        terminated = solved or len(self.submissions) >= self.config.max_submissions
        elapsed = time.perf_counter() - self.start
        out_of_time = self.config.max_wall_s is not None and elapsed >= self.config.max_wall_s
        truncated = not terminated and (self.steps >= self.config.max_steps or out_of_time)
        self.done = terminated or truncated
        info: dict[str, Any] = {
            "step": self.steps - 1,
            "tool": tool_name(action) if action is not None else None,
            "duration_s": dt,
            "error": error,
            "submissions": len(self.submissions),
            "episode_reward": episode_reward(self.submissions, self.config.reward),
            **extra,
        }
        return StepResult(
            _clip(obs, self.config.max_observation_chars), reward, terminated, truncated, info
        )

    def close(self) -> None:
        self._cleanup()


_MAX_EDIT_BYTES = 8 << 20
_SEARCH_LINES = 100
_SEARCH_WIDTH = 300


def _grading_error(err: BaseException) -> ActionError:
    return ActionError(
        f"submit: the repository could not be graded ({type(err).__name__}: {str(err)[:300]}); "
        "the submission was not counted"
    )


def _graded(grade: Callable[[Path], _AnyGrade], repo: Path) -> _AnyGrade:
    """``grade(repo)``, with a failure the agent caused (a FIFO or unreadable file in its copy,
    which the grader cannot copy) turned into an action error."""
    try:
        return grade(repo)
    except (OSError, shutil.Error) as err:
        raise _grading_error(err) from None


def _regular_file(repo: Path, path: str, tool: str) -> Path:
    """The confined path of an existing regular file (not a directory, FIFO or device: reading
    a FIFO the agent made would block the host)."""
    target = resolve_in_repo(repo, path)
    if target.is_dir():
        raise ActionError(f"{tool}: {path} is a directory")
    if not target.exists():
        raise ActionError(f"{tool}: no such file: {path}")
    if not target.is_file():
        raise ActionError(f"{tool}: {path} is not a regular file")
    return target


def _command_text(result: CommandResult) -> str:
    parts = [f"exit code: {result.returncode}" + (" (timed out)" if result.timed_out else "")]
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    return "\n".join(parts)


def _make_grader(
    task: AnyTask,
    *,
    python_env: tuple[Path, ...] | None,
    limits: Limits,
    unsafe: bool,
    workdir: Path | None,
) -> _AnyGrader:
    """The grader of the task's family: hidden tests for a coding task, milestones scored as a
    prefix for a chain task, correctness and timing against the reference for a performance
    task."""
    if isinstance(task, PerfTask):
        return PerfGrader(
            task, python_env=python_env, limits=limits, unsafe=unsafe, workdir=workdir
        )
    if isinstance(task, ChainTask):
        return ChainGrader(
            task, python_env=python_env, limits=limits, unsafe=unsafe, workdir=workdir
        )
    return Grader(task, python_env=python_env, limits=limits, unsafe=unsafe, workdir=workdir)


class _Base:
    def __init__(self, task: AnyTask, config: EnvConfig | None = None) -> None:
        self.task = task
        self.config = config or EnvConfig()
        self.grader = _make_grader(
            task,
            python_env=self.config.python_env,
            limits=self.config.limits,
            unsafe=self.config.unsafe,
            workdir=self.config.workdir,
        )
        self._episode: _Episode | None = None
        self._sandbox: Sandbox | None = None
        self.tools = TOOL_SCHEMAS

    @property
    def submissions(self) -> tuple[Submission, ...]:
        """Submissions of the current episode, in order."""
        return tuple(self._episode.submissions) if self._episode else ()

    @property
    def repo(self) -> Path:
        """Host path of the current episode's repository copy."""
        return self._require().repo

    def episode_reward(self) -> float:
        """The current episode's reward so far under the configured rule."""
        return episode_reward(self.submissions, self.config.reward)

    def counters(self) -> dict[str, Any]:
        """The current episode's counters as plain data (for a checkpoint): steps taken,
        submissions with their scores, seconds since reset."""
        ep = self._require()
        return {
            "steps": ep.steps,
            "submissions": [asdict(s) for s in ep.submissions],
            "elapsed_s": time.perf_counter() - ep.start,
        }

    def restore_counters(self, doc: Mapping[str, Any]) -> None:
        """Set the current episode's counters from :meth:`counters`' document (after
        :meth:`reset`; the workspace is restored separately). The wall-time budget and the
        submissions' times go on from the saved elapsed time; no submission is graded again."""
        ep = self._require()
        ep.steps = int(doc["steps"])
        ep.submissions = [Submission(**s) for s in doc["submissions"]]
        ep.start = time.perf_counter() - float(doc["elapsed_s"])

    def _require(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        return self._episode

    def _reset(self) -> tuple[str, dict[str, Any]]:
        self.close()
        ep = _Episode(self.task, self.config, time.perf_counter())
        self._episode = ep
        # Grading copies go inside the episode's folder, so that they go with it even when a
        # grading fails half-way (an agent-made FIFO stops the copy).
        self.grader = _make_grader(
            self.task,
            python_env=self.grader.python_env,
            limits=self.config.limits,
            unsafe=self.config.unsafe,
            workdir=ep.tmp,
        )
        self._sandbox = Sandbox(
            ep.repo,
            ro_paths=self.grader.python_env,
            limits=self.config.limits,
            unsafe=self.config.unsafe,
        )
        info = {
            "task_id": self.task.id,
            "system_prompt": self.task.system_prompt,
            "tools": copy.deepcopy(list(TOOL_SCHEMAS)),
            "max_steps": self.config.max_steps,
            "max_submissions": self.config.max_submissions,
        }
        return ep.observation0(), info

    def _begin(
        self, action: Action | Mapping[str, Any] | str
    ) -> tuple[_Episode, Action | None, str | None]:
        ep = self._require()
        if ep.done:
            raise RuntimeError("the episode is over; call reset()")
        try:
            return ep, parse_action(action), None
        except ActionError as err:
            return ep, None, str(err)

    def close(self) -> None:
        """Delete the current episode's repository copy."""
        if self._episode is not None:
            self._episode.close()
            self._episode = None


class CodingEnv(_Base):
    """One task as a Gymnasium-shaped environment (blocking). See the module docstring.
    ``with CodingEnv(task) as env:`` closes the episode's copy on exit."""

    def __enter__(self) -> CodingEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on a fresh copy of the repository; returns the issue text and info
        (task id, system prompt, tool schemas, budgets). ``seed`` is accepted for Gymnasium; the
        environment is deterministic."""
        return self._reset()

    def step(self, action: Action | Mapping[str, Any] | str) -> StepResult:
        """Carry out one action (typed, or an OpenAI tool call) and return the step's result."""
        ep, typed, error = self._begin(action)
        t0 = time.perf_counter()
        obs, extra = f"error: {error}", {}
        if typed is not None:
            try:
                gen = ep.flow(typed)
                need = next(gen)
                while True:
                    if isinstance(need, _Run):
                        assert self._sandbox is not None
                        need = gen.send(self._sandbox.run(need.command))
                    else:
                        need = gen.send(_graded(self.grader.grade, ep.repo))
            except StopIteration as stop:
                obs, extra = stop.value
            except ActionError as err:
                error = str(err)
                obs = f"error: {error}"
        return ep.finish_step(typed, obs, extra, error, time.perf_counter() - t0)


class AsyncCodingEnv(_Base):
    """:class:`CodingEnv` for asyncio: ``await env.reset()``, ``await env.step(action)``.
    Commands and grading run as asyncio subprocesses, so many episodes (one env each) run
    concurrently on one event loop. ``async with`` closes the episode's copy on exit."""

    async def __aenter__(self) -> AsyncCodingEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """As :meth:`CodingEnv.reset` (the copy is made in a worker thread)."""
        import asyncio

        return await asyncio.to_thread(self._reset)

    async def step(self, action: Action | Mapping[str, Any] | str) -> StepResult:
        """As :meth:`CodingEnv.step`."""
        ep, typed, error = self._begin(action)
        t0 = time.perf_counter()
        obs, extra = f"error: {error}", {}
        if typed is not None:
            try:
                gen = ep.flow(typed)
                need = next(gen)
                while True:
                    if isinstance(need, _Run):
                        assert self._sandbox is not None
                        need = gen.send(await self._sandbox.arun(need.command))
                    else:
                        try:
                            grade = await self.grader.agrade(ep.repo)
                        except (OSError, shutil.Error) as err:
                            raise _grading_error(err) from None
                        need = gen.send(grade)
            except StopIteration as stop:
                obs, extra = stop.value
            except ActionError as err:
                error = str(err)
                obs = f"error: {error}"
        return ep.finish_step(typed, obs, extra, error, time.perf_counter() - t0)
