"""A computer-use agent's actions, typed, and their text form for models.

Models write one action per reply as a call, anywhere in the text::

    click(412, 230)        double_click(412, 230)     type("Ada Lovelace")
    key("Control+a")       scroll(0, 400)             drag(100, 200, 600, 220)
    wait(1)                done()

Coordinates are viewport pixels (the screenshot's), ``scroll`` takes pixels right and down (a
pointer position may follow: ``scroll(0, 400, 640, 300)``), ``wait`` seconds (at most
:data:`MAX_WAIT_S`). :func:`parse_action` takes the last such call in a reply (models think
first, then act); anything it cannot read is an :class:`ActionError` whose message tells the
model what to write instead.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeAlias

__all__ = [
    "ACTION_HELP",
    "MAX_WAIT_S",
    "ActionError",
    "ClickAt",
    "Done",
    "DoubleClickAt",
    "Drag",
    "Key",
    "Scroll",
    "Type",
    "Wait",
    "WebAction",
    "action_text",
    "parse_action",
]

MAX_WAIT_S = 5.0
_MAX_TEXT = 2000


class ActionError(ValueError):
    """An action that cannot be carried out; its message is shown to the agent."""


class ClickAt(NamedTuple):
    x: float
    y: float


class DoubleClickAt(NamedTuple):
    x: float
    y: float


class Type(NamedTuple):
    text: str


class Key(NamedTuple):
    combo: str


class Scroll(NamedTuple):
    dx: float
    dy: float
    x: float | None = None
    y: float | None = None


class Drag(NamedTuple):
    x0: float
    y0: float
    x1: float
    y1: float


class Wait(NamedTuple):
    seconds: float = 1.0


class Done(NamedTuple):
    """The agent says the task is finished: the episode ends and is graded."""


WebAction: TypeAlias = ClickAt | DoubleClickAt | Type | Key | Scroll | Drag | Wait | Done

_BY_NAME: dict[str, type[Any]] = {
    "click": ClickAt,
    "double_click": DoubleClickAt,
    "type": Type,
    "key": Key,
    "scroll": Scroll,
    "drag": Drag,
    "wait": Wait,
    "done": Done,
}
_NAME_OF = {cls: name for name, cls in _BY_NAME.items()}
_CALL = re.compile(r"\b(" + "|".join(_BY_NAME) + r")\s*\(")

ACTION_HELP = (
    "Reply with one action, written as a call: click(x, y), double_click(x, y), "
    'type("text"), key("Enter" or a combination like "Control+a"), scroll(dx, dy), '
    "drag(x0, y0, x1, y1), wait(seconds) or done() when the task is finished. "
    "Coordinates are pixels of the screenshot, from its top-left corner."
)


def _close_paren(text: str, start: int) -> int:
    """Index of the ``)`` closing the call whose ``(`` is at ``start - 1``, skipping strings."""
    depth, i, quote = 1, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _build(name: str, args: tuple[Any, ...]) -> WebAction:
    cls = _BY_NAME[name]
    if cls in (Type, Key):
        if len(args) != 1 or not isinstance(args[0], str):
            raise ActionError(f'{name} takes one quoted string, e.g. {name}("...")')
        if not args[0] or len(args[0]) > _MAX_TEXT:
            raise ActionError(f"{name}: the text must have 1 to {_MAX_TEXT} characters")
        return cls(args[0])  # type: ignore[no-any-return]
    if not all(isinstance(a, int | float) and not isinstance(a, bool) for a in args):
        raise ActionError(f"{name} takes numbers, e.g. {_example(name)}")
    fields = cls._fields
    required = [f for f in fields if f not in cls._field_defaults]
    if not len(required) <= len(args) <= len(fields):
        raise ActionError(f"{name} takes {len(required)} numbers, e.g. {_example(name)}")
    return cls(*(float(a) for a in args))  # type: ignore[no-any-return]


def _example(name: str) -> str:
    return {
        "click": "click(412, 230)",
        "double_click": "double_click(412, 230)",
        "scroll": "scroll(0, 400)",
        "drag": "drag(100, 200, 600, 220)",
        "wait": "wait(1)",
        "done": "done()",
    }.get(name, f"{name}()")


def parse_action(reply: str | Mapping[str, Any]) -> WebAction:
    """The action in a model's reply: the last call written in the text (see the module
    docstring), or a mapping ``{"action": name, "args": [...]}``; :class:`ActionError` else."""
    if isinstance(reply, Mapping):
        name = reply.get("action")
        args = reply.get("args", [])
        if name not in _BY_NAME or not isinstance(args, list | tuple):
            raise ActionError(f"unknown action {name!r}; " + ACTION_HELP)
        return _build(str(name), tuple(args))
    matches = list(_CALL.finditer(reply))
    if not matches:
        raise ActionError("no action found. " + ACTION_HELP)
    m = matches[-1]
    end = _close_paren(reply, m.end())
    if end < 0:
        raise ActionError(f"{m.group(1)}( is not closed. " + ACTION_HELP)
    inner = reply[m.end() : end]
    try:
        value = ast.literal_eval(f"({inner},)") if inner.strip() else ()
    except (ValueError, SyntaxError):
        raise ActionError(
            f"cannot read the arguments of {m.group(1)}({inner}). " + ACTION_HELP
        ) from None
    return _build(m.group(1), tuple(value))


def action_text(action: WebAction) -> str:
    """The call a model would write for ``action`` (how scripted actions are recorded)."""
    name = _NAME_OF[type(action)]
    args = [a for a in action if a is not None]
    return f"{name}({', '.join(repr(a) if isinstance(a, str) else f'{a:g}' for a in args)})"
