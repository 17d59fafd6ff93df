from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvharness.gateway.prompt_hasher import PromptHasher
from kvharness.gateway.tokenizer import (
    ChatTemplate,
    EngineTokenizer,
    TemplateError,
    load_engine_tokenizer,
)
from kvharness.workload.chain import chain_hashes, common_prefix_len

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "swe-agent"
BS = 128


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> EngineTokenizer:
    return load_engine_tokenizer(tiny_model_dir)


def conversations() -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for path in sorted(TRACES.glob("*.traj")):
        history = json.loads(path.read_text())["history"]
        msgs = [
            {
                "role": m["role"]
                if m["role"] in ("system", "user", "assistant", "tool")
                else "user",
                "content": m["content"]
                if isinstance(m["content"], str)
                else json.dumps(m["content"]),
            }
            for m in history
        ]
        out.append((path.name, msgs))
    return out


def test_real_traces_present() -> None:
    assert len(conversations()) >= 20


def test_incremental_equals_full_on_real_agent_trajectories(tok: EngineTokenizer) -> None:
    """Every SWE-agent trajectory, replayed call by call: incremental hashes == full ones."""
    for name, msgs in conversations()[:8]:
        inc = PromptHasher(tok, BS)
        prev = 0
        for k in range(2, len(msgs) + 1):
            if msgs[k - 1]["role"] == "assistant":
                continue
            got = inc.chat(msgs[:k], "s")
            # Only the generation prompt (3 tokens here) and what follows is tokenised again.
            assert got.reused_tokens >= prev - 3, (name, k)
            prev = got.num_tokens
            text = tok.template.render(msgs[:k]) if tok.template else ""
            ids = tok.encode_ids(text)
            assert list(got.token_ids) == ids, (name, k)
            assert list(got.block_hashes) == chain_hashes(ids, BS), (name, k)
        assert inc.stats.incremental == inc.stats.prompts - 1


def test_session_found_by_messages_without_header(tok: EngineTokenizer) -> None:
    _, msgs = conversations()[0]
    h = PromptHasher(tok, BS)
    first = h.chat(msgs[:3], None)
    second = h.chat(msgs[:6], None)
    assert h.stats.incremental == 1 and len(h) == 1
    assert first.session is not None and first.session == second.session  # routed as one session
    # A different conversation is not mistaken for it (its tokens up to where they part are
    # taken over: the two share their system prompt).
    _, other = conversations()[1]
    third = h.chat(other[:3], None)
    assert len(h) == 2 and third.session != first.session and h.stats.shared == 1
    assert h.chat(msgs[:2], "given").session == "given"


def test_sessions_that_end_alike_are_told_apart(tok: EngineTokenizer) -> None:
    """Agents share their system prompt and repeat messages (a harness's nudge, a tool's "No
    matches."): a session is continued only by a request whose earlier messages are all its."""
    system = {"role": "system", "content": "You are a coding agent."}
    nudge = {"role": "user", "content": "No tool was called. Use the tools."}
    h = PromptHasher(tok, BS)
    history = {a: [system, {"role": "user", "content": f"Fix bug {a}."}] for a in "xyz"}
    sessions: dict[str, set[str | None]] = {a: set() for a in "xyz"}
    for turn in range(4):
        for a, msgs in history.items():
            sessions[a].add(h.chat(list(msgs), None).session)  # each request its own list
            msgs += [{"role": "assistant", "content": f"thinking {a}{turn}"}, nudge]
    assert all(len(s) == 1 for s in sessions.values()), sessions
    assert len(set.union(*sessions.values())) == 3


def test_edited_history_still_matches_full(tok: EngineTokenizer) -> None:
    _, msgs = conversations()[2]
    h = PromptHasher(tok, BS, verify_every=1)
    h.chat(msgs[:8], "s")
    edited = [*msgs[:3], {"role": "user", "content": "summary of earlier steps"}, *msgs[8:10]]
    got = h.chat(edited, "s")
    assert list(got.token_ids) == tok.encode_ids(
        tok.template.render(edited) if tok.template else ""
    )
    assert h.stats.mismatches == 0 and h.stats.verified == 1


