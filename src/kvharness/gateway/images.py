"""Images in chat prompts, seen as the engine sees them: their names, sizes and placeholder tokens.

The engine's view
    vLLM renders the chat template with one image token per image part (``<image>``,
    ``<|image_pad|>``...), tokenises, then replaces each such token by the image's placeholder
    tokens, whose number follows from the image's pixel size and the model's
    ``preprocessor_config.json``. Different images give the *same* placeholder ids, so vLLM's
    prefix cache mixes ``("mm", identifier, offset)`` into the hash of every block the
    placeholders touch, ``offset`` being where the image starts relative to the block's start
    (negative for an image begun in an earlier block), and its ``BlockStored`` events carry
    these as ``extra_keys``: per block, ``(identifier, offset)`` pairs.

Naming images
    The identifier is vLLM's own hash of the decoded image, unless the content part carries a
    ``uuid`` (and the request no per-request processor or media options): then it is the uuid.
    The gateway names each image itself, by the client's uuid when it sent one, else by a hash
    of the image's bytes, and puts that name in the forwarded part's ``uuid``
    (:attr:`ChatImages.gateway_named`), so the engine's events name image blocks as the gateway
    does and :class:`~kvharness.gateway.hash_translator.HashTranslator` can rename them.

What the gateway cannot size
    Only ``data:`` URLs of PNG or JPEG images are read (their header: the pixel size, EXIF
    orientation applied as vLLM applies it). Images behind ``http(s)`` URLs are not fetched, and
    other formats are not parsed: such an image is forwarded unnamed (a URL's content may change,
    so its name cannot stand for it) and routing credits only the blocks before it. Prompts with
    audio, video or embedding parts, or for a model whose image processor is not known here
    (:func:`load_image_expander`), get no prefix credit at all. Data that claims to be an image
    and is not (a malformed data URL, bad base64, a broken PNG/JPEG header) is the client's error.

Hashing
    :func:`image_chain_hashes` names blocks as :func:`kvharness.workload.chain.chain_hashes`
    does, except that a block touched by images also covers each image's ``(name, offset)``,
    exactly the keys vLLM mixes in, so an engine block translates to the gateway's name of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from kvharness.workload.chain import ROOT_HASH, digest, token_bytes
from kvharness.workload.images import grid_tokens, tile_grid

__all__ = [
    "IMAGE_PART_TYPES",
    "MEDIA_PART_TYPES",
    "ChatImages",
    "HeldImages",
    "Idefics3Images",
    "ImageError",
    "ImageExpander",
    "ImageInput",
    "PlacedImage",
    "Qwen2VLImages",
    "block_image_keys",
    "decode_data_url",
    "image_block_hash",
    "image_chain_hashes",
    "image_name",
    "image_size",
    "load_image_expander",
    "prepare_chat_images",
]

IMAGE_PART_TYPES = frozenset({"image_url", "input_image"})
"""Content part types that carry an image by URL (vLLM's ``image_url`` and Responses-style
``input_image``)."""
MEDIA_PART_TYPES = {
    "image_url": "image", "input_image": "image", "image_pil": "image", "image_embeds": "image",
    "audio_url": "audio", "input_audio": "audio", "audio_embeds": "audio",
    "video_url": "video", "video_embeds": "video",
}  # fmt: skip
"""Content part types vLLM reads as media, and the modality each is given to a template."""
_KNOWN_PART_FIELDS = frozenset(
    {
        "type", "text", "image_url", "uuid", "image_embeds", "image_pil", "audio_url",
        "input_audio", "audio_embeds", "video_url", "video_embeds", "file", "data", "name",
        "refusal", "thinking", "closed", "prompt_cache_breakpoint",
    }
)  # fmt: skip
"""Part fields vLLM does not pass to a template that takes content parts (the rest it does)."""
_NAME_PREFIX = "kvh-"


class ImageError(ValueError):
    """Image data the engine cannot read either: the message says why (a 400 for the client)."""


# --- reading images ------------------------------------------------------------------------


def decode_data_url(url: str) -> bytes:
    """The bytes of a ``data:[<type>][;...];base64,<data>`` URL (as vLLM accepts them: base64
    only, no whitespace in the data). Raises :class:`ImageError`."""
    spec, sep, data = url[5:].partition(",")
    if not sep:
        raise ImageError("a data URL needs a ',' before its data")
    if spec.rpartition(";")[2] != "base64":
        raise ImageError("only base64 data URLs are accepted")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ImageError(f"bad base64 data ({err})") from None
    if not raw:
        raise ImageError("the image data is empty")
    return raw


def image_name(data: bytes) -> str:
    """The gateway's name of an image of these bytes (equal bytes, equal names)."""
    return _NAME_PREFIX + hashlib.blake2b(data, digest_size=16).hexdigest()


