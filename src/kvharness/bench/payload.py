"""Request bodies for turns, built as bytes with little work per request.

Hash-only turns become ``/v1/completions`` requests whose ``prompt`` is the materialised token-id
list, or with ``words`` the text of one word per token, each after a space (see
:mod:`kvharness.bench.words`); with ``chat`` they become ``/v1/chat/completions`` requests of one
user message holding that text. Each block's ids or text are encoded to JSON once and reused, so a
growing prompt costs a join of cached fragments. Turns with their exact token ids (a recording
that kept content) send those ids, whatever the prompt format. Turns with messages become
``/v1/chat/completions`` requests whose messages are the session's messages so far (turn ``i``
sends the messages of turns ``0..i``; a recorded computer-use rollout's messages hold its
screenshots inline). Turns with images but no messages (generated computer-use sessions) become
``/v1/chat/completions`` requests of one user message whose content parts are, in prompt order,
the text of the tokens between images and each image as an ``image_url`` (the caller's
``image_url`` turns an :class:`~kvharness.workload.images.Image` into its URL, e.g. a PNG data
URI): the engine then hashes each image's content into its placeholder blocks, as the chain does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from kvharness.workload.chain import BlockChain, block_tokens
from kvharness.workload.images import Image
from kvharness.workload.model import Session, Turn

__all__ = ["CHAT", "COMPLETIONS", "PayloadBuilder"]

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

_enc = msgspec.json.Encoder()


class PayloadBuilder:
    """Builds (path, body) for a turn. Holds a cache of JSON fragments per (block hash, length);
    memory grows with the distinct blocks sent.

    ``words`` (text prompts): token id ``i`` of a block becomes ``" " + words[i]`` and ids are drawn
    from ``[0, len(words))`` (``vocab_size`` and ``low`` are then unused). ``image_url``: an
    image's URL (needed for turns with images, which also need ``words``); each is asked once."""

    __slots__ = (
        "_blocks", "_chat", "_close", "_image_url", "_images", "_low", "_open", "_sep", "_tail",
        "_vocab", "_words", "model",
    )  # fmt: skip

    def __init__(
        self,
        model: str,
        vocab_size: int,
        *,
        ignore_eos: bool = True,
        temperature: float = 0.0,
        low: int = 0,
        words: Sequence[str] | None = None,
        chat: bool = False,
        image_url: Callable[[Image], str] | None = None,
    ):
        if chat and words is None:
            raise ValueError("chat prompts of hash-only turns need words")
        self._chat = chat
        self._image_url = image_url
        self._images: dict[Image, bytes] = {}
        self._vocab = vocab_size
        self._low = low
        self._words: list[bytes] | None = None
        self._open, self._sep, self._close = b',"prompt":[', b",", b"]"
        if words is not None:
            if not words:
                raise ValueError("text prompts need at least one word")
            self._words = [_enc.encode(" " + w)[1:-1] for w in words]
            self._vocab, self._low = len(words), 0
            self._open, self._sep, self._close = b',"prompt":"', b"", b'"'
        self._blocks: dict[tuple[int, int], bytes] = {}
        tail = b',"stream":true,"stream_options":{"include_usage":true}'
        tail += b',"temperature":' + _enc.encode(temperature)
        if ignore_eos:
            tail += b',"ignore_eos":true'
        self._tail = tail
        self.model: bytes = _enc.encode(model)

    def prompt_ids_json(self, chain: BlockChain) -> bytes:
        """The chain's token ids as a JSON array body (without brackets); with ``words``, its text
        as a JSON string body (without quotes)."""
        parts = []
        get = self._blocks.get
        bs = chain.block_size
        full, tail = divmod(chain.num_tokens, bs)
        hashes = chain.hashes
        for i, h in enumerate(hashes):
            n = bs if i < full else tail
            frag = get((h, n))
            if frag is None:
                frag = self._fragment(h, bs, 0, n)
                self._blocks[(h, n)] = frag
            parts.append(frag)
        return self._sep.join(parts)

    def _fragment(self, h: int, block_size: int, lo: int, hi: int) -> bytes:
        """Tokens ``[lo, hi)`` of the block named ``h``, encoded (not cached)."""
        ids = block_tokens(h, block_size, self._vocab, self._low)[lo:hi].tolist()
        words = self._words
        if words is None:
            return _enc.encode(ids)[1:-1]
        return b"".join([words[t] for t in ids])

    def prepare(self, chains: Iterable[BlockChain]) -> None:
        """Encode every block of ``chains`` now (before a run's clock starts), so that sending
        costs only joins."""
        for chain in chains:
            self.prompt_ids_json(chain)

    def prepare_images(self, images: Iterable[Image]) -> None:
        """Make every image's URL now (before a run's clock starts)."""
        for im in images:
            self._image_json(im)

    def _image_json(self, im: Image) -> bytes:
        url = self._images.get(im)
        if url is None:
            if self._image_url is None:
                raise ValueError("turns with images need words and an image_url")
            url = self._images[im] = _enc.encode(self._image_url(im))
        return url

    def completions(self, chain: BlockChain, max_tokens: int) -> bytes:
        return b"".join(
            (
                b'{"model":', self.model, self._open, self.prompt_ids_json(chain),
                self._close, b',"max_tokens":%d' % max_tokens,
                self._tail, b"}",
            )
        )  # fmt: skip

    def chat_text(self, chain: BlockChain, max_tokens: int) -> bytes:
        """A ``/v1/chat/completions`` body of one user message: the chain's text."""
        return b"".join(
            (
                b'{"model":', self.model, b',"messages":[{"role":"user","content":"',
                self.prompt_ids_json(chain), b'"}],"max_tokens":%d' % max_tokens,
                self._tail, b"}",
            )
        )  # fmt: skip

    def chat_images(self, turn: Turn, max_tokens: int) -> bytes:
        """A ``/v1/chat/completions`` body of one user message whose content parts are the
        prompt's text between images and its images, in order (a part per stretch of text)."""
        words, image_url = self._words, self._image_url
        if words is None or image_url is None:
            raise ValueError("turns with images need words and an image_url")
        chain = turn.input
        bs = chain.block_size
        parts: list[bytes] = []
        pos = 0
        for im in (*turn.images, None):
            stop = chain.num_tokens if im is None else im.offset
            if stop > pos:
                text = []
                for i in range(pos // bs, -(-stop // bs)):
                    h = chain.hashes[i]
                    lo, hi = max(pos - i * bs, 0), min(stop - i * bs, bs)
                    frag = self._blocks.get((h, hi)) if lo == 0 else None
                    if frag is None:
                        frag = self._fragment(h, bs, lo, hi)
                        if lo == 0:  # a block's first tokens: what a text prompt sends too
                            self._blocks[(h, hi)] = frag
                    text.append(frag)
                parts.append(b'{"type":"text","text":"' + b"".join(text) + b'"}')
            if im is None:
                break
            url = self._image_json(im)
            parts.append(b'{"type":"image_url","image_url":{"url":' + url + b"}}")
            pos = im.end
        return b"".join(
            (
                b'{"model":', self.model, b',"messages":[{"role":"user","content":[',
                b",".join(parts), b']}],"max_tokens":%d' % max_tokens, self._tail, b"}",
            )
        )  # fmt: skip

    def completions_ids(self, ids: Sequence[int], max_tokens: int) -> bytes:
        """A ``/v1/completions`` body whose prompt is exactly ``ids``."""
        return b"".join(
            (
                b'{"model":', self.model, b',"prompt":', _enc.encode(ids),
                b',"max_tokens":%d' % max_tokens, self._tail, b"}",
            )
        )  # fmt: skip

    def chat(self, messages_json: bytes, max_tokens: int) -> bytes:
        """``messages_json``: the encoded messages, comma-joined, without brackets."""
        return b"".join(
            (
                b'{"model":', self.model, b',"messages":[', messages_json,
                b'],"max_tokens":%d' % max_tokens, self._tail, b"}",
            )
        )  # fmt: skip

    def request(
        self, session: Session, index: int, history: Sequence[bytes], user: str | None = None
    ) -> tuple[str, bytes]:
        """(path, body) of turn ``index``. ``history[i]`` is turn ``i``'s messages encoded (see
        :func:`encode_messages`); only used for message turns. ``user``: the OpenAI ``user``
        field to send (the session id, for routers that key sessions by it)."""
        path, body = self._request(session, index, history)
        if user is None:
            return path, body
        return path, b"".join((body[:-1], b',"user":', _enc.encode(user), b"}"))

    def _request(self, session: Session, index: int, history: Sequence[bytes]) -> tuple[str, bytes]:
        turn = session.turns[index]
        max_tokens = max(1, turn.output_tokens)
        if turn.images and turn.messages is None:
            return CHAT, self.chat_images(turn, max_tokens)
        if turn.prompt_ids is not None:
            return COMPLETIONS, self.completions_ids(turn.prompt_ids, max_tokens)
        if turn.messages is None:
            if self._chat:
                return CHAT, self.chat_text(turn.input, max_tokens)
            return COMPLETIONS, self.completions(turn.input, max_tokens)
        return CHAT, self.chat(b",".join(h for h in history[: index + 1] if h), max_tokens)


def encode_messages(session: Session) -> list[bytes]:
    """Each turn's appended messages as comma-joined JSON objects (b"" when it has none)."""
    out = []
    for t in session.turns:
        msgs = t.messages or ()
        out.append(b",".join(_enc.encode(dict(m)) for m in msgs))
    return out
