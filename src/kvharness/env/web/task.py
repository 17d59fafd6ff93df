"""A computer-use task: a small local web app, an instruction, and a hidden checker of its state.

A task's app is a set of files served at :data:`ORIGIN` by the browser itself (the episode's
browser intercepts every request and answers it from :attr:`WebTask.files`; there is no server
and no network). ``index.html`` is the page an episode opens. The app keeps its state in page
JavaScript and exposes it as ``window.kvhState()``, a function returning a JSON-able object; the
environment reads it through the DevTools protocol after every action. The agent never sees it:
the agent has the screenshot and the instruction only, and the checks are Python predicates over
that state, which never enter the page.

Milestones are ordered. After each action, the first milestone not yet reached is checked (and
the next, while they hold): a milestone is credited once, when it holds with every milestone
before it credited, and stays credited. The last milestone is the task itself; it is checked on
the final state when the episode ends and counts only if it holds then. The episode's reward is
the credited fraction of the milestones, so a solved task scores 1.0, and an agent that stops
half way gets the milestones it reached.

A *family* builds task variants from a seed (:class:`Family`): values, labels and layouts are
drawn from ``random.Random(seed)``, so a variant cannot be memorised. The oracle's script
(:data:`OracleStep`) names elements by CSS selector; the oracle agent resolves each to viewport
coordinates and acts through the same click/type/key actions as any agent, which proves every
task solvable through the action space.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

__all__ = [
    "ORIGIN",
    "Click",
    "DragTo",
    "Family",
    "Milestone",
    "OracleStep",
    "Press",
    "TypeText",
    "WebTask",
]

ORIGIN = "http://app.test"
"""Where every task app is served (by the episode's browser, from the task's files)."""

State: TypeAlias = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Milestone:
    """One step of progress: ``check(state)`` is true once it is reached (``state`` is what
    ``window.kvhState()`` returned, decoded from JSON)."""

    name: str
    check: Callable[[State], bool]


class Click(NamedTuple):
    """Click the centre of the first element matching ``selector`` (``clicks`` 2: a double
    click)."""

    selector: str
    clicks: int = 1


class TypeText(NamedTuple):
    """Type ``text`` into whatever has focus."""

    text: str


class Press(NamedTuple):
    """Press a key combination (``"Enter"``, ``"Tab"``, ``"Control+a"``, ``"Backspace"``)."""

    combo: str


class DragTo(NamedTuple):
    """Press on ``source``'s centre, move to ``target``'s centre, release."""

    source: str
    target: str


OracleStep: TypeAlias = Click | TypeText | Press | DragTo


@dataclass(frozen=True, slots=True)
class WebTask:
    """One task variant, ``seed`` of ``family``; ``files`` maps a path under :data:`ORIGIN`
    (``"index.html"``, ``"app.js"``) to its text; ``oracle`` solves the task."""

    family: str
    seed: int
    instruction: str
    files: Mapping[str, str]
    milestones: tuple[Milestone, ...]
    oracle: tuple[OracleStep, ...]

    @property
    def id(self) -> str:
        """``<family>/<seed>``, as :func:`kvharness.env.web.apps.task` takes it."""
        return f"{self.family}/{self.seed}"

    def __post_init__(self) -> None:
        if "index.html" not in self.files:
            raise ValueError(f"{self.id}: a task's files must include index.html")
        if len(self.milestones) < 2:
            raise ValueError(f"{self.id}: a task needs at least two milestones")
        if not self.oracle:
            raise ValueError(f"{self.id}: a task needs an oracle script")


@dataclass(frozen=True, slots=True)
class Family:
    """A task family: ``build(seed)`` makes the variant ``<name>/<seed>``."""

    name: str
    summary: str
    build: Callable[[int], WebTask]
