"""Agents for the harness: the model itself, and scripted agents that prove the loop.

Every agent is consulted once per model call: the harness sends the full conversation to the
model, then asks the agent which actions to take given the model's reply. :class:`ModelAgent`
takes the model's own tool calls. The scripted agents ignore what the model said and follow a
script, but the harness still calls the model for every turn with the whole history (so the
serving load is that of a real agent session):

* :class:`OracleAgent`: explores (``ls``, a search, reads the mutated file), submits a wrong
  attempt (a harmless edit), then applies the task's known fix and submits again. It must score
  1.0 on every task. On a performance task it reads ``solution.py``, submits it unchanged (the
  reference: score 0), then replaces it by the known fast solution and submits again. On a
  chain task it restores the stubbed functions in milestone order, submitting after each (the
  scores climb 1/K, 2/K, ... to 1.0).
* :class:`HalfwayAgent` (chain tasks): restores the first ceil(K/2) milestones the same way, then
  stops; must score exactly ceil(K/2)/K.
* :class:`NoopAgent`: submits at once; must score 0 (the bug is still there).
* :class:`CheatAgent`: deletes every test file it can see, writes a ``conftest.py`` that turns
  every test into a pass and rewrites test files to ``assert True``, then submits; must score 0
  (grading restores the hidden tests on a clean copy).

An agent holds one episode's script position: make one per episode (:func:`make_agent`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvharness.env.actions import (
    Action,
    Bash,
    EditFile,
    ReadFile,
    Search,
    Submit,
)
from kvharness.env.chain.task import ChainTask
from kvharness.env.perf.task import SOLUTION, PerfTask
from kvharness.env.task import AnyTask
from kvharness.registry import Registry

if TYPE_CHECKING:
    from kvharness.env.api import EnvConfig
    from kvharness.env.reward import Submission

__all__ = [
    "AGENTS",
    "Agent",
    "CheatAgent",
    "HalfwayAgent",
    "ModelAgent",
    "NoopAgent",
    "OracleAgent",
    "make_agent",
    "play_script",
]


class Agent:
    """Base: ``decide(reply)`` returns the actions for this turn: typed actions, or OpenAI tool
    calls taken from the reply (empty: the harness nudges the model and asks again). A
    ``scripted`` agent's actions replace the reply's tool calls in the recorded conversation. ``tool_choice`` is what the harness asks the server for: ``"auto"``
    for an agent that reads the model's tool calls, ``"none"`` for scripted ones (the tools are
    still sent, so the prompt is that of a tool-using agent)."""

    name = "agent"
    tool_choice = "auto"

    def __init__(self, task: AnyTask) -> None:
        self.task = task

    scripted = False

    @property
    def finished(self) -> bool:
        """True when the agent has nothing more to do (a script played out): the episode ends
        before the next model call."""
        return False

    def decide(self, reply: Mapping[str, Any]) -> list[Action | Mapping[str, Any]]:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """What the agent must carry over a checkpoint (plain data; none by default)."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back :meth:`state`'s document on a resumed episode."""


class ModelAgent(Agent):
    """Acts on the model's tool calls, passed to the environment as they came (one that does not
    parse costs a step and its error is the tool's result)."""

    name = "model"

    def decide(self, reply: Mapping[str, Any]) -> list[Action | Mapping[str, Any]]:
        return list(reply.get("tool_calls") or ())


class _Scripted(Agent):
    tool_choice = "none"
    scripted = True

    def __init__(self, task: AnyTask) -> None:
        super().__init__(task)
        self._script = self.script()
        self._pos = 0

    def script(self) -> list[Action]:
        raise NotImplementedError

    @property
    def finished(self) -> bool:
        return self._pos >= len(self._script)

    def decide(self, reply: Mapping[str, Any]) -> list[Action | Mapping[str, Any]]:
        if self.finished:
            return []
        action = self._script[self._pos]
        self._pos += 1
        return [action]

    def state(self) -> dict[str, Any]:
        return {"position": self._pos}

    def restore(self, state: Mapping[str, Any]) -> None:
        self._pos = int(state["position"])


def _search_term(text: str, source: str) -> str:
    """An identifier of the mutated lines to grep for, as an exploring agent would: the one
    rarest in the file ``source`` (then the longest), so the answer stays short."""
    found: list[str] = re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", text)
    words = {w for w in found if w not in _KEYWORDS}
    if not words:
        return "def "
    ranked = sorted(sorted(words), key=lambda w: (source.count(w), -len(w)))
    return ranked[0]


_KEYWORDS = frozenset(
    [
        "and",
        "def",
        "elif",
        "else",
        "for",
        "from",
        "if",
        "import",
        "in",
        "is",
        "lambda",
        "not",
        "or",
        "return",
        "self",
        "True",
        "False",
        "None",
        "while",
        "with",
        "yield",
        "class",
        "pass",
    ]
)