_PNG = b"\x89PNG\r\n\x1a\n"
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_TRANSPOSED = frozenset({5, 6, 7, 8})
"""EXIF orientations that turn an image by a quarter (PIL's ``exif_transpose`` swaps its sides)."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels of PNG or JPEG ``data`` as the engine decodes it (EXIF
    orientation applied); None for other formats (not read here). Reads headers only. Raises
    :class:`ImageError` when the data starts as a PNG or JPEG and its header is broken."""
    if data.startswith(_PNG):
        return _png_size(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    return None


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 33 or data[12:16] != b"IHDR" or int.from_bytes(data[8:12], "big") != 13:
        raise ImageError("broken PNG: no IHDR chunk")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if not width or not height:
        raise ImageError(f"broken PNG: size {width}x{height}")
    pos = 33
    while pos + 8 <= len(data):  # an eXIf chunk before the pixels may turn the image
        size, kind = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        if kind == b"eXIf" and _orientation(data[pos + 8 : pos + 8 + size]) in _TRANSPOSED:
            return height, width
        pos += 12 + size
    return width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    pos, n = 2, len(data)
    turned = False
    while True:
        while pos < n and data[pos] == 0xFF:
            pos += 1  # fill bytes before a marker
        if pos >= n or data[pos - 1] != 0xFF:
            raise ImageError("broken JPEG: no frame header before the end of the data")
        marker = data[pos]
        pos += 1
        if marker in (0x01, *range(0xD0, 0xD8)):
            continue  # markers without a segment
        if marker in (0xD9, 0xDA):
            raise ImageError("broken JPEG: no frame header before the image data")
        if pos + 2 > n:
            raise ImageError("broken JPEG: cut in a segment header")
        length = int.from_bytes(data[pos : pos + 2], "big")
        if length < 2 or pos + length > n:
            raise ImageError("broken JPEG: a segment runs past the end of the data")
        body = data[pos + 2 : pos + length]
        if marker == 0xE1 and body.startswith(b"Exif\x00\x00") and not turned:
            turned = _orientation(body[6:]) in _TRANSPOSED
        elif marker in _SOF:
            if len(body) < 5:
                raise ImageError("broken JPEG: short frame header")
            height, width = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
            if not width or not height:
                raise ImageError(f"broken JPEG: size {width}x{height}")
            return (height, width) if turned else (width, height)
        pos += length


def _orientation(tiff: bytes) -> int | None:
    """The EXIF orientation tag (0x0112) of IFD0 in TIFF-structured ``tiff``, None if absent or
    unreadable (PIL ignores a broken EXIF block too)."""
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return None
    ifd = int.from_bytes(tiff[4:8], order)  # type: ignore[arg-type]
    if ifd + 2 > len(tiff):
        return None
    count = int.from_bytes(tiff[ifd : ifd + 2], order)  # type: ignore[arg-type]
    for k in range(count):
        entry = tiff[ifd + 2 + 12 * k : ifd + 14 + 12 * k]
        if len(entry) < 12:
            return None
        if int.from_bytes(entry[:2], order) == 0x0112:  # type: ignore[arg-type]
            return int.from_bytes(entry[8:10], order)  # type: ignore[arg-type]
    return None


# --- placeholder tokens per model ----------------------------------------------------------


class ImageExpander(Protocol):
    """How one model's processor turns an image into prompt tokens."""

    @property
    def target_id(self) -> int:
        """The token the chat template writes once per image, which the processor replaces."""
        ...

    @property
    def placeholder(self) -> str:
        """What vLLM writes for an image into a template that takes string contents."""
        ...

    def tokens(self, width: int, height: int) -> tuple[int, ...]:
        """The token ids that replace :attr:`target_id` for an image of this pixel size: the
        engine's placeholder range of it (every block they touch is keyed by the image)."""
        ...


class Qwen2VLImages:
    """Qwen2-VL / Qwen2.5-VL: ``<|image_pad|>`` becomes :func:`~kvharness.workload.images.
    grid_tokens` copies of itself (the template wraps it in vision start/end tokens)."""

    placeholder = "<|vision_start|><|image_pad|><|vision_end|>"

    def __init__(
        self, target_id: int, *, patch: int, merge: int, min_pixels: int, max_pixels: int
    ) -> None:
        self.target_id = target_id
        self.patch, self.merge = patch, merge
        self.min_pixels, self.max_pixels = min_pixels, max_pixels

    def tokens(self, width: int, height: int) -> tuple[int, ...]:
        try:
            n = grid_tokens(
                width, height, patch=self.patch, merge=self.merge,
                min_pixels=self.min_pixels, max_pixels=self.max_pixels,
            )  # fmt: skip
        except ValueError as err:
            raise ImageError(str(err)) from None
        return (self.target_id,) * n


_IDEFICS3_MAX_SIDE = 4096
"""Idefics3's processor bounds a resized side by this (pixels)."""


class Idefics3Images:
    """Idefics3 / SmolVLM: ``<image>`` becomes the image's tiles and its global view.

    The image is resized so that its longer side is ``longest_edge`` (up or down; the shorter
    keeps the aspect ratio, rounded up to even, both then bounded by 4096), cut into ``tile``-pixel
    tiles (``rows x cols``, sides rounded up) when splitting is on and it does not fit in one;
    each tile writes ``<fake_token_around_image><row_r_col_c>`` and ``seq_len`` ``<image>``, each
    row ends with a newline, then come a newline and the global view,
    ``<fake_token_around_image><global-img>`` and ``seq_len`` ``<image>``, and a closing
    ``<fake_token_around_image>``. That text is tokenised as a whole (two newlines may be one
    token), as vLLM does.
    """

    placeholder = "<image>"

    def __init__(
        self,
        encode: Callable[[str], Sequence[int]],
        target_id: int,
        *,
        longest_edge: int,
        tile: int,
        seq_len: int,
        split: bool = True,
    ) -> None:
        self.target_id = target_id
        self._encode = encode
        self.longest_edge, self.tile, self.seq_len, self.split = longest_edge, tile, seq_len, split
        self._by_grid: dict[tuple[int, int], tuple[int, ...]] = {}

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """``(rows, cols)`` of tiles, ``(0, 0)`` for the global view alone."""
        if width <= 0 or height <= 0:
            raise ImageError(f"image size must be positive, got {width}x{height}")
        if not self.split:
            return 0, 0
        return tile_grid(width, height, longest=self.longest_edge, tile=self.tile,
                         max_side=_IDEFICS3_MAX_SIDE)  # fmt: skip

    def tokens(self, width: int, height: int) -> tuple[int, ...]:
        key = self.grid(width, height)
        got = self._by_grid.get(key)
        if got is None:
            got = self._by_grid[key] = tuple(self._encode(self._text(*key)))
        return got

    def _text(self, rows: int, cols: int) -> str:
        image = "<image>" * self.seq_len
        fake = "<fake_token_around_image>"
        tiles = "".join(
            "".join(f"{fake}<row_{r}_col_{c}>{image}" for c in range(1, cols + 1)) + "\n"
            for r in range(1, rows + 1)
        )
        glob = f"{fake}<global-img>{image}{fake}"
        return f"{tiles}\n{glob}" if rows else glob


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_image_expander(
    folder: Path,
    added: Mapping[str, int],
    encode: Callable[[str], Sequence[int]],
) -> ImageExpander | None:
    """The image expander of the model in ``folder`` (its ``preprocessor_config.json``), None
    when it has none or its image processor is not one known here (Idefics3 / SmolVLM,
    Qwen2-VL / Qwen2.5-VL). ``added`` maps the tokenizer's added tokens to their ids;
    ``encode`` tokenises text without special tokens added."""
    pre = _read_json(folder / "preprocessor_config.json")
    kind = str(pre.get("image_processor_type", ""))
    for suffix in ("Fast", "Pil"):
        kind = kind.removesuffix(suffix)
    size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
    assert isinstance(size, dict)
    if kind == "Qwen2VLImageProcessor" and "<|image_pad|>" in added:
        return Qwen2VLImages(
            added["<|image_pad|>"],
            patch=int(pre.get("patch_size", 14)),
            merge=int(pre.get("merge_size", 2)),
            min_pixels=int(pre.get("min_pixels") or size.get("shortest_edge") or 56 * 56),
            max_pixels=int(pre.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280),
        )
    needed = ("<image>", "<fake_token_around_image>", "<global-img>")
    if kind == "Idefics3ImageProcessor" and all(t in added for t in needed):
        max_size = pre.get("max_image_size")
        tile = max_size.get("longest_edge", 364) if isinstance(max_size, dict) else 364
        seq_len = _read_json(folder / "processor_config.json").get("image_seq_len")
        if not isinstance(seq_len, int):
            config = _read_json(folder / "config.json")
            vision = config.get("vision_config", {})
            side = int(vision.get("image_size", tile)) // int(vision.get("patch_size", 14))
            seq_len = side * side // int(config.get("scale_factor", 2)) ** 2
        return Idefics3Images(
            encode,
            added["<image>"],
            longest_edge=int(size.get("longest_edge", 4 * tile)),
            tile=int(tile),
            seq_len=seq_len,
            split=bool(pre.get("do_image_splitting", True)),
        )
    return None


# --- hashing -------------------------------------------------------------------------------


class PlacedImage(NamedTuple):
    """An image's placeholder tokens in a prompt: ``[offset, offset + length)``, named ``name``."""

    name: str
    offset: int
    length: int
    width: int = 0
    height: int = 0
    """Its pixel size, as the engine decodes it (0 where not given)."""


def _key_bytes(keys: Iterable[tuple[str, int]]) -> bytes:
    out = bytearray()
    for name, offset in keys:
        raw = name.encode("utf-8", "surrogatepass")
        out += offset.to_bytes(8, "little", signed=True) + len(raw).to_bytes(4, "little") + raw
    return bytes(out)


def image_block_hash(parent: int, token_ids: Sequence[int], keys: Sequence[tuple[str, int]]) -> int:
    """The gateway's name of a block of ``token_ids`` touched by images ``keys`` (each
    ``(name, start offset relative to the block's start)``, in prompt order) following the block
    named ``parent``; with no keys, :func:`kvharness.workload.chain.block_hash`."""
    return digest(parent, token_bytes(token_ids) + _key_bytes(keys))


def block_image_keys(images: Sequence[PlacedImage], start: int, end: int) -> list[tuple[str, int]]:
    """The ``(name, offset - start)`` of each of ``images`` (in prompt order, not overlapping)
    that touches tokens ``[start, end)``."""
    return [
        (im.name, im.offset - start)
        for im in images
        if im.offset < end and im.offset + im.length > start
    ]


def image_chain_hashes(
    token_ids: Sequence[int],
    block_size: int,
    images: Sequence[PlacedImage],
    parent: int = ROOT_HASH,
    start: int = 0,
) -> list[int]:
    """Names of the full blocks of ``token_ids[start:]`` (``start`` a multiple of
    ``block_size``), those touched by ``images`` (sorted by offset, not overlapping) keyed by
    them, as vLLM's prefix cache keys them. Without images it equals ``chain_hashes``."""
    if start % block_size:
        raise ValueError(f"start {start} is not a multiple of block_size {block_size}")
    stop = len(token_ids) - (len(token_ids) - start) % block_size
    data = memoryview(token_bytes(token_ids[start:stop]))
    width = 4 * block_size
    out = []
    k = 0
    for pos in range(start, stop, block_size):
        end = pos + block_size
        while k < len(images) and images[k].offset + images[k].length <= pos:
            k += 1
        keys = []
        j = k
        while j < len(images) and images[j].offset < end:
            keys.append((images[j].name, images[j].offset - pos))
            j += 1
        at = 4 * (pos - start)
        chunk = data[at : at + width]
        parent = digest(parent, bytes(chunk) + _key_bytes(keys)) if keys else digest(parent, chunk)
        out.append(parent)
    return out


# --- chat requests -------------------------------------------------------------------------


class ImageInput(NamedTuple):
    """One image of a chat prompt, in prompt order."""

    name: str | None
    """What the engine will name it (None: the engine names it by its own hash, unknown here)."""
    tokens: tuple[int, ...] | None
    """Its placeholder token ids (None: its size is unknown here, so is everything after it)."""
    message: int
    """Index of the message it is in."""
    size: tuple[int, int] = (0, 0)
    """Its pixel size (width, height) as the engine decodes it, where read."""


class ChatImages(NamedTuple):
    """What hashing and forwarding need of a chat request's images."""

    target_id: int
    """The token the template writes once per image."""
    items: tuple[ImageInput, ...]
    names: dict[tuple[int, int], str]
    """``(message, part)`` -> the name the engine will know that image part by: the gateway's
    name of an image it read, or the client's uuid."""
    gateway_named: frozenset[tuple[int, int]]
    """The parts of :attr:`names` the gateway named: forwarded with the name as their uuid."""
    credit: bool = True
    """False where nothing of the prompt can be credited (media other than images, or a
    model whose image processor is unknown)."""


def _image_input(
    part: Mapping[str, Any], where: str, expander: ImageExpander | None, message: int
) -> tuple[ImageInput, bool]:
    """The part's image and whether the gateway named it (so the forwarded part needs its
    uuid). Raises :class:`ImageError` (with ``where`` in the message)."""
    uuid = part.get("uuid")
    client_name = None if uuid is None else str(uuid)
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str) or url[:5].lower() != "data:":
        return ImageInput(client_name, None, message), False
    try:
        data = decode_data_url(url)
        size = image_size(data)
        tokens = expander.tokens(*size) if size is not None and expander is not None else None
    except ImageError as err:
        raise ImageError(f"{where}: bad image: {err}") from None
    if client_name is not None:
        return ImageInput(client_name, tokens, message, size or (0, 0)), False
    return ImageInput(image_name(data), tokens, message, size or (0, 0)), True


