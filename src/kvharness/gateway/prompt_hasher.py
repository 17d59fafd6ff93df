"""Incremental prompt hashing per agent session, as the engines tokenise.

An agent's next prompt is its last prompt plus a few appended messages. :class:`PromptHasher`
keeps, per session, the last prompt's text, token ids and block hashes, and for a new prompt
re-tokenises only from the last *added token* (a chat template's ``<|start_header|>``-like marker)
at or before the first character that differs and present in the new prompt too, then re-hashes
only the blocks from there on. Added tokens are cut out of the text before pre-tokenisation, so
tokenising from one of them gives exactly the tokens a full tokenisation would (a token where the
new prompt no longer has one is no boundary: the text before it may tokenise differently). Where there is none close enough (plain text prompts,
or one long appended message), it resumes from an *anchor*, a word start recorded about every
128 tokens, and keeps the result only if the first tokens after the anchor come out as they did
in the last prompt (else it tokenises in full); ``verify_every`` checks samples against a full
tokenisation.

Sessions are found by the ``x-session-id`` header, or, for chat requests without one, by their
messages: a request whose first ``k`` messages are the last request's messages continues it
(found through a hash chained over all ``k`` messages, then checked message by message); a
request repeating the last one's messages exactly is the same session too. A text completion
without one continues the session (named here) whose last prompt its text extends.

Sessions of one agent begin alike (system prompt, tool definitions, repository context): a prompt
that does not continue its session's last one (a new session, or a rewritten history) is resumed
from whichever recent prompt that began with the same :data:`_HEAD_CHARS` characters shares most
of its text, so a new session tokenises only what is its own.

Images (a chat prompt's :class:`~kvharness.gateway.images.ChatImages`) are expanded into their
placeholder tokens after tokenising, and the blocks they touch are keyed by them
(:func:`~kvharness.gateway.images.image_chain_hashes`). Two different images render the same
text, so a prompt reuses another's blocks only up to the first image that differs (in name or
size) or that the gateway could not size, whatever their texts share.

A request identical to its session's last one (same messages, tools and template options, and a
template that does not print the clock) reuses the last result without rendering; one whose
rendered text is identical reuses it without tokenising. Either is counted as fully reused.
Memory is bounded by ``max_tokens`` kept over all sessions (least recently used dropped first).
Not thread-safe; no clocks.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, NamedTuple

from kvharness.gateway.images import ChatImages, ImageInput, PlacedImage, image_chain_hashes
from kvharness.gateway.tokenizer import EngineTokenizer
from kvharness.workload.chain import ROOT_HASH, chain_hashes, common_prefix_len

__all__ = ["HashedPrompt", "HasherStats", "PromptHasher"]

_MAX_APPENDED_MESSAGES = 32
"""How many trailing messages a continuation may append and still be found without a header."""

_ANCHOR_OVERLAP_CHARS = 256
"""An anchor is resumed from only when the two prompts share this many characters past it."""
_ANCHOR_MIN_AGREE = 16
"""Tokens after an anchor that must come out as before for the resumed tokenisation to be used."""
_HEAD_CHARS = 256
"""Prompts beginning with the same this many characters are looked at to resume one another."""
_HEAD_CANDIDATES = 8
"""Sessions looked at per beginning (the most recently kept)."""


class HashedPrompt(NamedTuple):
    block_hashes: tuple[int, ...]
    """Gateway hashes of the prompt's full blocks at the engine block size (for a prompt with
    images, only as far as the gateway knows the engine's tokens)."""
    num_tokens: int
    token_ids: Sequence[int]
    """The engine's tokens of the prompt (images expanded into their placeholders)."""
    reused_tokens: int
    """Tokens taken from the session's previous prompt instead of being tokenised again."""
    session: str | None = None
    """The session the prompt belongs to: the caller's id, or for chat prompts without one, an
    ``auto-N`` id shared by the calls whose messages continue each other."""
    images: tuple[PlacedImage, ...] = ()
    """The images whose blocks :attr:`block_hashes` name, placed in :attr:`token_ids`."""


