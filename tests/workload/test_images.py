"""Images in prompts: the chain hashes them as vLLM's prefix cache does, the format keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kvharness.errors import FormatError
from kvharness.workload import format as wformat
from kvharness.workload.chain import ChainBuilder, shared_prefix_tokens
from kvharness.workload.images import Image, grid_tokens
from kvharness.workload.model import Session, Turn, Workload

BS = 16


def _prompt(text_before: int, image_hash: int, image_tokens: int, text_after: int) -> ChainBuilder:
    b = ChainBuilder(BS)
    b.extend_segment(1, text_before)
    b.extend_image(image_hash, image_tokens)
    b.extend_segment(2, text_after)
    return b


def test_equal_images_share_blocks_and_different_ones_stop_the_prefix_where_they_start():
    same_a = _prompt(40, 7, 50, 30).chain()
    same_b = _prompt(40, 7, 50, 30).chain()
    other = _prompt(40, 8, 50, 30).chain()
    assert same_a == same_b
    # 40 text tokens fill two blocks and half of the third; the image starts in the third.
    assert shared_prefix_tokens(same_a, other) == 32


def test_an_image_is_not_a_segment_of_the_same_number():
    a = ChainBuilder(BS)
    a.extend_image(5, 40)
    b = ChainBuilder(BS)
    b.extend_segment(5, 40)
    assert shared_prefix_tokens(a.chain(), b.chain()) == 0


@pytest.mark.parametrize(
    ("w", "h", "tokens"),
    [(1280, 800, 1260), (1280, 720, 1196), (640, 400, 322), (1920, 1080, 1222), (28, 28, 4)],
)
def test_grid_tokens_follow_qwen2_vl_resizing(w, h, tokens):
    assert grid_tokens(w, h) == tokens


def test_grid_tokens_with_other_patches():
    # No clamping at 448 x 448: 16 x 16 patches of 14 pixels, merged 2 x 2.
    assert grid_tokens(448, 448, max_pixels=10**7) == 256
    assert grid_tokens(448, 448, merge=1, max_pixels=10**7) == 1024


def test_a_turn_refuses_images_that_overlap_or_overrun():
    chain = _prompt(40, 7, 50, 30).chain()
    Turn(chain, 4, images=(Image(40, 50, 64, 64, 7),))
    with pytest.raises(ValueError, match="past the prompt"):
        Turn(chain, 4, images=(Image(100, 50, 64, 64, 7),))
    with pytest.raises(ValueError, match="overlaps"):
        Turn(chain, 4, images=(Image(40, 20, 64, 64, 7), Image(50, 10, 64, 64, 8)))
    with pytest.raises(ValueError, match="tokens > 0"):
        Image(0, 0, 64, 64, 1)


def _session() -> Session:
    b = ChainBuilder(BS)
    turns = []
    images: list[Image] = []
    b.extend_segment(1, 100)
    for step in range(4):
        images.append(Image(b.num_tokens, 40, 320, 200, 1000 + step))
        b.extend_image(1000 + step, 40)
        b.extend_segment(10 + step, 12)
        turns.append(Turn(b.chain(), 8, gap=0.5 if step else 0.0, images=tuple(images)))
    return Session("cu", tuple(turns))


def test_images_round_trip_and_are_delta_encoded(tmp_path: Path):
    w = Workload((_session(),), BS)
    assert w.has_images and w.sessions[0].turns[3].image_tokens == 160
    path = tmp_path / "w.jsonl"
    wformat.save(w, path)
    back = wformat.load(path)
    assert back.sessions == w.sessions
    line = json.loads(path.read_text().splitlines()[1])
    assert [t.get("images_keep", 0) for t in line["turns"]] == [0, 1, 2, 3]
    assert all(len(t["images"]) == 1 for t in line["turns"])
    schema = json.loads(wformat.SCHEMA_PATH.read_text())
    defs = schema["$defs"]
    jsonschema.validate(line, {**defs["Session"], "$defs": defs})


def test_a_bad_image_names_file_line_and_turn(tmp_path: Path):
    head = '{"format": "kvharness-workload", "version": 1, "block_size": 4}'
    bad_keep = (
        '{"id": "a", "turns": [{"tokens": 8, "hashes": [1, 2], "output": 1, "images_keep": 1}]}'
    )
    overrun = (
        '{"id": "a", "turns": [{"tokens": 8, "hashes": [1, 2], "output": 1, "images":'
        ' [{"offset": 6, "tokens": 4, "width": 8, "height": 8, "hash": 3}]}]}'
    )
    for text, why in [
        (bad_keep, "session 'a' turn 0: images_keep=1 but the previous turn has 0 images"),
        (overrun, "session 'a' turn 0: an image ends at token 10, past the prompt's 8 tokens"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(head + "\n" + text + "\n")
        with pytest.raises(FormatError) as info:
            wformat.load(path)
        assert str(info.value) == f"{path}:2: {why}"


def test_tile_grid_follows_idefics3_resizing():
    from kvharness.workload.images import tile_grid

    assert tile_grid(1280, 800, longest=2048, tile=512) == (3, 4)  # 2048 x 1280
    assert tile_grid(800, 1280, longest=2048, tile=512) == (4, 3)
    assert tile_grid(100, 100, longest=2048, tile=512) == (4, 4)  # scaled up
    assert tile_grid(300, 200, longest=512, tile=512) == (0, 0)  # one tile: the global view
    assert tile_grid(8000, 100, longest=8192, tile=512) == (1, 8)  # capped at 4096 x 51
