"""Key combinations as the DevTools protocol's key events: ``"Control+a"`` -> one key stroke.

A combination is modifiers and one key joined by ``+`` (``"Shift+Tab"``, ``"Control+Shift+z"``,
``"Enter"``, ``"a"``). Modifier names: ``Control`` (``Ctrl``), ``Shift``, ``Alt``, ``Meta``
(``Cmd``); key names are the DOM's ``KeyboardEvent.key`` values for the keys below, or one
printable character. Editing shortcuts that Chromium's headless shell does not bind to keys
(select all, copy, cut, paste, undo, redo) carry the editing command too, so they work as on a
desktop.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["KeyStroke", "parse_combo"]

_MODIFIERS = {"alt": 1, "control": 2, "ctrl": 2, "meta": 4, "cmd": 4, "shift": 8}

# key -> (code, Windows virtual key code, text typed)
_NAMED: dict[str, tuple[str, int, str]] = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Escape": ("Escape", 27, ""),
    "Backspace": ("Backspace", 8, ""),
    "Delete": ("Delete", 46, ""),
    "Insert": ("Insert", 45, ""),
    "Home": ("Home", 36, ""),
    "End": ("End", 35, ""),
    "PageUp": ("PageUp", 33, ""),
    "PageDown": ("PageDown", 34, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    " ": ("Space", 32, " "),
    **{f"F{n}": (f"F{n}", 111 + n, "") for n in range(1, 13)},
}
_ALIASES = {
    "return": "Enter",
    "esc": "Escape",
    "del": "Delete",
    "space": " ",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "pgup": "PageUp",
    "pgdn": "PageDown",
}
_COMMANDS = {
    "a": "selectAll",
    "c": "copy",
    "x": "cut",
    "v": "paste",
    "z": "undo",
    "y": "redo",
}
_SHIFTED = dict(zip('~!@#$%^&*()_+{}|:"<>?', "`1234567890-=[]\\;',./", strict=True))
_CODES = {
    "`": "Backquote",
    "-": "Minus",
    "=": "Equal",
    "[": "BracketLeft",
    "]": "BracketRight",
    "\\": "Backslash",
    ";": "Semicolon",
    "'": "Quote",
    ",": "Comma",
    ".": "Period",
    "/": "Slash",
}
_VK = {
    "`": 192,
    "-": 189,
    "=": 187,
    "[": 219,
    "]": 221,
    "\\": 220,
    ";": 186,
    "'": 222,
    ",": 188,
    ".": 190,
    "/": 191,
}


class KeyStroke(NamedTuple):
    """One key event pair's fields (see ``Input.dispatchKeyEvent``)."""

    key: str
    code: str
    key_code: int
    modifiers: int
    text: str
    commands: tuple[str, ...]


def _printable(ch: str) -> tuple[str, int]:
    base = _SHIFTED.get(ch, ch.lower())
    if base.isalpha() and base.isascii():
        return f"Key{base.upper()}", ord(base.upper())
    if base.isdigit():
        return f"Digit{base}", ord(base)
    if base in _CODES:
        return _CODES[base], _VK[base]
    return "", 0


def parse_combo(combo: str) -> KeyStroke:
    """``combo`` as a key stroke; ValueError naming what is wrong with it."""
    parts = combo.split("+") if combo != "+" else ["+"]
    if combo.endswith("++"):
        parts = [*combo[:-2].split("+"), "+"]
    *mods, key = parts
    modifiers = 0
    for m in mods:
        if m.strip().lower() not in _MODIFIERS:
            raise ValueError(f"unknown modifier {m!r} in {combo!r} (Control, Shift, Alt, Meta)")
        modifiers |= _MODIFIERS[m.strip().lower()]
    key = _ALIASES.get(key.lower(), key) if len(key) > 1 else key
    if key in _NAMED:
        code, vk, text = _NAMED[key]
    elif len(key) == 1 and key.isprintable():
        code, vk = _printable(key)
        text = key
        if modifiers & 8 and key.isalpha():
            key = text = key.upper()
    else:
        known = ", ".join(k for k in _NAMED if k != " ")
        raise ValueError(f"unknown key {key!r} in {combo!r}: one character, Space, or {known}")
    if modifiers & (1 | 2 | 4):
        text = ""
    commands: tuple[str, ...] = ()
    if modifiers & 2 and len(key) == 1 and key.lower() in _COMMANDS:
        command = _COMMANDS[key.lower()]
        if command == "undo" and modifiers & 8:
            command = "redo"
        commands = (command,)
    return KeyStroke(key, code, vk, modifiers, text, commands)