@dataclass(slots=True)
class HasherStats:
    prompts: int = 0
    incremental: int = 0
    tokens_total: int = 0
    tokens_reused: int = 0
    verified: int = 0
    mismatches: int = 0
    """Incremental results that differed from full tokenisation (the full result was used)."""
    resume_failures: int = 0
    """Resumes from an anchor whose check failed (the prompt was tokenised in full)."""
    shared: int = 0
    """Prompts resumed from another session's prompt that began alike."""


@dataclass(slots=True)
class _State:
    text: str | None
    ids: array[int]
    specials: list[tuple[int, int]]
    hashes: list[int]
    key: tuple[int, int] | None = None
    anchors: list[tuple[int, int]] = field(default_factory=list)
    result: HashedPrompt | None = None
    """What the prompt hashed to (for repeats of it)."""
    request: tuple[Any, ...] | None = None
    """A chat prompt's messages and template options (for repeats that need no rendering)."""
    special_tokens: bool = False
    auto: bool = False
    """The session was named here (``auto-N``), not by its client."""
    placed: tuple[_Placed, ...] = ()
    """The prompt's images at their template tokens in :attr:`ids` (empty when there are none,
    or when their count is not the template tokens')."""
    image_sig: _ImageSig = None


class _Placed(NamedTuple):
    at: int
    """Index in the text's token ids of the template token the image replaces."""
    image: ImageInput


_ImageSig = tuple[int, tuple[ImageInput, ...], bool] | None
"""What of a prompt's images its hashes depend on (None: no images)."""


def _sig(images: ChatImages | None) -> _ImageSig:
    return None if images is None else (images.target_id, images.items, images.credit)