def _template_part(part: Mapping[str, Any]) -> Mapping[str, Any]:
    """A normalised content part as vLLM passes it to a template that takes parts: media as
    ``{"type": modality}`` with the fields vLLM does not know."""
    kind = part.get("type")
    if kind == "text":
        return part
    extra = {k: v for k, v in part.items() if k not in _KNOWN_PART_FIELDS}
    return {"type": MEDIA_PART_TYPES.get(str(kind), kind), **extra}


def _string_content(parts: Sequence[Mapping[str, Any]], placeholder: str) -> str:
    """A media message's content as vLLM writes it for a string-content template: a placeholder
    per image, then the non-empty texts, all joined by newlines."""
    texts = [str(p.get("text")) for p in parts if p.get("type") == "text" and p.get("text")]
    images = [placeholder for p in parts if p.get("type") in IMAGE_PART_TYPES]
    text = "\n".join(texts)
    return "\n".join([*images, text]) if text else "\n".join(images)


def prepare_chat_images(
    messages: Sequence[Mapping[str, Any]],
    expander: ImageExpander | None,
    *,
    parts_template: bool,
) -> tuple[list[dict[str, Any]], ChatImages]:
    """The messages as the template sees them, and the prompt's images.

    ``messages`` come from :func:`kvharness.gateway.requests.parse_request` for a request with
    media: a content given as a list is its parts (texts normalised to ``{"type": "text"}``).
    For a template that takes parts (``parts_template``), every message's content becomes
    parts, as vLLM passes them (a tool result without media stays a string); else a content
    of parts becomes a string, an :attr:`ImageExpander.placeholder` per image before the
    non-empty texts, newline-separated (vLLM's default, images not interleaved). Raises
    :class:`ImageError` for image data that cannot be read.
    """
    items: list[ImageInput] = []
    names: dict[tuple[int, int], str] = {}
    ours: set[tuple[int, int]] = set()
    credit = expander is not None
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            if parts_template and m.get("role") != "tool":
                text = content if isinstance(content, str) else ""
                out.append({**m, "content": [{"type": "text", "text": text}] if text else []})
            else:
                out.append(dict(m))
            continue
        media = False
        for j, part in enumerate(content):
            kind = part.get("type")
            if kind in IMAGE_PART_TYPES:
                where = f"messages[{i}].content[{j}]"
                item, named_here = _image_input(part, where, expander, i)
                items.append(item)
                media = True
                if item.name is not None:
                    names[(i, j)] = item.name
                    if named_here:
                        ours.add((i, j))
            elif kind in MEDIA_PART_TYPES:
                media, credit = True, False
        if parts_template and (media or m.get("role") != "tool"):
            out.append({**m, "content": [_template_part(p) for p in content]})
        elif parts_template:  # vLLM gives a tool's text-only parts as their text, joined
            texts = [str(p.get("text")) for p in content if p.get("type") == "text"]
            out.append({**m, "content": "\n".join(texts)})
        else:
            placeholder = expander.placeholder if expander is not None else "<image>"
            out.append({**m, "content": _string_content(content, placeholder)})
    target = expander.target_id if expander is not None else -1
    return out, ChatImages(target, tuple(items), names, frozenset(ours), credit)


