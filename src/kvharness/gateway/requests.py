"""Parsing and validating OpenAI requests at the gateway's edge (no I/O).

Only what routing needs is read and checked (the body is forwarded to the replica unchanged, and the
engine validates the rest): the prompt (chat ``messages`` or a completions ``prompt`` and its
``add_special_tokens``), ``stream``, the output budget and ``model``. Anything malformed raises
:class:`BadRequest` with a reason the client sees in a 400. :func:`with_token_ids` rewrites a text
completion to the token ids the engine would tokenise it to; :func:`image_body` cuts a chat body
around its images.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import msgspec

from kvharness.gateway import bigjson
from kvharness.gateway.bigjson import LongText
from kvharness.gateway.images import IMAGE_PART_TYPES, MEDIA_PART_TYPES

__all__ = [
    "SESSION_HEADERS",
    "BadRequest",
    "ImageBody",
    "ParsedRequest",
    "approx_pieces",
    "approx_text",
    "first_session_header",
    "image_body",
    "materialised",
    "parse_request",
    "with_token_ids",
]

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()

Kind = Literal["chat", "completion"]

DEFAULT_CHAT_OUTPUT = 256
"""Output tokens assumed for routing when a chat request sets no budget (the engine's own default
is the rest of the context, which would overstate it)."""


class BadRequest(ValueError):
    """The client's request is malformed; the message says why (sent back in a 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """What the gateway reads of a request body."""

    kind: Kind
    stream: bool
    model: str | None
    max_output_tokens: int
    messages: list[dict[str, Any]] | None = None
    """Chat messages with contents normalised to strings (as the engine renders them), except
    in a request with media parts: there every content given as a list is the list of parts,
    texts as ``{"type": "text", "text": ...}``, media parts as sent (see
    :mod:`kvharness.gateway.images`)."""
    prompt_text: str | LongText | None = None
    prompt_ids: list[int] | None = None
    tools: list[Any] | None = None
    add_generation_prompt: bool = True
    template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool = True
    """Whether the engine adds the tokenizer's special tokens (BOS) to a text completion prompt."""
    media: bool = False
    """Whether a chat message has media parts (images, audio, video)."""
    fields: dict[str, Any] | None = None
    """The decoded body of a completion request (for :func:`with_token_ids`) or of a chat
    request with media (for :func:`image_body`)."""
    long_texts: bool = False
    """Whether strings in it may be :class:`LongText` (a large body; see :func:`materialised`)."""
    user: str | None = None
    """The OpenAI ``user`` field: a client-chosen id of whom the request is for."""


def _int_field(body: Mapping[str, Any], name: str, low: int = 0) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{name}' must be an integer, got {_type_name(value)}", name)
    if value < low:
        raise BadRequest(f"'{name}' must be >= {low}, got {value}", name)
    return value


def _type_name(value: Any) -> str:
    return "str" if isinstance(value, LongText) else type(value).__name__


def _plain(value: Any) -> Any:
    """``value``, a :class:`LongText` joined (for the fields read as whole strings)."""
    return str(value) if isinstance(value, LongText) else value


def _content(
    message: Mapping[str, Any], i: int
) -> tuple[str | LongText, list[dict[str, Any]] | None, bool]:
    """A message's content as a string (as vLLM gives it to a template taking strings, media
    left out), as its normalised parts when it is a list (texts as ``{"type": "text", "text":
    ...}``, media parts as sent, others dropped), and whether it has media parts."""
    content = message.get("content")
    if content is None:
        return "", None, False
    if isinstance(content, str | LongText):
        return content, None, False
    if not isinstance(content, list):
        raise BadRequest(f"messages[{i}].content must be a string, a list of parts or null")
    texts: list[str | LongText] = []
    parts: list[dict[str, Any]] = []
    media = False
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(_plain(part.get("type")), str):
            raise BadRequest(f"messages[{i}].content[{j}] must be an object with a 'type'")
        kind = _plain(part["type"])
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str | LongText):
                raise BadRequest(f"messages[{i}].content[{j}].text must be a string")
            texts.append(text)
            parts.append({"type": "text", "text": text})
        elif kind in MEDIA_PART_TYPES:
            if kind in IMAGE_PART_TYPES:
                _check_image_part(part, i, j)
            media = True
            parts.append(part)
    # vLLM joins the non-empty text parts with newlines for templates taking strings.
    if not any(isinstance(t, LongText) for t in texts):
        return "\n".join(t for t in texts if isinstance(t, str) and t), parts, media
    pieces: list[str] = []
    for t in (t for t in texts if any(t.pieces if isinstance(t, LongText) else t)):
        pieces.extend(
            (["\n"] if pieces else []) + list(t.pieces if isinstance(t, LongText) else [t])
        )
    return LongText(tuple(pieces)), parts, media


