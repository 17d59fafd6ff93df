"""Key combinations as DevTools key events."""

from __future__ import annotations

import pytest

from kvharness.env.web.keys import parse_combo


def test_plain_and_named_keys() -> None:
    a = parse_combo("a")
    assert (a.key, a.code, a.key_code, a.modifiers, a.text) == ("a", "KeyA", 65, 0, "a")
    enter = parse_combo("Enter")
    assert (enter.code, enter.key_code, enter.text) == ("Enter", 13, "\r")
    assert parse_combo("esc").key == "Escape" and parse_combo("space").text == " "
    assert parse_combo("F2").key_code == 113 and parse_combo("7").code == "Digit7"


def test_modifiers_drop_the_text_and_carry_editing_commands() -> None:
    sel = parse_combo("Control+a")
    assert sel.modifiers == 2 and sel.text == "" and sel.commands == ("selectAll",)
    tab = parse_combo("Shift+Tab")
    assert tab.modifiers == 8 and tab.key == "Tab"
    assert parse_combo("Shift+a").text == "A"
    assert parse_combo("Ctrl+Shift+z").commands == ("redo",)
    assert parse_combo("Control++").key == "+"


@pytest.mark.parametrize(
    ("combo", "says"), [("Hyper+a", "unknown modifier"), ("Foo", "unknown key")]
)
def test_unknown_keys_are_refused(combo: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_combo(combo)
