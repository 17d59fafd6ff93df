"""The engines' tokenizer and chat template, reproduced so the gateway sees the engine's tokens.

vLLM turns a chat request into tokens by rendering the model's Jinja chat template (as Hugging
Face ``apply_chat_template`` does: ``trim_blocks``, ``lstrip_blocks``, loop controls,
``raise_exception``, ``tojson``) and tokenising the result *without* adding special tokens (the
template writes them); a completions request with a text prompt is tokenised *with* them (the
tokenizer's post-processor adds e.g. a BOS). A model directory gives ``tokenizer.json`` and the
template (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``); a
vision-language model's also gives its image processor (``preprocessor_config.json``, see
:mod:`kvharness.gateway.images`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

from kvharness.errors import UserError
from kvharness.gateway.images import ImageExpander, load_image_expander

__all__ = ["ChatTemplate", "Encoded", "EngineTokenizer", "TemplateError", "load_engine_tokenizer"]


class TemplateError(ValueError):
    """The chat template refused the messages (its ``raise_exception``) or failed to render."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


def _strftime_now(fmt: str) -> str:
    # Templates that print today's date (e.g. Llama 3) are not prefix-stable across midnight;
    # that is the engine's behaviour as well.
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template. ``special`` holds the token strings templates may use
    (``bos_token``, ``eos_token``...)."""

    def __init__(self, source: str, special: Mapping[str, str] | None = None) -> None:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as err:
            raise UserError(f"chat template does not compile: {err}") from None
        self.source = source
        self.special = dict(special or {})
        self.time_dependent = "strftime_now" in source
        """The template prints the clock (e.g. today's date): the same messages may render
        differently later, so a rendering must not be reused."""
        self.takes_parts = _loops_over_content(env.parse(source))
        """The template iterates over a message's content: vLLM then passes contents as lists
        of parts (its "openai" content format), else as strings."""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text for ``messages`` (content already normalised to strings)."""
        try:
            return self._template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                **self.special,
                **(extra or {}),
            )
        except TemplateError:
            raise
        except Exception as err:  # a template's own bugs or odd input: the request's fault
            raise TemplateError(f"chat template failed: {type(err).__name__}: {err}") from None


def _content_access(node: jinja2.nodes.Node, names: set[str]) -> bool:
    """Whether ``node`` reads some ``X['content']`` / ``X.content`` (through filters, tests and
    slices), or one of ``names`` (variables set from such a read)."""
    while True:
        wrapped = (
            isinstance(node, jinja2.nodes.Filter | jinja2.nodes.Test) and node.node is not None
        )
        sliced = isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice)
        if not (wrapped or sliced):
            break
        node = node.node  # type: ignore[attr-defined]
    if isinstance(node, jinja2.nodes.Name):
        return node.name in names
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Getattr) and node.attr == "content"


def _loops_over_content(root: jinja2.nodes.Template) -> bool:
    """Whether a template has a ``for`` loop over a message's content, read directly or through
    a ``set`` variable (a simpler form of vLLM's content-format detection)."""
    names: set[str] = set()
    for assign in root.find_all(jinja2.nodes.Assign):
        if isinstance(assign.target, jinja2.nodes.Name) and _content_access(assign.node, set()):
            names.add(assign.target.name)
    return any(_content_access(loop.iter, names) for loop in root.find_all(jinja2.nodes.For))


ANCHOR_EVERY = 128
"""Tokens between two anchors (see :attr:`Encoded.anchors`)."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token ids of a text, with the start offsets (characters) of its special tokens."""

    ids: list[int]
    specials: list[tuple[int, int]]
    """(token index, character offset) of each special token found in the text, in order."""
    anchors: list[tuple[int, int]]
    """(token index, character offset) about every :data:`ANCHOR_EVERY` tokens where a token
    begins a word (whitespace before it), in order: candidate points to resume tokenising from.
    The offset is where the previous token ends, so whitespace the tokenizer folds into the token
    is included. Unlike special tokens these are not guaranteed boundaries; whoever resumes from
    one checks the result (see :class:`kvharness.gateway.prompt_hasher.PromptHasher`)."""