class OracleAgent(_Scripted):
    """Explore, submit a wrong attempt, apply the known fix, submit (see module docstring).

    Both edits are small, as an agent's would be: a snippet around the mutated lines, widened
    line by line until it occurs once in the file. The wrong attempt puts a comment line above
    the snippet (no behaviour change); the fix replaces comment and snippet by the original
    lines. Where the snippet cannot be located, the edits fall back to the whole file.
    """

    name = "oracle"
    MARKER = "# kvharness oracle: first attempt\n"

    def script(self) -> list[Action]:
        if isinstance(self.task, PerfTask):
            current = (self.task.repo_dir / SOLUTION).read_text()
            fast = (self.task.fix_dir / SOLUTION).read_text()
            return [
                Bash("ls"),
                ReadFile(SOLUTION),
                Submit(),
                EditFile(SOLUTION, current, fast),
                Submit(),
            ]
        if isinstance(self.task, ChainTask):
            return [Bash("ls"), ReadFile(self.task.milestones[0].file), *_chain_fixes(self.task)]
        mut = self.task.mutation
        fixed = (self.task.fix_dir / mut.file).read_text()
        current = (self.task.repo_dir / mut.file).read_text()
        ctx, fixed_ctx = fix_snippets(current, fixed, mut.line, mut.mutated, mut.original)
        return [
            Bash("ls"),
            Search(_search_term(mut.mutated, current), None),
            ReadFile(mut.file),
            EditFile(mut.file, ctx, self.MARKER + ctx),
            Submit(),
            EditFile(mut.file, self.MARKER + ctx, fixed_ctx),
            Submit(),
        ]


def fix_snippets(
    current: str, fixed: str, line: int, mutated: str, original: str
) -> tuple[str, str]:
    """``(snippet, fixed snippet)``: a snippet of ``current`` that occurs once, covers the
    mutated lines (starting at 1-based ``line``) and turns ``current`` into ``fixed`` when
    replaced by the fixed snippet; the whole files when no such snippet is found."""
    cur = current.splitlines(keepends=True)
    n = len(mutated.splitlines()) or 1
    m = len(original.splitlines()) or 1
    start = line - 1
    orig_lines = fixed.splitlines(keepends=True)
    if start >= 0 and start + n <= len(cur) and start + m <= len(orig_lines):
        lo, hi = start, start + n
        while True:
            ctx = "".join(cur[lo:hi])
            fixed_ctx = "".join(cur[lo:start] + orig_lines[start : start + m] + cur[start + n : hi])
            if ctx.strip() and current.count(ctx) == 1:
                if current.replace(ctx, fixed_ctx) == fixed:
                    return ctx, fixed_ctx
                break
            if lo == 0 and hi == len(cur):
                break
            lo, hi = max(lo - 1, 0), min(hi + 1, len(cur))
    return current, fixed


def _chain_fixes(task: ChainTask, count: int | None = None) -> list[Action]:
    """Restore the first ``count`` milestones (all by default) one at a time, each followed by
    a submission."""
    out: list[Action] = []
    for m in task.milestones[:count]:
        out += [EditFile(m.file, m.stub, m.original), Submit()]
    return out


class HalfwayAgent(_Scripted):
    """On a chain task: restores the first ceil(K/2) milestones one at a time, submitting after
    each, then stops; must score exactly those milestones. Only for chain tasks."""

    name = "halfway"

    def script(self) -> list[Action]:
        if not isinstance(self.task, ChainTask):
            raise ValueError(f"the halfway agent needs a chain task; {self.task.id} is not one")
        return [Bash("ls"), *_chain_fixes(self.task, math.ceil(len(self.task.milestones) / 2))]


class NoopAgent(_Scripted):
    """Submits at once."""

    name = "noop"

    def script(self) -> list[Action]:
        return [Submit()]


_CHEAT_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""


class CheatAgent(_Scripted):
    """Attacks the tests instead of the bug, then submits (see module docstring)."""

    name = "cheat"

    def script(self) -> list[Action]:
        find_tests = "find . \\( -name 'test_*.py' -o -name '*_test.py' -o -name conftest.py \\)"
        rewrite = (
            f"{find_tests} -print0 | xargs -0 -r -I{{}} sh -c "
            "\"printf 'def test_ok():\\n    assert True\\n' > '{}'\""
        )
        return [
            Bash(f"{find_tests} | head -50"),
            Bash(rewrite),
            Bash("rm -rf tests test testing conftest.py"),
            EditFile("conftest.py", "", _CHEAT_CONFTEST),
            Bash(
                "mkdir -p tests && printf 'def test_ok():\\n    assert True\\n' "
                "> tests/test_fixed.py && cp conftest.py tests/conftest.py"
            ),
            Submit(),
        ]


def play_script(
    task: AnyTask, agent_name: str, config: EnvConfig | None = None
) -> tuple[list[Submission], float]:
    """Play scripted agent ``agent_name``'s whole script on ``task`` in a blocking
    :class:`~kvharness.env.api.CodingEnv`, no model called: its submissions and the episode's
    reward. For checking a suite's tasks and graders."""
    from kvharness.env.api import CodingEnv

    agent = make_agent(agent_name, task)
    if not isinstance(agent, _Scripted):
        raise ValueError(f"agent {agent_name!r} acts on a model's replies; it has no script")
    with CodingEnv(task, config) as env:
        env.reset()
        for action in agent.script():
            step = env.step(action)
            if step.terminated or step.truncated:
                break
        return list(env.submissions), env.episode_reward()


AGENTS: Registry[Agent] = Registry(
    "agent",
    {
        ModelAgent.name: ModelAgent,
        OracleAgent.name: OracleAgent,
        NoopAgent.name: NoopAgent,
        CheatAgent.name: CheatAgent,
        HalfwayAgent.name: HalfwayAgent,
    },
)
"""Agent kinds by name; each factory takes the episode's task."""


def make_agent(name: str, task: AnyTask) -> Agent:
    """A fresh agent of kind ``name`` for one episode of ``task``; ValueError for an unknown one."""
    return AGENTS.make(name, task)