def _check_image_part(part: Mapping[str, Any], i: int, j: int) -> None:
    """An image part needs its URL: ``image_url.url`` (``image_url`` itself for
    ``input_image``), a string; its ``uuid``, when given, a string."""
    url = part.get("image_url")
    if _plain(part["type"]) == "image_url":
        url = url.get("url") if isinstance(url, dict) else None
        where = "image_url.url"
    else:
        where = "image_url"
    if not isinstance(url, str | LongText):
        raise BadRequest(f"messages[{i}].content[{j}].{where} must be a string", "messages")
    uuid = part.get("uuid")
    if uuid is not None and not isinstance(uuid, str | LongText):
        raise BadRequest(f"messages[{i}].content[{j}].uuid must be a string", "messages")


def _messages(raw: Any) -> tuple[list[dict[str, Any]], bool]:
    """The messages, contents normalised (see :attr:`ParsedRequest.messages`), and whether any
    has media parts."""
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    out = []
    lists: list[list[dict[str, Any]] | None] = []
    media = False
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object", "messages")
        role = _plain(m.get("role"))
        if not isinstance(role, str) or not role:
            raise BadRequest(f"messages[{i}].role must be a non-empty string", "messages")
        text, parts, has_media = _content(m, i)
        media = media or has_media
        lists.append(parts)
        out.append({**m, "role": role, "content": text})
    if media:  # every list content as its parts, for templates that take parts
        for m, parts in zip(out, lists, strict=True):
            if parts is not None:
                m["content"] = parts
    return out, media


def _prompt(raw: Any) -> tuple[str | LongText | None, list[int] | None]:
    if isinstance(raw, str | LongText):
        return raw, None
    if isinstance(raw, list) and raw:
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in raw):
            return None, raw
        if len(raw) == 1:
            return _prompt(raw[0])
        raise BadRequest(
            "'prompt' must be a string, a list of token ids, or a list of one of those "
            "(batched prompts are not routed as one request)",
            "prompt",
        )
    raise BadRequest("'prompt' must be a non-empty string or list of token ids", "prompt")


def parse_request(
    body: bytes | bytearray, kind: Kind, slice_bytes: int = bigjson.SLICE_BYTES
) -> ParsedRequest:
    """Parse and check a ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` body. A body
    over ``slice_bytes`` is decoded in slices (:mod:`kvharness.gateway.bigjson`): its long
    strings may be :class:`LongText` until :func:`materialised`."""
    long_texts = len(body) > slice_bytes
    try:
        data = bigjson.decode(body, slice_bytes) if long_texts else _decoder.decode(body)
    except msgspec.DecodeError as err:
        raise BadRequest(f"request body is not valid JSON: {err}") from None
    except RecursionError:
        raise BadRequest(
            "request body nests JSON arrays or objects too deeply to parse (a few hundred "
            "levels at most)"
        ) from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    model = _plain(data.get("model"))
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", "stream")
    budget = None
    for name in ("max_completion_tokens", "max_tokens"):
        value = _int_field(data, name)
        budget = value if budget is None else budget
    _int_field(data, "n", 1)
    user = _plain(data.get("user"))
    if user is not None and not isinstance(user, str):
        raise BadRequest("'user' must be a string", "user")
    if kind == "chat":
        tools = data.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise BadRequest("'tools' must be a list", "tools")
        kwargs = data.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise BadRequest("'chat_template_kwargs' must be an object", "chat_template_kwargs")
        agp = data.get("add_generation_prompt", True)
        if not isinstance(agp, bool):
            raise BadRequest("'add_generation_prompt' must be a boolean", "add_generation_prompt")
        messages, media = _messages(data.get("messages"))
        return ParsedRequest(
            "chat",
            stream,
            model,
            budget if budget is not None else DEFAULT_CHAT_OUTPUT,
            messages=messages,
            tools=tools,
            add_generation_prompt=agp,
            template_kwargs=kwargs,
            media=media,
            fields=data if media else None,
            long_texts=long_texts,
            user=user or None,
        )
    text, ids = _prompt(data.get("prompt"))
    special = data.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise BadRequest("'add_special_tokens' must be a boolean", "add_special_tokens")
    return ParsedRequest(
        "completion",
        stream,
        model,
        budget if budget is not None else 16,
        prompt_text=text,
        prompt_ids=ids,
        add_special_tokens=special,
        fields=data,
        long_texts=long_texts,
        user=user or None,
    )