def test_token_id_prompts_reuse_common_blocks() -> None:
    h = PromptHasher(None, 4)
    a = list(range(10))
    b = [*range(8), 99, 98, 97, 96, 95]
    h.completion_ids(a, "s")
    got = h.completion_ids(b, "s")
    assert list(got.block_hashes) == chain_hashes(b, 4)
    assert got.reused_tokens == 8 and got.num_tokens == 13


def test_text_completions_add_special_tokens(tok: EngineTokenizer) -> None:
    h = PromptHasher(tok, 4)
    got = h.completion_text("def f(x):\n    return x", None)
    assert list(got.token_ids) == tok.encode_ids("def f(x):\n    return x", add_special_tokens=True)
    assert got.token_ids[0] == 0  # the tiny tokenizer's BOS


def test_memory_bound_drops_least_recent(tok: EngineTokenizer) -> None:
    h = PromptHasher(None, 4, max_tokens=25)
    for s in range(5):
        h.completion_ids(list(range(10)), f"s{s}")
    assert len(h) == 2


def test_errors_are_reasons(tok: EngineTokenizer) -> None:
    with pytest.raises(ValueError, match="no tokenizer"):
        PromptHasher(None, 4).chat([{"role": "user", "content": "x"}], None)
    strict = ChatTemplate(
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"
    )
    with pytest.raises(TemplateError, match="system first"):
        PromptHasher(EngineTokenizer(tok.path, strict), 4).chat([{"role": "user"}], None)
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        ChatTemplate("{{ 1 // 0 }}").render([])
    with pytest.raises(ValueError, match="no chat template"):
        PromptHasher(EngineTokenizer(tok.path), 4).chat([{"role": "user", "content": "x"}], None)


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [("", "", 0), ("abc", "abd", 2), ("x" * 1000 + "a", "x" * 1000 + "b", 1000), ("ab", "abc", 2)],
)
def test_common_prefix_len(a: str, b: str, n: int) -> None:
    assert common_prefix_len(a, b) == n


@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_encode_reports_specials_and_anchors_by_their_offsets(
    tok: EngineTokenizer, add_special_tokens: bool
) -> None:
    # The definition, from the tokenizer's full offsets list: an added token with a span in the
    # text is a special; about every ANCHOR_EVERY tokens, the first token that starts a word is
    # an anchor, at the end of the token before it.
    from kvharness.gateway.tokenizer import ANCHOR_EVERY

    _, msgs = conversations()[0]
    assert tok.template is not None
    text = tok.template.render(msgs[:6], add_generation_prompt=True)
    enc = tok.encode(text, add_special_tokens=add_special_tokens)
    full = tok._tok.encode(text, add_special_tokens=add_special_tokens)
    offsets = full.offsets
    assert enc.ids == full.ids and len(enc.ids) > 4 * ANCHOR_EVERY
    added = set(tok._tok.get_added_tokens_decoder())
    assert enc.specials == [
        (i, offsets[i][0])
        for i, t in enumerate(full.ids)
        if t in added and offsets[i][1] > offsets[i][0]
    ]
    assert enc.specials  # the chat template's markers
    expected = []
    for i in range(ANCHOR_EVERY, len(full.ids), ANCHOR_EVERY):
        for j in range(i, min(len(full.ids), i + ANCHOR_EVERY)):
            prev_end, start = offsets[j - 1][1], offsets[j][0]
            if start > prev_end or (start < len(text) and text[start].isspace()):
                if prev_end > 0:
                    expected.append((j, prev_end))
                break
    assert enc.anchors == expected and len(expected) >= 4


def test_plain_text_prompts_resume_from_anchors(tok: EngineTokenizer) -> None:
    """Text completions without special tokens (code, tool output, the bench's text prompts):
    each growing prompt is tokenised from an anchor near its end, and equals a full
    tokenisation."""
    for name, msgs in conversations()[:6]:
        text = ""
        h = PromptHasher(tok, BS)
        for k, m in enumerate(msgs):
            text += m["content"] + "\n"
            got = h.completion_text(text, "s")
            ids = tok.encode_ids(text, add_special_tokens=True)
            assert list(got.token_ids) == ids, (name, k)
            assert list(got.block_hashes) == chain_hashes(ids, BS), (name, k)
        assert h.stats.resume_failures == 0, name
        assert h.stats.incremental >= len(msgs) - 3, name
        # Most of each prompt was taken over rather than tokenised again.
        assert h.stats.tokens_reused > 0.5 * h.stats.tokens_total, name


