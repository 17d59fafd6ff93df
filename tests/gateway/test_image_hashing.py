"""Chat prompts with images, hashed as vLLM's prefix cache keys them: placeholder tokens from the
model's preprocessor config, blocks touched by an image keyed by the image's name, images named
by the gateway (or the client's uuid) and forwarded with that name, and engine events renamed to
the gateway's hashes through their extra keys."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kvharness.engine.events import BlockStored
from kvharness.gateway.config import GatewayConfig
from kvharness.gateway.hash_translator import HashTranslator
from kvharness.gateway.images import (
    HeldImages,
    ImageError,
    PlacedImage,
    Qwen2VLImages,
    block_image_keys,
    decode_data_url,
    image_chain_hashes,
    image_size,
    load_image_expander,
)
from kvharness.gateway.kv_events import DecodeError, decode_batch
from kvharness.gateway.metrics import GatewayMetrics
from kvharness.gateway.pipeline import Pipeline, Prepared
from kvharness.gateway.prompt_hasher import PromptHasher
from kvharness.gateway.replicas import Replicas
from kvharness.gateway.requests import BadRequest
from kvharness.gateway.router import Router
from kvharness.gateway.tokenizer import ChatTemplate, EngineTokenizer, load_engine_tokenizer
from kvharness.routing.base import ReplicaState
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy
from kvharness.testing.tiny_vlm import IMAGE_TOKEN, image_tokens, token_id
from kvharness.workload.chain import chain_hashes

PIL = pytest.importorskip("PIL.Image")

BS = 16
SYSTEM = "You are a computer-use agent. Click what the task needs. " * 4


# --- factories -----------------------------------------------------------------------------


def png(width: int, height: int, seed: int = 0) -> bytes:
    out = io.BytesIO()
    PIL.new("RGB", (width, height), (seed % 256, 40, 90)).save(out, "PNG")
    return out.getvalue()


def jpeg(width: int, height: int, orientation: int | None = None) -> bytes:
    im = PIL.new("RGB", (width, height), (200, 10, 10))
    out = io.BytesIO()
    if orientation is None:
        im.save(out, "JPEG")
    else:
        exif = PIL.Exif()
        exif[0x0112] = orientation
        im.save(out, "JPEG", exif=exif.tobytes())
    return out.getvalue()


def data_url(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def image_part(data: bytes | str, uuid: str | None = None) -> dict[str, Any]:
    url = data if isinstance(data, str) else data_url(data)
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    if uuid is not None:
        part["uuid"] = uuid
    return part


def chat(*contents: list[Any] | str) -> dict[str, Any]:
    """A system prompt, then one user message per content given (strings in a list of parts
    become text parts)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for c in contents:
        if isinstance(c, list):
            c = [{"type": "text", "text": p} if isinstance(p, str) else p for p in c]
        msgs.append({"role": "user", "content": c})
    return {"model": "tiny-idefics3", "messages": msgs, "max_tokens": 4}


def pipeline(tok: EngineTokenizer, **config: object) -> Pipeline:
    cfg = GatewayConfig(backends=("http://127.0.0.1:9",), block_size=BS, **config)  # type: ignore[arg-type]
    states = [ReplicaState(u, capacity_blocks=10_000, block_size=BS) for u in cfg.backends]
    router = Router(make_policy("round_robin"), states, PrefixIndex(1))
    return Pipeline(cfg, router, Replicas(cfg, router, tok), GatewayMetrics(), tok)


def prepare(p: Pipeline, body: dict[str, Any], sid: str | None = None) -> Prepared:
    return p.prepare(json.dumps(body).encode(), "chat", sid)


