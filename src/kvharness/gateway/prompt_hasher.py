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
from typing import Any, NamedTuple

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
    """Gateway hashes of the prompt's full blocks at the engine block size."""
    num_tokens: int
    token_ids: Sequence[int]
    reused_tokens: int
    """Tokens taken from the session's previous prompt instead of being tokenised again."""
    session: str | None = None
    """The session the prompt belongs to: the caller's id, or for chat prompts without one, an
    ``auto-N`` id shared by the calls whose messages continue each other."""


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


def _fingerprint(message: Mapping[str, Any]) -> int:
    return hash((message.get("role"), str(message.get("content")), message.get("tool_call_id")))


def _prefix_keys(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """``keys[k]`` names the first ``k`` messages: ``(k, a hash chained over all of them)``, so
    two conversations share a key only where every message so far agrees (agents share system
    prompts and repeat messages: a harness's nudge, a tool's "No matches.")."""
    keys, h = [(0, 0)], 0
    for k, message in enumerate(messages, 1):
        h = hash((h, _fingerprint(message)))
        keys.append((k, h))
    return keys


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
    ) -> HashedPrompt:
        """Hash a chat prompt (messages with string contents). Raises TemplateError, ValueError."""
        tok = self._need_tokenizer()
        if tok.template is None:
            raise ValueError("the model has no chat template; chat requests cannot be hashed")
        sid = session_id
        state = self._sessions.get(sid) if sid is not None else None
        keys = _prefix_keys(messages)
        if state is None:
            state, found = self._find_by_messages(messages, keys)
            if sid is None:
                sid = found
        request = (messages, tools, add_generation_prompt, extra)
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
            result, state, _ = self._hash_text(text, state, add_special_tokens=False)
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
        self, messages: Sequence[Mapping[str, Any]], keys: Sequence[tuple[int, int]]
    ) -> tuple[_State | None, str | None]:
        """The session whose last request's messages begin ``messages`` (the longest such, at
        most :data:`_MAX_APPENDED_MESSAGES` short of all), checked message by message."""
        stop = max(0, len(messages) - 1 - _MAX_APPENDED_MESSAGES)
        for k in range(len(messages), stop, -1):
            sid = self._by_messages.get(keys[k])
            state = self._sessions.get(sid) if sid is not None else None
            last = state.request if state is not None else None
            if last is not None and list(last[0]) == list(messages[:k]):
                return state, sid
        return None, None

    def _hash_text(
        self, text: str, own: _State | None, *, add_special_tokens: bool
    ) -> tuple[HashedPrompt, _State, str | None]:
        """Hash ``text`` from the best kept prompt (:meth:`_base`): (result, new state, the
        session named here whose last prompt ``text`` extends, if another's than ``own``)."""
        sid, base, shared = self._base(text, own, add_special_tokens=add_special_tokens)
        result, state = self._text(text, base, shared, add_special_tokens=add_special_tokens)
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
        self, text: str, base: _State | None, d: int, *, add_special_tokens: bool
    ) -> tuple[HashedPrompt, _State]:
        """Tokenise and hash ``text``, resuming from ``base`` (a kept prompt tokenised with the
        same ``add_special_tokens``, sharing its first ``d`` characters; see :meth:`_base`) where
        it can: from the last special token at or before the first differing character that
        ``text`` has there too (exact),
        or, when that is far back or there is none, from the last anchor well before it (checked:
        the resumed tokens must equal the old ones over the text both prompts share past the
        anchor, else the whole text is tokenised)."""
        tok = self._need_tokenizer()
        if base is not None and base.result is not None and d == len(text) == len(base.text or ""):
            same = _State(
                text, base.ids, base.specials, base.hashes, anchors=base.anchors,
                result=base.result, special_tokens=add_special_tokens,
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
            resumed = self._resume(text, base, restart, checked, add_special_tokens)
            if resumed is not None:
                return resumed
            self.stats.resume_failures += 1
        enc = tok.encode(text, add_special_tokens=add_special_tokens)
        ids = array("I", enc.ids)
        new = _State(
            text, ids, enc.specials, chain_hashes(ids, self.block_size), anchors=enc.anchors,
            special_tokens=add_special_tokens,
        )  # fmt: skip
        new.result = HashedPrompt(tuple(new.hashes), len(ids), ids, 0)
        self._count(len(ids), 0)
        return new.result, new

    def _resume(
        self,
        text: str,
        state: _State,
        restart: tuple[int, int],
        checked: bool,
        add_special_tokens: bool,
    ) -> tuple[HashedPrompt, _State] | None:
        """Tokenise ``text`` from ``restart`` = (token index, character offset) of the old
        prompt on, reusing the old tokens before it. A ``checked`` restart (an anchor) returns
        None unless the first ``_ANCHOR_MIN_AGREE`` new tokens are the old ones."""
        tok = self._need_tokenizer()
        bs = self.block_size
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
        keep = min(i // bs, len(state.hashes))
        hashes = state.hashes[:keep]
        hashes += chain_hashes(ids, bs, hashes[-1] if hashes else ROOT_HASH, keep * bs)
        self.stats.incremental += 1
        if self.verify_every and self.stats.incremental % self.verify_every == 0:
            self.stats.verified += 1
            full = tok.encode(text, add_special_tokens=add_special_tokens)
            if full.ids != ids.tolist():
                self.stats.mismatches += 1
                ids = array("I", full.ids)
                specials, anchors = full.specials, full.anchors
                hashes = chain_hashes(ids, bs)
                i = 0
        self._count(len(ids), i)
        new = _State(
            text, ids, specials, hashes, anchors=anchors, special_tokens=add_special_tokens
        )
        new.result = HashedPrompt(tuple(hashes), len(ids), ids, i)
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
        self._kept_tokens += len(state.ids)
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
        self._kept_tokens -= len(state.ids)
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