def test_an_anchor_that_is_no_boundary_is_caught(tok: EngineTokenizer) -> None:
    text = " ".join(f"word{i} = value({i})" for i in range(400))
    h = PromptHasher(tok, BS)
    h.completion_text(text, "s")
    state = h._sessions["s"]
    # As if the tokenizer had merged across the anchors: the old tokens after them differ.
    for i, _ in state.anchors:
        state.ids[i] = (state.ids[i] + 1) % 1024
    longer = text + " tail(1)"
    got = h.completion_text(longer, "s")
    assert h.stats.resume_failures == 1 and got.reused_tokens == 0
    assert list(got.token_ids) == tok.encode_ids(longer, add_special_tokens=True)


class CountingTemplate(ChatTemplate):
    """The model's template, counting its renderings."""

    renders = 0

    def render(self, *args: Any, **kwargs: Any) -> str:
        self.renders += 1
        return super().render(*args, **kwargs)


def test_repeated_prompts_are_not_rendered_or_tokenised_again(tok: EngineTokenizer) -> None:
    assert tok.template is not None
    tmpl = CountingTemplate(tok.template.source, tok.template.special)
    h = PromptHasher(EngineTokenizer(tok.path, tmpl), BS)
    _, msgs = conversations()[3]
    full = tok.encode_ids(tmpl.render(msgs[:5]))
    tmpl.renders = 0
    first = h.chat(msgs[:5], "s")
    again = h.chat(list(msgs[:5]), "s")
    assert tmpl.renders == 1  # the repeat reused the last result
    assert list(again.token_ids) == full and list(again.block_hashes) == chain_hashes(full, BS)
    assert again.reused_tokens == again.num_tokens == first.num_tokens
    # Other template options are another prompt: rendered again.
    other = h.chat(msgs[:5], "s", add_generation_prompt=False)
    assert tmpl.renders == 2 and other.num_tokens < first.num_tokens
    # Without a header, a repeat is found by its messages and is the same session.
    anon = PromptHasher(tok, BS)
    a = anon.chat(msgs[:3], None)
    b = anon.chat(msgs[:3], None)
    assert a.session == b.session and len(anon) == 1 and b.reused_tokens == b.num_tokens
    # Text completions: an identical text is not tokenised again.
    c1 = anon.completion_text("def f(x):\n    return x", "c")
    c2 = anon.completion_text("def f(x):\n    return x", "c")
    assert c2.reused_tokens == c2.num_tokens and list(c2.token_ids) == list(c1.token_ids)


def test_clock_printing_templates_are_rendered_every_time(tok: EngineTokenizer) -> None:
    tmpl = CountingTemplate(
        "{{ strftime_now('%Y') }}{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
    )
    assert tmpl.time_dependent
    h = PromptHasher(EngineTokenizer(tok.path, tmpl), 4)
    msgs = [{"role": "user", "content": "hello there"}]
    h.chat(msgs, "s")
    again = h.chat(msgs, "s")
    assert tmpl.renders == 2  # rendered again; the identical text was still not re-tokenised
    assert again.reused_tokens == again.num_tokens


def _repo_text(msgs: list[dict[str, Any]], k: int) -> str:
    return "".join(m["content"] + "\n" for m in msgs[:k])


def test_a_new_session_takes_over_the_tokens_of_a_prompt_it_begins_like(
    tok: EngineTokenizer,
) -> None:
    """Sessions of one agent share their system prompt and repository context: a new session's
    first prompt is tokenised from near where it leaves the most similar kept prompt, and still
    equals a full tokenisation."""
    _, msgs = conversations()[4]
    shared = _repo_text(msgs, 6)
    h = PromptHasher(tok, BS)
    h.completion_text(shared + "task: fix the first bug", "a")
    h.completion_text("an unrelated prompt " * 30, "b")
    for sid, task in (("c", "task: fix the second bug"), ("d", "task: write the docs")):
        text = shared + task
        got = h.completion_text(text, sid)
        ids = tok.encode_ids(text, add_special_tokens=True)
        assert list(got.token_ids) == ids and list(got.block_hashes) == chain_hashes(ids, BS)
        # All but the last few hundred characters before the task were taken over.
        assert got.reused_tokens > 0.8 * len(tok.encode_ids(shared)), sid
        assert got.session == sid
    assert h.stats.shared == 2 and h.stats.resume_failures == 0
    # Chat prompts do the same through their rendered text (no BOS added: a text completion's
    # tokens are not taken over for them).
    chat = PromptHasher(tok, BS)
    first = chat.chat(msgs[:6], "x")
    other = [*msgs[:5], {"role": "user", "content": "another task"}]
    got = chat.chat(other, "y")
    assert tok.template is not None
    assert list(got.token_ids) == tok.encode_ids(tok.template.render(other))
    assert chat.stats.shared == 1 and got.reused_tokens > 0.5 * first.num_tokens
    h.chat(other, "z")
    assert h.stats.shared == 2  # only text completions kept so far: different special tokens