def materialised(parsed: ParsedRequest) -> ParsedRequest:
    """``parsed`` with every :class:`LongText` in it joined into a str (as
    ``parse_request(body, kind, slice_bytes=len(body))`` would have given it)."""
    if not parsed.long_texts:
        return parsed
    m = bigjson.materialise
    if parsed.media and parsed.fields is not None:
        # The messages are read again from the joined body, so that both share its strings.
        fields = m(parsed.fields)
        return replace(
            parsed,
            messages=_messages(fields["messages"])[0],
            tools=fields.get("tools"),
            template_kwargs=fields.get("chat_template_kwargs"),
            fields=fields,
            long_texts=False,
        )
    return replace(
        parsed,
        messages=m(parsed.messages),
        prompt_text=m(parsed.prompt_text),
        tools=m(parsed.tools),
        template_kwargs=m(parsed.template_kwargs),
        fields=m(parsed.fields),
        long_texts=False,
    )


def with_token_ids(parsed: ParsedRequest, ids: Sequence[int]) -> bytes | None:
    """The body of text completion ``parsed`` with its prompt replaced by ``ids``, the tokens the
    engine would tokenise it to, so the engine does not tokenise it again; None when the answer
    could differ: a prompt that is not text, or ``echo``, which repeats the prompt's text."""
    f = parsed.fields
    if parsed.prompt_text is None or f is None or f.get("echo") not in (None, False):
        return None
    return _encoder.encode({**f, "prompt": list(ids)})


@dataclass(frozen=True, slots=True)
class ImageBody:
    """A chat body to forward, cut around its named images, so that an image the replica holds
    already can go as its name alone.

    vLLM reads an image part whose ``image_url`` is null and whose ``uuid`` is set as the image
    its multimodal processor cache holds under that uuid (and answers 400 when it holds none:
    the caller then sends the body whole). Such an image is neither sent, decoded nor hashed
    again. :meth:`render` joins the pieces once: O(body bytes)."""

    pieces: tuple[bytes, ...]
    """The body's bytes between images: one more than :attr:`images`."""
    images: tuple[tuple[str, bytes, bytes], ...]
    """Per named image, in body order: its name, its part in full and its part as the name."""

    def render(self, held: Container[str] = ()) -> tuple[bytes, tuple[str, ...]]:
        """The body with each image named in ``held`` as its name alone, and those names."""
        out = [self.pieces[0]]
        elided = []
        for (name, full, bare), piece in zip(self.images, self.pieces[1:], strict=True):
            if name in held:
                out.append(bare)
                elided.append(name)
            else:
                out.append(full)
            out.append(piece)
        return b"".join(out), tuple(elided)