def _same_image(a: _Placed | None, b: _Placed | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.at == b.at and a.image.name == b.image.name and a.image.tokens == b.image.tokens


def _engine_shared(old: Sequence[_Placed], new: Sequence[_Placed], shared: int) -> int:
    """Engine tokens two prompts share when their texts share ``shared`` tokens: up to the
    first image in the shared text that differs or whose size is unknown."""
    shift = 0
    for a, b in zip_longest(old, new):
        a = a if a is not None and a.at < shared else None
        b = b if b is not None and b.at < shared else None
        if a is None and b is None:
            break
        if not _same_image(a, b) or a is None or a.image.tokens is None:
            return min(x.at for x in (a, b) if x is not None) + shift
        shift += len(a.image.tokens) - 1
    return shared + shift


def _expand(
    ids: Sequence[int], placed: Sequence[_Placed]
) -> tuple[array[int], list[PlacedImage], int]:
    """The engine's tokens of text tokens ``ids`` with each placed image's template token
    replaced by its placeholders; the images placed there; and the engine tokens known (up to
    the first image of unknown size, which stays its template token, as does the rest)."""
    out = array("I")
    on = []
    prev = 0
    cut = None
    for p in placed:
        out.extend(ids[prev : p.at])
        tokens, name = p.image.tokens, p.image.name
        if cut is not None or tokens is None or name is None:
            cut = len(out) if cut is None else cut
            out.append(ids[p.at])
        else:
            on.append(PlacedImage(name, len(out), len(tokens), *p.image.size))
            out.extend(tokens)
        prev = p.at + 1
    out.extend(ids[prev:])
    return out, on, len(out) if cut is None else cut


def _kept(state: _State) -> int:
    """Token ids ``state`` holds: its text's, and its images' expansion of them."""
    engine = state.result.token_ids if state.result is not None else state.ids
    return len(state.ids) + (len(engine) if engine is not state.ids else 0)


def _fingerprint(message: Mapping[str, Any]) -> int:
    return hash((message.get("role"), str(message.get("content")), message.get("tool_call_id")))


def _prefix_keys(
    messages: Sequence[Mapping[str, Any]], images: Sequence[ImageInput] = ()
) -> list[tuple[int, int]]:
    """``keys[k]`` names the first ``k`` messages: ``(k, a hash chained over all of them)``, so
    two conversations share a key only where every message so far agrees (agents share system
    prompts and repeat messages: a harness's nudge, a tool's "No matches."); a message's
    images count by their names."""
    keys, h = [(0, 0)], 0
    names: dict[int, list[str | None]] = {}
    for im in images:
        names.setdefault(im.message, []).append(im.name)
    for k, message in enumerate(messages, 1):
        h = hash((h, _fingerprint(message), tuple(names.get(k - 1, ()))))
        keys.append((k, h))
    return keys


def _images_before(sig: _ImageSig, k: int) -> tuple[ImageInput, ...]:
    return () if sig is None else tuple(im for im in sig[1] if im.message < k)


@dataclass(slots=True)
class PromptHasher:
    """Tokenises and hashes prompts as the engine would, reusing each session's last prompt.

    ``block_size`` is the engines' KV block size (tokens). ``verify_every`` > 0 also tokenises
    every n-th incremental prompt in full and counts mismatches (a self-check; costs time).
    Mutates its session table and ``stats``.
    """

    tokenizer: EngineTokenizer | None
    block_size: int
    max_tokens: int = 20_000_000
    verify_every: int = 0
    stats: HasherStats = field(default_factory=HasherStats)
    _sessions: OrderedDict[str, _State] = field(default_factory=OrderedDict)
    _by_messages: dict[tuple[int, int], str] = field(default_factory=dict)
    _by_head: dict[str, list[str]] = field(default_factory=dict)
    """First :data:`_HEAD_CHARS` characters of kept text prompts -> their sessions, latest first."""
    _kept_tokens: int = 0
    _auto: int = 0

    # --- entry points -------------------------------------------------------------------

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        session_id: str | None,
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        extra: Mapping[str, Any] | None = None,
        images: ChatImages | None = None,
    ) -> HashedPrompt:
        """Hash a chat prompt: messages as the template takes them (strings, or parts where
        :func:`~kvharness.gateway.images.prepare_chat_images` made them), with its
        ``images`` if it has any. Raises TemplateError, ValueError."""
        tok = self._need_tokenizer()
        if tok.template is None:
            raise ValueError("the model has no chat template; chat requests cannot be hashed")
        sid = session_id
        state = self._sessions.get(sid) if sid is not None else None
        sig = _sig(images)
        keys = _prefix_keys(messages, images.items if images is not None else ())
        if state is None:
            state, found = self._find_by_messages(messages, keys, sig)
            if sid is None:
                sid = found
        request = (messages, tools, add_generation_prompt, extra, sig)
        if (
            state is not None
            and state.result is not None
            and state.request is not None
            and not tok.template.time_dependent
            and state.request == request
        ):
            result = self._repeat(state)
        else:
            text = tok.template.render(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, extra=extra
            )
            result, state, _ = self._hash_text(text, state, add_special_tokens=False, images=images)
            state.key = keys[-1]
            state.request = request
        if sid is None:
            sid = self._new_session(state)
        self._keep(sid, state)
        return result._replace(session=sid)

    def completion_text(
        self, text: str, session_id: str | None, *, add_special_tokens: bool = True
    ) -> HashedPrompt:
        """Hash a text completion prompt (tokenised with the tokenizer's special tokens unless
        told otherwise, as the engine does). Without ``session_id``, the prompt continues the
        session named here whose last prompt its text extends, else starts one."""
        self._need_tokenizer()
        state = self._sessions.get(session_id) if session_id is not None else None
        result, new_state, extended = self._hash_text(
            text, state, add_special_tokens=add_special_tokens
        )
        sid = session_id if session_id is not None else extended
        if sid is None:
            sid = self._new_session(new_state)
        self._keep(sid, new_state)
        return result._replace(session=sid)

    def completion_ids(self, ids: Sequence[int], session_id: str | None) -> HashedPrompt:
        """Hash a token-id prompt; with a session, only blocks past the common prefix."""
        bs = self.block_size
        state = self._sessions.get(session_id) if session_id is not None else None
        new_ids = array("I", ids)
        keep = 0
        if state is not None and state.text is None:
            old = state.ids
            limit = min(len(old), len(new_ids)) // bs
            while (
                keep < limit
                and old[keep * bs : (keep + 1) * bs] == new_ids[keep * bs : (keep + 1) * bs]
            ):
                keep += 1
            keep = min(keep, len(state.hashes))
        hashes = state.hashes[:keep] if state is not None else []
        parent = hashes[-1] if hashes else ROOT_HASH
        hashes = hashes + chain_hashes(new_ids, bs, parent, keep * bs)
        self._count(len(new_ids), keep * bs)
        if session_id is not None:
            self._keep(session_id, _State(None, new_ids, [], hashes))
        return HashedPrompt(tuple(hashes), len(new_ids), new_ids, keep * bs, session_id)

    # --- internals ----------------------------------------------------------------------

    def _need_tokenizer(self) -> EngineTokenizer:
        if self.tokenizer is None:
            raise ValueError("no tokenizer configured: text prompts cannot be hashed")
        return self.tokenizer

    def _find_by_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        keys: Sequence[tuple[int, int]],
        sig: _ImageSig = None,
    ) -> tuple[_State | None, str | None]:
        """The session whose last request's messages (and their images) begin ``messages``
        (the longest such, at most :data:`_MAX_APPENDED_MESSAGES` short of all), checked
        message by message."""
        stop = max(0, len(messages) - 1 - _MAX_APPENDED_MESSAGES)
        for k in range(len(messages), stop, -1):
            sid = self._by_messages.get(keys[k])
            state = self._sessions.get(sid) if sid is not None else None
            last = state.request if state is not None else None
            if (
                last is not None
                and list(last[0]) == list(messages[:k])
                and _images_before(last[-1], k) == _images_before(sig, k)
            ):
                return state, sid
        return None, None

    def _hash_text(
        self,
        text: str,
        own: _State | None,
        *,
        add_special_tokens: bool,
        images: ChatImages | None = None,
    ) -> tuple[HashedPrompt, _State, str | None]:
        """Hash ``text`` from the best kept prompt (:meth:`_base`): (result, new state, the
        session named here whose last prompt ``text`` extends, if another's than ``own``)."""
        sid, base, shared = self._base(text, own, add_special_tokens=add_special_tokens)
        result, state = self._text(
            text, base, shared, add_special_tokens=add_special_tokens, images=images
        )
        if sid is None or base is None:
            return result, state, None
        if result.reused_tokens:
            self.stats.shared += 1
        return result, state, sid if base.auto and shared == len(base.text or "") else None

    def _base(
        self, text: str, own: _State | None, *, add_special_tokens: bool
    ) -> tuple[str | None, _State | None, int]:
        """The kept prompt to resume ``text`` from, as (its session when not ``own``, it, the
        characters it shares with ``text``): ``own`` (the session's last prompt) when ``text``
        continues it, else whichever of it and the recent prompts that began like ``text``
        shares most. Only prompts tokenised with the same ``add_special_tokens`` qualify.
        O(length shared) per prompt looked at, at most 1 + :data:`_HEAD_CANDIDATES` of them."""
        best: tuple[str | None, _State | None, int] = (None, None, 0)
        if own is not None and own.text is not None and own.special_tokens == add_special_tokens:
            best = (None, own, common_prefix_len(own.text, text))
            if best[2] == len(own.text):
                return best
        for sid in self._by_head.get(text[:_HEAD_CHARS], ()):
            other = self._sessions[sid]
            if other is own or other.special_tokens != add_special_tokens:
                continue
            assert other.text is not None
            shared = common_prefix_len(other.text, text)
            if shared > best[2]:
                best = (sid, other, shared)
        return best

    def _new_session(self, state: _State) -> str:
        """A name for a session that its client did not name, whose first prompt is ``state``."""
        self._auto += 1
        state.auto = True
        return f"auto-{self._auto}"

    def _text(
        self,
        text: str,
        base: _State | None,
        d: int,
        *,
        add_special_tokens: bool,
        images: ChatImages | None = None,
    ) -> tuple[HashedPrompt, _State]:
        """Tokenise and hash ``text``, resuming from ``base`` (a kept prompt tokenised with the
        same ``add_special_tokens``, sharing its first ``d`` characters; see :meth:`_base`) where
        it can: from the last special token at or before the first differing character that
        ``text`` has there too (exact),
        or, when that is far back or there is none, from the last anchor well before it (checked:
        the resumed tokens must equal the old ones over the text both prompts share past the
        anchor, else the whole text is tokenised)."""
        tok = self._need_tokenizer()
        if (
            base is not None
            and base.result is not None
            and d == len(text) == len(base.text or "")
            and base.image_sig == _sig(images)
        ):
            same = _State(
                text, base.ids, base.specials, base.hashes, anchors=base.anchors,
                result=base.result, special_tokens=add_special_tokens, placed=base.placed,
                image_sig=base.image_sig,
            )  # fmt: skip
            return self._repeat(base), same
        restart = None
        checked = False
        if base is not None:
            for i, c in reversed(base.specials):
                # Only where ``text`` has the same special token: it is the boundary.
                if c <= d and tok.added_at(text, c, base.ids[i]):
                    restart = (i, c)
                    break
            for i, c in reversed(base.anchors):
                if c <= d - _ANCHOR_OVERLAP_CHARS:
                    if restart is None or c - restart[1] > _ANCHOR_OVERLAP_CHARS:
                        restart, checked = (i, c), True
                    break
        if restart is not None:
            assert base is not None
            resumed = self._resume(text, base, restart, checked, add_special_tokens, images)
            if resumed is not None:
                return resumed
            self.stats.resume_failures += 1
        enc = tok.encode(text, add_special_tokens=add_special_tokens)
        ids = array("I", enc.ids)
        new = _State(text, ids, enc.specials, [], anchors=enc.anchors,
                     special_tokens=add_special_tokens)  # fmt: skip
        self._finish(new, None, 0, images)
        self._count(len(ids), 0)
        assert new.result is not None
        return new.result, new

    def _finish(
        self, new: _State, base: _State | None, shared: int, images: ChatImages | None
    ) -> None:
        """Set ``new``'s hashes, images and result from its token ids, reusing ``base``'s
        hashes as far as both prompts' engine tokens agree (their first ``shared`` text tokens
        are the same)."""
        bs = self.block_size
        ids = new.ids
        placed, cut = self._place(ids, images)
        engine: Sequence[int] = ids
        on: list[PlacedImage] = []
        if placed:
            engine, on, cut = _expand(ids, placed)
        old = base.placed if base is not None else ()
        same = _engine_shared(old, placed, shared) if old or placed else shared
        keep = min(same // bs, len(base.hashes) if base is not None else 0, cut // bs)
        hashes = base.hashes[:keep] if base is not None else []
        parent = hashes[-1] if hashes else ROOT_HASH
        if cut < len(engine):
            hashes += image_chain_hashes(engine[:cut], bs, on, parent, keep * bs)
        elif on:
            hashes += image_chain_hashes(engine, bs, on, parent, keep * bs)
        else:
            hashes += chain_hashes(engine, bs, parent, keep * bs)
        new.hashes, new.placed, new.image_sig = hashes, placed, _sig(images)
        new.result = HashedPrompt(tuple(hashes), len(engine), engine, shared, images=tuple(on))

    @staticmethod
    def _place(ids: array[int], images: ChatImages | None) -> tuple[tuple[_Placed, ...], int]:
        """The images at their template tokens in ``ids``, and the tokens past which nothing
        is credited (all of them when that is not limited here): none at all for a prompt
        without credit, the first template token when the counts disagree (the engine would
        refuse the prompt, or the template renders images unlike vLLM)."""
        if images is None:
            return (), len(ids)
        if not images.credit or images.target_id < 0:
            return (), 0
        at: list[int] = []
        target = images.target_id
        start = 0
        try:
            while len(at) <= len(images.items):
                start = ids.index(target, start) + 1
                at.append(start - 1)
        except ValueError:
            pass
        if len(at) != len(images.items):
            return (), at[0] if at else 0
        return tuple(_Placed(a, im) for a, im in zip(at, images.items, strict=True)), len(ids)

    def _resume(
        self,
        text: str,
        state: _State,
        restart: tuple[int, int],
        checked: bool,
        add_special_tokens: bool,
        images: ChatImages | None = None,
    ) -> tuple[HashedPrompt, _State] | None:
        """Tokenise ``text`` from ``restart`` = (token index, character offset) of the old
        prompt on, reusing the old tokens before it. A ``checked`` restart (an anchor) returns
        None unless the first ``_ANCHOR_MIN_AGREE`` new tokens are the old ones."""
        tok = self._need_tokenizer()
        i, c = restart
        tail = tok.encode(text[c:], add_special_tokens=False)
        if checked:
            # The first tokens from the anchor on lie in the shared text (it extends at least
            # _ANCHOR_OVERLAP_CHARS past it): if they are the old ones, both tokenisations have
            # a boundary at the anchor, and pre-tokenisation being local, they agree from there
            # to near the first difference, past which the new tokens are used anyway.
            old = state.ids
            agree = min(_ANCHOR_MIN_AGREE, len(tail.ids), len(old) - i)
            if tail.ids[:agree] != old[i : i + agree].tolist():
                return None
        ids = state.ids[:i]
        ids.extend(tail.ids)
        specials = [x for x in state.specials if x[0] < i]
        specials += [(i + j, c + off) for j, off in tail.specials]
        anchors = [x for x in state.anchors if x[0] < i]
        anchors += [(i + j, c + off) for j, off in tail.anchors]
        base: _State | None = state
        self.stats.incremental += 1
        if self.verify_every and self.stats.incremental % self.verify_every == 0:
            self.stats.verified += 1
            full = tok.encode(text, add_special_tokens=add_special_tokens)
            if full.ids != ids.tolist():
                self.stats.mismatches += 1
                ids = array("I", full.ids)
                specials, anchors = full.specials, full.anchors
                base, i = None, 0
        self._count(len(ids), i)
        new = _State(text, ids, specials, [], anchors=anchors, special_tokens=add_special_tokens)
        self._finish(new, base, i, images)
        assert new.result is not None
        return new.result, new

    def _repeat(self, state: _State) -> HashedPrompt:
        """The same prompt as the session's last: its result again, every token reused."""
        assert state.result is not None
        n = state.result.num_tokens
        self.stats.incremental += 1
        self._count(n, n)
        return state.result._replace(reused_tokens=n)

    def _count(self, total: int, reused: int) -> None:
        self.stats.prompts += 1
        self.stats.tokens_total += total
        self.stats.tokens_reused += reused

    def _keep(self, sid: str, state: _State) -> None:
        old = self._sessions.pop(sid, None)
        if old is not None:
            state.auto = state.auto or old.auto
            self._forget(sid, old)
        self._sessions[sid] = state
        self._kept_tokens += _kept(state)
        if state.key is not None:
            self._by_messages[state.key] = sid
        if state.text is not None:
            bucket = self._by_head.setdefault(state.text[:_HEAD_CHARS], [])
            bucket.insert(0, sid)
            del bucket[_HEAD_CANDIDATES:]
        while self._kept_tokens > self.max_tokens and len(self._sessions) > 1:
            dropped_sid, dropped = self._sessions.popitem(last=False)
            self._forget(dropped_sid, dropped)

    def _forget(self, sid: str, state: _State) -> None:
        self._kept_tokens -= _kept(state)
        if state.key is not None and self._by_messages.get(state.key) == sid:
            del self._by_messages[state.key]
        if state.text is not None:
            head = state.text[:_HEAD_CHARS]
            bucket = self._by_head.get(head)
            if bucket is not None and sid in bucket:
                bucket.remove(sid)
                if not bucket:
                    del self._by_head[head]

    def __len__(self) -> int:
        return len(self._sessions)