def test_text_completions_without_a_header_are_found_by_prefix(tok: EngineTokenizer) -> None:
    _, msgs = conversations()[5]
    h = PromptHasher(tok, BS)
    first = h.completion_text(_repo_text(msgs, 4), None)
    second = h.completion_text(_repo_text(msgs, 6), None)  # continues the first prompt
    assert first.session is not None and second.session == first.session
    assert second.reused_tokens > 0.8 * first.num_tokens
    again = h.completion_text(_repo_text(msgs, 6), None)
    assert again.session == first.session and again.reused_tokens == again.num_tokens
    # A prompt that begins like it but does not continue it is another session...
    fork = h.completion_text(_repo_text(msgs, 3) + "something else", None)
    assert fork.session not in (None, first.session) and fork.reused_tokens > 0
    # ...and so is one continuing a session named by its client's header.
    h.completion_text("named " * 200, "named")
    cont = h.completion_text("named " * 200 + "more", None)
    assert cont.session not in (None, "named")
    assert len(h) == 4


def test_the_index_of_beginnings_forgets_dropped_sessions(tok: EngineTokenizer) -> None:
    h = PromptHasher(tok, 4, max_tokens=3000)
    for s in range(40):
        h.completion_text(f"system prompt {'x ' * 300} session {s}", f"s{s}")
    kept = set(h._sessions)
    assert len(kept) < 40
    listed = [sid for bucket in h._by_head.values() for sid in bucket]
    assert set(listed) <= kept and len(listed) == len(set(listed))


def test_a_special_token_the_new_prompt_lacks_is_no_restart_point(tok: EngineTokenizer) -> None:
    """The old prompt has a special token right where the new one goes its own way: the text
    before it (a trailing space) tokenises differently without it, so it is not resumed from."""
    h = PromptHasher(tok, 16)
    h.completion_text("<|begin_of_text|>You are a coding agent. <|begin_of_text|>", "a")
    text = "<|begin_of_text|>You are a coding agent. def f(x):\n    return x + 1\n"
    got = h.completion_text(text, "a")
    assert list(got.token_ids) == tok.encode_ids(text, add_special_tokens=True)


_PIECES = [
    "You are a coding agent. ",
    "def f(x):\n    return x + 1\n",
    "<|begin_of_text|>",
    " ".join(f"word{i}" for i in range(120)),
    "\n\n   indented   text\t with\ttabs ",
    "über naïve café — ünïcödé ",
    "x = [1, 2, 3]  # comment\n" * 12,
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", None]),
            st.lists(st.integers(0, len(_PIECES) - 1), min_size=1, max_size=14),
        ),
        min_size=1,
        max_size=8,
    )
)
@example([("a", [2, 0, 2]), ("a", [2, 0, 1])])  # a special token where the prompts part
def test_prompts_resumed_from_any_kept_prompt_equal_a_full_tokenisation(
    tok: EngineTokenizer, calls: list[tuple[str | None, list[int]]]
) -> None:
    h = PromptHasher(tok, 16)
    for sid, pieces in calls:
        text = "".join(_PIECES[i] for i in pieces)
        got = h.completion_text(text, sid)
        ids = tok.encode_ids(text, add_special_tokens=True)
        assert list(got.token_ids) == ids
        assert list(got.block_hashes) == chain_hashes(ids, 16)
        assert got.session is not None and (sid is None or got.session == sid)