def image_body(
    parsed: ParsedRequest,
    names: Mapping[tuple[int, int], str],
    add_uuid: Container[tuple[int, int]],
) -> ImageBody:
    """The body of chat request ``parsed`` (with media, materialised) as an :class:`ImageBody`
    over its image parts ``names`` (``(message, part)`` -> name); the parts in ``add_uuid``
    get their name as their ``uuid``. Rendered with nothing held, it is the client's body with
    those uuids added (``messages`` last, and a message's ``content`` last where it has named
    images: the same JSON object)."""
    f = parsed.fields
    assert f is not None and not parsed.long_texts
    pieces: list[bytes] = []
    images: list[tuple[str, bytes, bytes]] = []
    named_parts: dict[int, set[int]] = {}
    for i, j in names:
        named_parts.setdefault(i, set()).add(j)
    text = [_open_list({k: v for k, v in f.items() if k != "messages"}, "messages")]
    for i, m in enumerate(f["messages"]):
        if i:
            text.append(b",")
        here = named_parts.get(i)
        if not here:
            text.append(_encoder.encode(m))
            continue
        text.append(_open_list({k: v for k, v in m.items() if k != "content"}, "content"))
        for j, part in enumerate(m["content"]):
            if j:
                text.append(b",")
            if j not in here:
                text.append(_encoder.encode(part))
                continue
            name = names[(i, j)]
            full = {**part, "uuid": name} if (i, j) in add_uuid else part
            pieces.append(b"".join(text))
            text = []
            bare = {**part, "image_url": None, "uuid": name}
            images.append((name, _encoder.encode(full), _encoder.encode(bare)))
        text.append(b"]}")
    text.append(b"]}")
    pieces.append(b"".join(text))
    return ImageBody(tuple(pieces), tuple(images))


def _open_list(fields: Mapping[str, Any], key: str) -> bytes:
    """``fields`` with ``key`` last, encoded up to and including the ``[`` that opens its list."""
    encoded = _encoder.encode({**fields, key: []})
    assert encoded.endswith(b"[]}")
    return encoded[:-2]


def approx_text(parsed: ParsedRequest) -> str:
    """The prompt as text, for hashing without the engine's tokenizer (an approximation)."""
    return "".join(approx_pieces(parsed))


def approx_pieces(parsed: ParsedRequest) -> Iterator[str]:
    """:func:`approx_text` in pieces (their concatenation), none copied from the request."""
    texts: list[Any] = []
    if parsed.messages is not None:
        for m in parsed.messages:
            content = m["content"]
            if isinstance(content, list):  # its texts, and a marker naming each media part
                texts.append(f"<{m['role']}>")
                texts += [p["text"] if p["type"] == "text" else _media_marker(p) for p in content]
            else:
                texts += (f"<{m['role']}>", content)
    else:
        texts.append(parsed.prompt_text or "")
    for text in texts:
        if isinstance(text, LongText):
            yield from text.pieces
        else:
            yield text


def _media_marker(part: Mapping[str, Any]) -> str:
    """A media part as text for approximate hashing: its uuid, else a hash of its content."""
    uuid = part.get("uuid")
    if uuid is not None:
        return f"<media {_plain(uuid)}>"
    content = _encoder.encode(bigjson.materialise(part))
    return f"<media {hashlib.blake2b(content, digest_size=16).hexdigest()}>"


SESSION_HEADERS = (
    "x-session-id",
    "x-session-affinity",
    "x-dynamo-session-id",
    "x-smg-routing-key",
    "x-correlation-id",
)
"""The headers that name an agent session, in the order the gateway looks for them: kvharness's
and vLLM's router's ``x-session-id``; AIPerf's ``X-Session-Affinity`` (sent by default beside its
``X-Correlation-ID``); Dynamo's ``X-Dynamo-Session-ID``; the SGLang model gateway's
``X-SMG-Routing-Key``; and last AIPerf's ``X-Correlation-ID``, generic enough that other software
may set it per request. After them comes the body's ``user`` field (see
:attr:`~kvharness.gateway.config.GatewayConfig.session_user`)."""

MAX_SESSION_ID = 256
"""Characters of a session id kept (a longer one is cut)."""


def first_session_header(headers: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The value of the first of ``names`` that ``headers`` holds non-empty, cut to
    :data:`MAX_SESSION_ID` characters."""
    for name in names:
        value = headers.get(name)
        if value:
            return value[:MAX_SESSION_ID]
    return None