class EngineTokenizer:
    """Hugging Face ``tokenizers`` loaded from ``tokenizer.json``; optionally a chat template."""

    def __init__(self, tokenizer_json: Path, template: ChatTemplate | None = None) -> None:
        from tokenizers import Tokenizer

        self.path = tokenizer_json
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self.template = template
        # Added tokens are cut out of the text before pre-tokenisation, so the text on either
        # side of one is tokenised independently: they are the safe restart points.
        self._added = {i: t.content for i, t in self._tok.get_added_tokens_decoder().items()}
        self.images: ImageExpander | None = None
        """The model's image processor, for chat prompts with images (None: not a known
        vision-language model; see :func:`kvharness.gateway.images.load_image_expander`)."""

    @property
    def added_tokens(self) -> dict[str, int]:
        """Added (special) token texts -> ids."""
        return {t: i for i, t in self._added.items()}

    def encode(self, text: str, *, add_special_tokens: bool = False) -> Encoded:
        """Token ids, special tokens and anchors of ``text``. O(len(text)). Character offsets
        are looked up for the tokens reported only: converting the whole offsets list to Python
        added about a quarter to the tokenisation's time."""
        enc = self._tok.encode(text, add_special_tokens=add_special_tokens)
        ids: list[int] = enc.ids
        added = self._added
        spans = enc.token_to_chars

        def chars(i: int) -> tuple[int, int]:
            # A token the tokenizer added (BOS with add_special_tokens) has no span in the text.
            return spans(i) or (0, 0)

        specials = []
        if not added.keys().isdisjoint(ids):
            for i, t in enumerate(ids):
                if t in added:
                    start, end = chars(i)
                    if end > start:
                        specials.append((i, start))
        anchors = []
        i = ANCHOR_EVERY
        n = len(ids)
        while i < n:
            # The first token from i on that starts a word; at most ANCHOR_EVERY looked at.
            prev_end = chars(i - 1)[1]
            for j in range(i, min(n, i + ANCHOR_EVERY)):
                start, end = chars(j)
                if start > prev_end or (start < len(text) and text[start].isspace()):
                    if prev_end > 0:
                        anchors.append((j, prev_end))
                    break
                prev_end = end
            i += ANCHOR_EVERY
        return Encoded(ids, specials, anchors)

    def added_at(self, text: str, pos: int, token_id: int) -> bool:
        """Whether ``text`` holds added token ``token_id`` at character ``pos``."""
        content = self._added.get(token_id)
        return content is not None and text.startswith(content, pos)

    def encode_ids(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        return ids


def load_engine_tokenizer(
    path: str | Path, chat_template: str | Path | None = None
) -> EngineTokenizer:
    """The tokenizer of a model directory (or a ``tokenizer.json``) with its chat template.

    ``chat_template`` (a file) overrides the model's own. Raises :class:`UserError` with a reason
    when the files are missing or malformed.
    """
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    tok_json = p / "tokenizer.json" if p.is_dir() else p
    if not tok_json.is_file():
        raise UserError(f"no tokenizer.json at {p}")
    config: dict[str, Any] = {}
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"{cfg_path}: {err}") from None
    source: str | None = None
    if chat_template is not None:
        try:
            source = Path(chat_template).read_text()
        except OSError as err:
            raise UserError(f"chat template {chat_template}: {err.strerror}") from None
    elif (folder / "chat_template.jinja").is_file():
        source = (folder / "chat_template.jinja").read_text()
    else:
        raw = config.get("chat_template")
        if isinstance(raw, list):  # named templates: take "default"
            named = {t.get("name"): t.get("template") for t in raw if isinstance(t, dict)}
            raw = named.get("default")
        source = raw if isinstance(raw, str) else None
    special = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            special[key] = value
    try:
        template = ChatTemplate(source, special) if source is not None else None
        tok = EngineTokenizer(tok_json, template)
        tok.images = load_image_expander(folder, tok.added_tokens, tok.encode_ids)
        return tok
    except Exception as err:
        if isinstance(err, UserError):
            raise
        raise UserError(f"cannot load tokenizer {tok_json}: {err}") from None
