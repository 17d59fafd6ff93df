from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from kvharness.errors import FormatError, UserError
from kvharness.workload.stats import workload_stats
from kvharness.workload.swe_agent import load_swe_agent
from kvharness.workload.tokenize import load_tokenizer, message_text


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory: pytest.TempPathFactory, traces: Path) -> Path:
    """A real byte-level BPE tokenizer trained here on the trajectories (nothing downloaded)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=2000, show_progress=False)
    files = [str(p) for p in sorted((traces / "swe-agent").glob("*.traj"))[:5]]
    tok.train(files, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_trajectories_load_with_real_token_counts(traces: Path, bpe_path: Path) -> None:
    path = traces / "swe-agent" / "function_calling_simple.traj"
    w = load_swe_agent(path, bpe_path)
    doc = json.loads(path.read_text())
    history = doc["history"]
    tok = load_tokenizer(bpe_path)
    calls = [i for i, m in enumerate(history) if m["role"] == "assistant"]
    session = w.sessions[0]
    assert len(session.turns) == len(calls)
    # Turn k's prompt is every message before the k-th assistant message, tokenised per message.
    for turn, i in zip(session.turns, calls, strict=True):
        expected = sum(len(tok.encode(message_text(m))) for m in history[:i])
        assert turn.input_tokens == expected
    # Messages appended per turn concatenate to the full prompt of the last call.
    appended = [m for t in session.turns for m in (t.messages or ())]
    assert [m["role"] for m in appended] == [m["role"] for m in history[: calls[-1]]]


def test_execution_times_become_gaps(traces: Path) -> None:
    name = "replay__marshmallow-code__marshmallow-1867__function_calling__install-1__marshmallow-code__marshmallow-1867.traj"
    path = traces / "swe-agent" / name
    doc = json.loads(path.read_text())
    w = load_swe_agent(path)
    turns = w.sessions[0].turns
    assert turns[0].gap == 0.0
    assert turns[1].gap == pytest.approx(doc["trajectory"][0]["execution_time"])
    assert turns[1].tool == doc["trajectory"][0]["action"].split()[0]


def test_whole_folder_prompt_growth(traces: Path) -> None:
    w = load_swe_agent(traces / "swe-agent")
    assert len(w.sessions) == 22
    s = workload_stats(w)
    growth = s.prompt_tokens_by_turn
    assert growth[0] < growth[5] < growth[10]  # prompts grow turn by turn
    assert 1500 < growth[0] < 3500  # about 2.1k at the first call (shared/traces/README.md)
    # Conversations only grow: nearly all prompt tokens are reusable as prefix.
    assert s.ideal_hit_ratio_tokens > 0.75


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{\n  "history": [\n    {"role": "user", "content": "x"},,\n  ]\n}', 3, "bad JSON"),
        ('{\n  "trajectory": []\n}', 1, "missing required field `history`"),
        (
            '{\n  "trajectory": [],\n  "history": [{"content": "x"}]\n}',
            3,
            "missing required field `role` - at `$.history[0]`",
        ),
        (
            '{\n  "history": [{"role": "assistant", "content": "x"}],\n  "trajectory": [\n'
            '    {"action": "ls", "execution_time": -2}\n  ]\n}',
            4,
            "Expected `float` >= 0.0 - at `$.trajectory[0].execution_time`",
        ),
        ('{\n  "history": [{"role": "user", "content": "x"}]\n}', 2, "no assistant message"),
        ("[1, 2]", 1, "Expected `object`, got `array`"),
        (
            '{\n  "info": ' + "[" * 5000 + "]" * 5000 + ',\n  "history": []\n}',
            1,
            "JSON nested deeper than the decoder can follow",
        ),
        (
            '{\n  "history": [\n    {"role": "user"},\n    {"role": "assistant", "tool_calls": [{"a": '
            + "[" * 40
            + "]" * 40
            + "}]}\n  ]\n}",
            4,
            "history[1].tool_calls nested deeper than 32 levels",
        ),
        (
            '{\n  "history": [\n    {"role": "assistant", "content": "caf\udce9"}\n  ]\n}',
            3,
            "not UTF-8 text: byte 0xe9 at column 42",
        ),
        (
            '{\n  "history": [{"role": "assistant", "content": [{"text": 3}]}]\n}',
            2,
            "Expected `str`, got `int` - at `$.history[0].content[0].text`",
        ),
        ('\ufeff{"history": []}', 1, "starts with a UTF-8 byte-order mark; save without BOM"),
        (
            '{"history": [\n  {"role": "user", "content": "\\ud800 x"}]}',
            2,
            "bad JSON: unexpected end of escaped utf-16 surrogate pair at column 38",
        ),
    ],
)
def test_malformed_trajectories_name_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.traj"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(FormatError) as info:
        load_swe_agent(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)


def test_missing_tokenizer_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no tokenizer"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(
    ("text", "why"), [("", "the file is empty"), ("\n  \n", "the file is empty")]
)
def test_an_empty_trajectory_has_no_requests(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "empty.traj"
    path.write_text(text)
    with pytest.raises(FormatError) as info:
        load_swe_agent(path)
    assert str(info.value) == f"{path}: no requests: {why}"


def test_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError) as info:
        load_swe_agent(tmp_path)
    assert str(info.value) == f"{tmp_path}: no .traj files found"
