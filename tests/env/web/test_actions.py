"""The text form of computer-use actions: what models write, parsed, and what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvharness.env.web.actions import (
    ActionError,
    ClickAt,
    Done,
    DoubleClickAt,
    Drag,
    Key,
    Scroll,
    Type,
    Wait,
    action_text,
    parse_action,
)


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("click(412, 230)", ClickAt(412, 230)),
        ("I will press the button.\nclick(10.5, 3)", ClickAt(10.5, 3)),
        ("double_click(1,2)", DoubleClickAt(1, 2)),
        ('type("Ada Lovelace")', Type("Ada Lovelace")),
        ("type('a, b) c')", Type("a, b) c")),
        ('key("Control+a")', Key("Control+a")),
        ("scroll(0, 400)", Scroll(0, 400)),
        ("scroll(0, -300, 640, 200)", Scroll(0, -300, 640, 200)),
        ("drag(1, 2, 3, 4)", Drag(1, 2, 3, 4)),
        ("wait(1)", Wait(1)),
        ("done()", Done()),
        # The last call wins: models reason about earlier actions before acting.
        ('Earlier I did click(1, 1); now type("x")', Type("x")),
    ],
)
def test_replies_parse(reply: str, action: object) -> None:
    assert parse_action(reply) == action


def test_a_mapping_parses() -> None:
    assert parse_action({"action": "click", "args": [3, 4]}) == ClickAt(3, 4)


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("nothing to do", "no action found"),
        ("click(1)", "click takes 2 numbers"),
        ("click(1, 2, 3, 4, 5)", "click takes 2 numbers"),
        ('click("a", 2)', "click takes numbers"),
        ("click(True, 2)", "click takes numbers"),
        ("type(3)", "type takes one quoted string"),
        ('type("")', "1 to 2000 characters"),
        ("click(1, 2", "is not closed"),
        ("click(__import__('os'), 1)", "cannot read the arguments"),
        ({"action": "explode"}, "unknown action"),
    ],
)
def test_bad_replies_say_what_to_write(reply: str, says: str) -> None:
    with pytest.raises(ActionError, match=says) as err:
        parse_action(reply)
    assert (
        "click(x, y)" in str(err.value)
        or "e.g." in str(err.value)
        or "characters" in str(err.value)
    )


@given(
    st.one_of(
        st.builds(ClickAt, st.integers(0, 4000), st.integers(0, 4000)),
        st.builds(Type, st.text(min_size=1, max_size=50)),
        st.builds(Drag, *(st.integers(-5, 5000) for _ in range(4))),
        st.builds(Scroll, st.integers(-900, 900), st.integers(-900, 900), x=st.none(), y=st.none()),
    )
)
def test_action_text_parses_back(action: object) -> None:
    assert parse_action(action_text(action)) == action  # type: ignore[arg-type]


def test_image_spans_are_what_the_image_free_prompt_lacks() -> None:
    from kvharness.env.web.harness import image_spans

    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    # Two images: 4 placeholder tokens after token 3, 3 after token 9; one at the very end.
    with_images = [1, 2, 3, 90, 91, 91, 92, 4, 5, 6, 7, 8, 9, 90, 91, 92, 10, 11, 12]
    assert image_spans(with_images, text, 2) == [(3, 4), (13, 3)]
    assert image_spans([*text, 90, 91], text, 1) == [(12, 2)]
    with pytest.raises(ValueError, match="found 2 image spans for 1 images"):
        image_spans(with_images, text, 1)