def first_diff(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


@pytest.fixture(scope="module")
def vlm(tiny_vlm_dir: Path) -> EngineTokenizer:
    return load_engine_tokenizer(tiny_vlm_dir)


# --- reading images ------------------------------------------------------------------------


@pytest.mark.parametrize(("w", "h"), [(1, 1), (640, 400), (1280, 800), (33, 4097)])
def test_png_and_jpeg_sizes_come_from_their_headers(w: int, h: int) -> None:
    assert image_size(png(w, h)) == (w, h)
    assert image_size(jpeg(w, h)) == (w, h)


def test_exif_orientation_turns_the_size_as_the_engine_does() -> None:
    for orientation, turned in ((1, False), (3, False), (6, True), (8, True)):
        data = jpeg(300, 100, orientation)
        with PIL.open(io.BytesIO(data)) as im:
            from PIL import ImageOps

            assert ImageOps.exif_transpose(im).size == image_size(data)  # what vLLM decodes
        assert image_size(data) == ((100, 300) if turned else (300, 100))


def test_other_formats_are_not_read_and_broken_headers_are_errors() -> None:
    gif = io.BytesIO()
    PIL.new("RGB", (5, 7)).save(gif, "GIF")
    assert image_size(gif.getvalue()) is None
    good = png(20, 10)
    for broken in (
        good[:20],
        good[:16] + b"\0" * 8 + good[24:],
        jpeg(20, 10)[:30],
        b"\xff\xd8\xff",
    ):
        with pytest.raises(ImageError, match="broken"):
            image_size(broken)
    for url, why in (
        ("data:image/png;base64", "','"),
        ("data:image/png," + "x" * 8, "base64"),
        ("data:image/png;base64,!!!!", "bad base64"),
        ("data:image/png;base64,", "empty"),
    ):
        with pytest.raises(ImageError, match=why):
            decode_data_url(url)


# --- placeholder tokens ------------------------------------------------------------------


def test_idefics3_placeholders_follow_the_preprocessor_config(vlm: EngineTokenizer) -> None:
    assert vlm.images is not None and vlm.images.target_id == token_id(IMAGE_TOKEN)
    sizes = [(640, 400), (1280, 800), (100, 100), (512, 512), (513, 100), (3000, 200),
             (200, 3000), (2048, 1), (5000, 4000), (1023, 1025)]  # fmt: skip
    for w, h in sizes:
        assert len(vlm.images.tokens(w, h)) == image_tokens(w, h), (w, h)
    # A 640x400 image is resized to 2048x1280: 3 x 4 tiles and a global view, 64 tokens each.
    assert vlm.images.tokens(640, 400).count(token_id(IMAGE_TOKEN)) == 13 * 64


def test_qwen2_vl_placeholders_follow_the_preprocessor_config(tmp_path: Path) -> None:
    config: dict[str, Any] = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14,
                              "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056}  # fmt: skip
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    exp = load_image_expander(tmp_path, {"<|image_pad|>": 151655}, lambda s: [])
    assert isinstance(exp, Qwen2VLImages)
    assert exp.tokens(1280, 800) == (151655,) * (46 * 29)  # resized to 1288 x 812
    # Newer configs give the bounds as size; fewer max pixels, fewer tokens.
    config = {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 14,
              "merge_size": 2, "size": {"shortest_edge": 3136, "longest_edge": 28 * 28 * 256}}  # fmt: skip
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    small = load_image_expander(tmp_path, {"<|image_pad|>": 5}, lambda s: [])
    assert small is not None and len(small.tokens(1280, 800)) <= 256
    (tmp_path / "preprocessor_config.json").write_text('{"image_processor_type": "Other"}')
    assert load_image_expander(tmp_path, {"<|image_pad|>": 5}, lambda s: []) is None


def test_content_format_is_detected_as_vllm_does(
    vlm: EngineTokenizer, tiny_model_dir: Path
) -> None:
    assert vlm.template is not None and vlm.template.takes_parts
    text = load_engine_tokenizer(tiny_model_dir).template
    assert text is not None and not text.takes_parts
    via_set = "{% for m in messages %}{% set c = m.content %}{% for p in c %}{{ p.text }}{% endfor %}{% endfor %}"
    assert ChatTemplate(via_set).takes_parts


# --- hashing -------------------------------------------------------------------------------


def test_hashes_change_at_the_first_block_touching_a_different_image(vlm: EngineTokenizer) -> None:
    p = pipeline(vlm)
    a = prepare(p, chat(["Look:", image_part(png(640, 400, 1)), "Now click."])).hashed
    b = prepare(p, chat(["Look:", image_part(png(640, 400, 2)), "Now click."])).hashed
    again = prepare(pipeline(vlm), chat(["Look:", image_part(png(640, 400, 1)), "Now click."]))
    assert again.hashed.block_hashes == a.block_hashes  # same image, same hashes
    (im,) = a.images
    assert im.length == image_tokens(640, 400) and a.num_tokens == b.num_tokens
    assert vlm.images is not None
    assert list(a.token_ids[im.offset : im.offset + im.length]) == list(vlm.images.tokens(640, 400))
    assert first_diff(a.block_hashes, b.block_hashes) == im.offset // BS
    # Before the image, the blocks are the text's own.
    text_only = chain_hashes(list(a.token_ids[: im.offset]), BS)
    assert a.block_hashes[: im.offset // BS] == tuple(text_only)


def test_same_image_at_another_offset_in_a_block_is_another_block(vlm: EngineTokenizer) -> None:
    ids = list(range(64))
    one = image_chain_hashes(ids, BS, [PlacedImage("x", 20, 30)])
    two = image_chain_hashes(ids, BS, [PlacedImage("x", 21, 29)])
    assert one[0] == two[0] and one[1] != two[1]
    assert block_image_keys([PlacedImage("x", 20, 30)], 32, 48) == [("x", -12)]
    assert image_chain_hashes(ids, BS, []) == chain_hashes(ids, BS)


def test_incremental_image_turns_equal_full_hashing_and_stop_at_a_changed_image(
    vlm: EngineTokenizer,
) -> None:
    p = pipeline(vlm, verify_hashing_every=1)
    shots = [png(640, 400, k) for k in range(4)]
    history: list[Any] = []
    last: Any = None
    for k, shot in enumerate(shots):
        history += [[f"Step {k}: what do you see?", image_part(shot)], f"I see screen {k}."]
        body = chat(*history[:-1])
        got = prepare(p, body, "s").hashed
        full = prepare(pipeline(vlm), body).hashed
        assert got.block_hashes == full.block_hashes and list(got.token_ids) == list(full.token_ids)
        assert len(got.images) == k + 1
        if last is not None:  # an agent's next turn extends its last prompt
            assert got.reused_tokens > 0
            assert got.block_hashes[: len(last.block_hashes) - 2] == last.block_hashes[:-2]
        last = got
    assert p.hasher.stats.mismatches == 0
    # The same texts with the second screenshot replaced: the session's hashes change at the
    # first block it touches, though the rendered text is the same as before.
    swapped = [list(m) if isinstance(m, list) else m for m in history[:-1]]
    swapped[2] = ["Step 1: what do you see?", image_part(png(640, 400, 99))]
    got = prepare(p, chat(*swapped), "s").hashed
    full = prepare(pipeline(vlm), chat(*swapped)).hashed
    assert got.block_hashes == full.block_hashes
    assert first_diff(got.block_hashes, last.block_hashes) == last.images[1].offset // BS


def test_an_unread_image_stops_the_credit_at_its_first_block(vlm: EngineTokenizer) -> None:
    p = pipeline(vlm)
    remote = prepare(p, chat(["Look:", image_part("https://example.com/a.png"), "then"]))
    gif = io.BytesIO()
    PIL.new("RGB", (64, 64)).save(gif, "GIF")
    local = prepare(p, chat(["Look:", image_part(data_url(gif.getvalue(), "gif")), "then"]))
    for prep in (remote, local):
        start = prep.hashed.token_ids.index(token_id(IMAGE_TOKEN))
        assert len(prep.hashed.block_hashes) == start // BS and prep.hashed.images == ()
    assert remote.image_body is None  # a URL is not named: what it points at may change


def test_a_string_content_template_gets_placeholders_before_the_text(
    vlm: EngineTokenizer, tiny_vlm_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "t.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    tok = load_engine_tokenizer(tiny_vlm_dir, tmp_path / "t.jinja")
    assert tok.template is not None and not tok.template.takes_parts
    prep = prepare(pipeline(tok), chat(["Look:", image_part(png(64, 64)), "", "then"]))
    text = vlm.encode_ids(f"[{SYSTEM}][")
    (im,) = prep.hashed.images
    assert list(prep.hashed.token_ids[: im.offset]) == text
    assert list(prep.hashed.token_ids[im.offset + im.length :]) == vlm.encode_ids("\nLook:\nthen]")


# --- naming and forwarding ---------------------------------------------------------------


def test_the_gateway_names_images_in_the_forwarded_body_and_keeps_the_clients_uuid(
    vlm: EngineTokenizer,
) -> None:
    p = pipeline(vlm)
    body = chat(["Look:", image_part(png(64, 64, 1)), image_part(png(64, 64, 2), uuid="mine")])
    prep = prepare(p, body)
    a, b = prep.hashed.images
    assert a.name.startswith("kvh-") and b.name == "mine"
    assert prep.image_body is not None
    sent = json.loads(prep.image_body.render()[0])
    parts = sent["messages"][1]["content"]
    assert parts[1]["uuid"] == a.name and parts[2]["uuid"] == "mine"
    # Only the uuid was added: the rest is the client's body.
    parts[1].pop("uuid")
    assert sent == body
    named = chat(["Look:", image_part(png(64, 64, 1), uuid="u1")])
    assert prepare(p, named).image_body is not None  # nothing to add, but it can go by name
    assert prepare(pipeline(vlm, held_images=0), named).image_body is None  # nothing to change
    unnamed = prepare(pipeline(vlm, name_images=False), body).image_body
    assert unnamed is not None and [n for n, _, _ in unnamed.images] == ["mine"]
    assert json.loads(unnamed.render()[0]) == body


def test_images_the_replica_holds_go_by_name_alone(vlm: EngineTokenizer) -> None:
    body = chat(
        ["Look:", image_part(png(64, 64, 1)), "and", image_part(png(64, 64, 2), uuid="mine")],
        "no images here",
        [image_part(png(32, 32, 3)), "last"],
    )
    body["stream"] = True
    prep = prepare(pipeline(vlm), body)
    assert prep.image_body is not None
    a, mine, c = (name for name, _, _ in prep.image_body.images)
    assert mine == "mine"
    sent, by_name = prep.image_body.render({a, c, "other"})
    assert by_name == (a, c)
    got = json.loads(sent)
    want = json.loads(prep.image_body.render()[0])
    for i, j, name in ((1, 1, a), (3, 0, c)):
        assert got["messages"][i]["content"][j] == {"type": "image_url", "image_url": None,
                                                    "uuid": name}  # fmt: skip
        got["messages"][i]["content"][j] = want["messages"][i]["content"][j]
    assert got == want  # the rest as whole


def test_held_images_are_the_last_sent_and_halve_when_refused() -> None:
    held = HeldImages(3)
    held.sent(0, ["a", "b"])
    held.sent(0, ["c", "a", "d"])  # a used again: b is the least recent, and goes
    assert [n for n in "abcd" if n in held.held(0)] == ["a", "c", "d"]
    assert "a" not in held.held(1)
    held.refused(0)  # held 3: now nothing, and at most 1
    assert "a" not in held.held(0) and held.limit(0) == 1 and held.limit(1) == 3
    held.sent(0, ["x", "y"])
    assert [n for n in "xy" if n in held.held(0)] == ["y"]
    held.refused(0)  # held 1: now none at all
    held.sent(0, ["z"])
    assert "z" not in held.held(0)
    held.sent(1, ["z"])  # the other replica is not affected
    assert "z" in held.held(1)
    assert "z" not in HeldImages(0).held(0)
    with pytest.raises(ValueError, match="capacity >= 0"):
        HeldImages(-1)


def test_large_bodies_are_named_like_small_ones(vlm: EngineTokenizer) -> None:
    big = png(900, 700, 5) + b"\0" * (1 << 21)  # trailing bytes past IEND: still that PNG
    body = chat(["x " * 2000, image_part(big)])
    prep = prepare(pipeline(vlm), body)  # over the slice size: decoded in slices
    assert prep.image_body is not None
    assert json.loads(prep.image_body.render()[0])["messages"][1]["content"][1]["uuid"]
    assert prep.hashed.images[0].length == image_tokens(900, 700)


@pytest.mark.parametrize(
    ("part", "why"),
    [
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}, "bad base64"),
        ({"type": "image_url", "image_url": {"url": data_url(png(9, 9)[:20])}}, "broken PNG"),
        ({"type": "image_url", "image_url": {}}, r"image_url\.url must be a string"),
        ({"type": "image_url", "image_url": "x", "uuid": 3}, "must be a string"),
    ],
)
def test_bad_image_data_is_a_bad_request_with_its_reason(
    vlm: EngineTokenizer, part: dict[str, Any], why: str
) -> None:
    with pytest.raises(BadRequest, match=why):
        prepare(pipeline(vlm), chat(["Look:", part]))


# --- engine events -----------------------------------------------------------------------


def engine_stores(hashed: Any, first_hash: int) -> BlockStored:
    """What vLLM would publish for the prompt's full blocks, its images named by the uuids the
    gateway forwarded: per block, the ``(name, offset)`` of each image it touches."""
    n = len(hashed.block_hashes)
    keys = []
    for i in range(n):
        k = block_image_keys(hashed.images, i * BS, (i + 1) * BS)
        keys.append(tuple(k) if k else None)
    return BlockStored(
        tuple(range(first_hash, first_hash + n)), None,
        tuple(hashed.token_ids[: n * BS]), BS, "GPU", tuple(keys),
    )  # fmt: skip


def test_translated_image_blocks_are_the_gateways_hashes(vlm: EngineTokenizer) -> None:
    p = pipeline(vlm)
    a = prepare(p, chat(["Look:", image_part(png(640, 400, 1)), "ok"])).hashed
    b = prepare(p, chat(["Look:", image_part(png(640, 400, 2)), "ok"])).hashed
    t = HashTranslator()
    ta, tb = t.translate(engine_stores(a, 1000)), t.translate(engine_stores(b, 5000))
    assert isinstance(ta, BlockStored) and isinstance(tb, BlockStored)
    assert ta.block_hashes == a.block_hashes and tb.block_hashes == b.block_hashes
    k = a.images[0].offset // BS
    assert ta.block_hashes[:k] == tb.block_hashes[:k]
    assert not set(ta.block_hashes[k:]) & set(tb.block_hashes[k:])
    # Without extra keys both images' placeholder blocks would be one block.
    bare = HashTranslator()
    sa = bare.translate(dataclasses.replace(engine_stores(a, 1), extra_keys=None))
    sb = bare.translate(dataclasses.replace(engine_stores(b, 2000), extra_keys=None))
    assert isinstance(sa, BlockStored) and isinstance(sb, BlockStored)
    assert sa.block_hashes == sb.block_hashes and sa.block_hashes[k:] != a.block_hashes[k:]


def test_recovery_learns_image_blocks_by_their_keys(vlm: EngineTokenizer) -> None:
    a = prepare(pipeline(vlm), chat(["Look:", image_part(png(640, 400, 1)), "ok"])).hashed
    store = engine_stores(a, 100)
    k = a.images[0].offset // BS + 2  # a block of placeholders only
    t = HashTranslator(recovery_stores=50)
    t.start_recovery()
    t.learn_route(a.block_hashes, a.token_ids, BS, a.images)
    late = BlockStored(store.block_hashes[k:], store.block_hashes[k - 1],
                       store.token_ids[k * BS :], BS, "GPU", store.extra_keys[k:])  # type: ignore[index]  # fmt: skip
    got = t.translate(late)
    assert isinstance(got, BlockStored) and got.block_hashes == a.block_hashes[k:]


def test_kv_event_extra_keys_are_decoded_in_both_layouts() -> None:
    keys = [None, [["img-1", 83]], [["img-1", -45], "salt"]]
    stored = {"type": "BlockStored", "block_hashes": [1, 2, 3], "parent_block_hash": None,
              "token_ids": list(range(12)), "block_size": 4, "lora_id": None, "medium": "GPU",
              "lora_name": None, "extra_keys": keys}  # fmt: skip
    (ev,) = decode_batch(msgspec.msgpack.encode([1.0, [stored], 0])).events
    assert isinstance(ev, BlockStored)
    assert ev.extra_keys == (None, (("img-1", 83),), (("img-1", -45), "salt"))
    array = ["BlockStored", [1, 2, 3], None, list(range(12)), 4, None, "GPU", None, keys]
    (ev2,) = decode_batch(msgspec.msgpack.encode([1.0, [array], 0])).events
    assert ev2 == ev
    old = ["BlockStored", [1], None, list(range(4)), 4, None, None]
    (ev3,) = decode_batch(msgspec.msgpack.encode([1.0, [old], 0])).events
    assert isinstance(ev3, BlockStored) and ev3.extra_keys is None
    for bad in ([None], "x", [None, None, [["a", "b"]]], [None, None, 5]):
        with pytest.raises(DecodeError):
            decode_batch(msgspec.msgpack.encode([1.0, [{**stored, "extra_keys": bad}], 0]))


def test_prompt_hasher_keeps_sessions_with_different_images_apart(vlm: EngineTokenizer) -> None:
    p = pipeline(vlm)
    a = prepare(p, chat(["Look:", image_part(png(64, 64, 1))])).hashed
    b = prepare(p, chat(["Look:", image_part(png(64, 64, 2))])).hashed
    assert a.session != b.session and a.block_hashes != b.block_hashes
    assert isinstance(p.hasher, PromptHasher)


def test_a_request_with_images_gives_every_list_content_as_parts(vlm: EngineTokenizer) -> None:
    """vLLM passes a parts-taking template every message's parts, text-only ones too (not
    joined by newlines), except a tool result without media, which it joins."""
    body = chat(["Look:", image_part(png(64, 64))])
    body["messages"][0]["content"] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    body["messages"].append(
        {"role": "tool", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}
    )
    prep = prepare(pipeline(vlm), body)
    expect = vlm.encode_ids("<|im_start|>system:ab<end_of_utterance>\n")
    assert list(prep.hashed.token_ids[: len(expect)]) == expect
    tail = vlm.encode_ids("<|im_start|>tool:x\ny<end_of_utterance>\n<|im_start|>assistant:")
    assert list(prep.hashed.token_ids[-len(tail) :]) == tail