class HeldImages:
    """The images each replica's engine holds processed, as far as the gateway knows: per
    replica (by index), the names of the last ``capacity`` images it was sent.

    vLLM keeps processed images in an LRU cache (``--mm-processor-cache-gb``, 4 GiB by default:
    a hundred or more screenshots) keyed by the part's uuid, and takes an image part with a
    uuid and no data as the image its cache holds under that uuid, which it then neither
    receives, decodes nor processes again. The gateway cannot see that cache; it assumes the
    replica holds what it sent it last, and learns when it was wrong: an engine that refuses
    images sent by name (:meth:`refused`) has let them go, or keeps no such cache, so its
    capacity drops to half of what was assumed held, down to 0 (every image sent whole)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"need a capacity >= 0 (images per replica), got {capacity}")
        self.capacity = capacity
        self._held: dict[int, OrderedDict[str, None]] = {}
        self._capacity: dict[int, int] = {}

    def held(self, replica: int) -> Container[str]:
        """The names of the images ``replica`` is taken to hold (O(1) membership)."""
        return self._held.get(replica, _NONE)

    def limit(self, replica: int) -> int:
        """The most images ``replica`` is taken to hold."""
        return self._capacity.get(replica, self.capacity)

    def sent(self, replica: int, names: Iterable[str]) -> None:
        """``replica`` answered a request with the images ``names``: it holds them, as its
        most recently used."""
        cap = self.limit(replica)
        if not cap:
            return
        held = self._held.setdefault(replica, OrderedDict())
        for name in names:
            held[name] = None
            held.move_to_end(name)
        while len(held) > cap:
            held.popitem(last=False)

    def refused(self, replica: int) -> None:
        """``replica`` refused images sent by name that it was taken to hold: nothing is taken
        as held there any more, and it is taken to hold half as many as it was."""
        held = self._held.pop(replica, None)
        self._capacity[replica] = len(held or ()) // 2


_NONE: frozenset[str] = frozenset()
