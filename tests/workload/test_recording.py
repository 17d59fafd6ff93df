"""Recordings: what the writer appends loads back as the workload it saw, whole parts or torn
ones, rotated or not, across restarts; damage is named by file and line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from kvharness.cli import main
from kvharness.errors import FormatError
from kvharness.workload import format as wformat
from kvharness.workload import recording
from kvharness.workload.chain import BlockChain, block_hash, chain_hashes
from kvharness.workload.images import Image
from kvharness.workload.load import load_workload
from kvharness.workload.recording import (
    Observed,
    RecordingWriter,
    is_recording,
    load_recording,
    recording_parts,
)

BS = 4


def _chain(ids: list[int]) -> BlockChain:
    hashes = chain_hashes(ids, BS)
    if len(ids) % BS:
        hashes.append(block_hash(hashes[-1] if hashes else 0, ids[len(hashes) * BS :]))
    return BlockChain(BS, tuple(hashes), len(ids))


def _observed(
    session: str, ids: list[int], t: float, *, messages: list[dict[str, str]] | None = None,
    status: int = 200, inferred: bool = False, output: int = 3,
) -> Observed:  # fmt: skip
    return Observed(
        session=session, inferred=inferred, arrival=t, end=t + 0.5, chain=_chain(ids),
        status=status, path="/v1/chat/completions", model="m", replica="http://r:1",
        reason="affinity", prompt_tokens=len(ids), cached_tokens=0, output_tokens=output,
        token_ids=ids, messages=messages,
    )  # fmt: skip


def _agent_traffic(writer: RecordingWriter, sessions: int = 3, turns: int = 4) -> None:
    """``sessions`` interleaved agent sessions of ``turns`` growing prompts each."""
    prompts = {s: [100 + s, 7, 7, 7, 9] for s in range(sessions)}
    history = {s: [{"role": "system", "content": "go"}] for s in range(sessions)}
    t = 1000.0
    for turn in range(turns):
        for s in range(sessions):
            history[s].append({"role": "user", "content": f"step {turn}"})
            writer.write(_observed(f"s{s}", list(prompts[s]), t, messages=list(history[s])))
            prompts[s] += [turn, s, 1, 2, 3]
            history[s].append({"role": "assistant", "content": f"did {turn}"})
            t += 1.0


def test_requests_load_back_as_sessions_with_gaps_ids_and_messages(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path / "rec", content=True)
    _agent_traffic(writer)
    writer.close()
    w = load_recording(tmp_path / "rec")
    assert [s.id for s in w.sessions] == ["s0", "s1", "s2"]
    assert w.block_size == BS and w.num_turns == 12
    s1 = w.sessions[1]
    assert s1.start == 1.0
    # Each session's requests are 3 s apart and each answer took 0.5 s: 2.5 s of tool time.
    assert [t.gap for t in s1.turns] == [0.0, 2.5, 2.5, 2.5]
    assert s1.turns[2].prompt_ids == (101, 7, 7, 7, 9, 0, 1, 1, 2, 3, 1, 1, 1, 2, 3)
    assert s1.turns[2].input == _chain(list(s1.turns[2].prompt_ids or ()))
    assert s1.turns[0].messages == (
        {"role": "system", "content": "go"},
        {"role": "user", "content": "step 0"},
    )
    assert s1.turns[1].messages == (
        {"role": "assistant", "content": "did 0"}, {"role": "user", "content": "step 1"},
    )  # fmt: skip
    assert w.meta["requests"] == 12 and w.meta["not_answered"] == 0


def test_later_requests_of_a_session_store_only_what_is_new(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path, content=True)
    _agent_traffic(writer, sessions=1, turns=3)
    lines = [json.loads(x) for x in recording_parts(tmp_path)[0].read_text().splitlines()]
    header, first, second = lines[0], lines[1], lines[2]
    assert header["format"] == "kvharness-recording" and header["block_size"] == BS
    assert first.get("keep", 0) == 0 and second["keep"] == 1
    assert second["ids_keep"] == 5 and second["ids"] == [0, 0, 1, 2, 3]
    assert second["messages_keep"] == 2 and len(second["messages"]) == 2
    assert "ids" not in json.loads(_hashes_only_line(tmp_path / "hashes-only")), (
        "content is kept only when asked for"
    )


def test_images_are_recorded_once_each_and_load_back_in_place(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path)
    a, b = Image(2, 4, 640, 400, 11), Image(8, 4, 640, 400, 12)
    for t, (ids, images) in enumerate([(list(range(7)), (a,)), (list(range(13)), (a, b))]):
        o = _observed("s", ids, 10.0 + t)
        writer.write(dataclasses.replace(o, images=images))
    writer.write(dataclasses.replace(_observed("s", list(range(13)), 12.0), images=(b,)))
    lines = [json.loads(x) for x in recording_parts(tmp_path)[0].read_text().splitlines()[1:]]
    assert [(x.get("images_keep", 0), len(x.get("images") or ())) for x in lines] == [
        (0, 1), (1, 1), (0, 1),  # the screenshot before dropped: nothing kept
    ]  # fmt: skip
    w = load_recording(tmp_path)
    assert [t.images for t in w.sessions[0].turns] == [(a,), (a, b), (b,)]
    part = recording_parts(tmp_path)[0]
    lines = part.read_text().splitlines(keepends=True)
    part.write_text(lines[0] + lines[1] + lines[2].replace('"images_keep":1', '"images_keep":3'))
    with pytest.raises(FormatError, match=rf"{part}:3: .*images_keep=3 but its previous request"):
        load_recording(tmp_path)
    part.write_text(lines[0] + lines[1].replace('"offset":2', '"offset":5'))
    with pytest.raises(FormatError, match=rf"{part}:2: .*past the prompt's 7 tokens"):
        load_recording(tmp_path)


def _hashes_only_line(folder: Path) -> str:
    writer = RecordingWriter(folder)
    writer.write(_observed("a", [1, 2, 3, 4, 5], 1.0, messages=[{"role": "user", "content": "x"}]))
    return recording_parts(folder)[0].read_text().splitlines()[1]


def test_content_kept_for_delta_coding_is_bounded_messages_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the content budget the least recent session's last request is forgotten (messages
    count, not only token ids), and its next request is written whole."""
    monkeypatch.setattr(recording, "_KEPT_CONTENT_BYTES", 3000)
    writer = RecordingWriter(tmp_path, content=True)
    big = [{"role": "user", "content": "x" * 1000}]
    for sid in ("a", "b", "c"):
        writer.write(Observed(sid, False, 1.0, 1.5, _chain([1, 2]), 200, "/v1/chat/completions",
                              messages=big))  # fmt: skip
    for sid in ("a", "c"):
        writer.write(Observed(sid, False, 2.0, 2.5, _chain([1, 2]), 200, "/v1/chat/completions",
                              messages=[*big, {"role": "user", "content": "more"}]))  # fmt: skip
    a, c = [json.loads(x) for x in recording_parts(tmp_path)[0].read_text().splitlines()[4:]]
    assert a.get("messages_keep", 0) == 0 and len(a["messages"]) == 2  # "a" was forgotten
    assert c["messages_keep"] == 1 and len(c["messages"]) == 1
    assert load_recording(tmp_path).sessions[0].turns[1].messages == (
        {"role": "user", "content": "more"},
    )


def test_rotated_parts_load_as_one_recording(tmp_path: Path) -> None:
    whole, rotated = tmp_path / "whole", tmp_path / "rotated"
    _agent_traffic(RecordingWriter(whole, content=True), turns=6)
    _agent_traffic(RecordingWriter(rotated, content=True, max_part_bytes=600), turns=6)
    assert len(recording_parts(whole)) == 1 and len(recording_parts(rotated)) > 3
    assert load_recording(rotated).sessions == load_recording(whole).sessions


def test_a_restarted_writer_starts_the_next_part_and_names_sessions_apart(tmp_path: Path) -> None:
    for _ in range(2):
        writer = RecordingWriter(tmp_path)
        sid = writer.infer_session(_chain([1, 2, 3, 4, 5]))
        writer.write(_observed(sid, [1, 2, 3, 4, 5], 1.0, inferred=True))
        writer.close()
    assert [p.name for p in recording_parts(tmp_path)] == ["part-000001.jsonl", "part-000002.jsonl"]
    assert len(load_recording(tmp_path).sessions) == 2


def test_sessions_without_a_name_are_inferred_from_the_prompt(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path)
    a = writer.infer_session(_chain([1, 2, 3, 4, 5, 6]))
    writer.write(_observed(a, [1, 2, 3, 4, 5, 6], 1.0))
    b = writer.infer_session(_chain([1, 2, 3, 9, 9]))  # same first block, then differs
    writer.write(_observed(b, [1, 2, 3, 9, 9], 2.0))
    assert b != a
    # Continues a: its full block (1, 2, 3, 4) begins this prompt (the partial 5, 6 changed).
    assert writer.infer_session(_chain([1, 2, 3, 4, 5, 7, 8, 8, 8])) == a
    assert writer.infer_session(_chain([1, 2, 3, 9, 9, 1, 1, 1])) == b
    assert writer.infer_session(_chain([5, 5])) not in (a, b)


def test_unanswered_requests_are_counted_not_replayed(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path)
    writer.write(_observed("a", [1, 2, 3, 4, 5], 1.0))
    writer.write(_observed("a", [1, 2, 3, 4, 5, 6], 2.0, status=499))
    writer.write(_observed("b", [7, 7], 2.5, status=502))
    w = load_recording(tmp_path)
    assert [s.id for s in w.sessions] == ["a"] and w.num_turns == 1
    assert w.meta["requests"] == 3 and w.meta["not_answered"] == 2


def test_a_torn_last_line_is_dropped_and_damage_elsewhere_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = RecordingWriter(tmp_path)
    _agent_traffic(writer, sessions=1, turns=3)
    part = recording_parts(tmp_path)[0]
    good = part.read_bytes()
    part.write_bytes(good[:-7])  # the last request cut short, as by a crash mid-write
    assert load_recording(tmp_path).num_turns == 2
    assert f"{part}:4: dropped a torn last line" in capsys.readouterr().err
    lines = good.splitlines(keepends=True)
    part.write_bytes(lines[0] + b'{"session": "s0"\n' + b"".join(lines[2:]))
    with pytest.raises(FormatError) as err:
        load_recording(tmp_path)
    assert str(err.value).startswith(f"{part}:2: ")


def test_a_part_is_published_with_its_header_and_a_headerless_one_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = RecordingWriter(tmp_path, max_part_bytes=1)
    _agent_traffic(writer, sessions=1, turns=3)
    parts = recording_parts(tmp_path)
    assert len(parts) == 3 and sorted(p.name for p in tmp_path.iterdir()) == [
        p.name for p in parts
    ]  # no staging file left behind
    assert all(json.loads(p.read_bytes().splitlines()[0])["part"] for p in parts)
    # A part whose header was torn (an operating-system crash just after it was linked).
    (tmp_path / "part-000004.jsonl").write_bytes(b'{"format": "kvharness-rec')
    assert load_recording(tmp_path).num_turns == 3
    assert "part-000004.jsonl: skipped a part without its header" in capsys.readouterr().err


def test_parts_at_different_block_sizes_are_refused(tmp_path: Path) -> None:
    writer = RecordingWriter(tmp_path)
    writer.write(_observed("a", [1, 2, 3, 4, 5], 1.0))
    writer.write(Observed("b", False, 2.0, 2.5, BlockChain(8, (5,), 3), 200, "/v1/completions"))
    assert len(recording_parts(tmp_path)) == 2
    with pytest.raises(FormatError, match=r"different block sizes: 4 .*, 8 "):
        load_recording(tmp_path)


def test_every_workload_command_takes_a_recording(tmp_path: Path) -> None:
    _agent_traffic(RecordingWriter(tmp_path / "rec", content=True))
    assert is_recording(tmp_path / "rec") and is_recording(recording_parts(tmp_path / "rec")[0])
    assert not is_recording(tmp_path)
    w = load_workload(str(tmp_path / "rec"))
    assert w.num_turns == 12
    # A recording converts to a workload file without loss, exact token ids included (the
    # file names its source in its meta: still a workload file, not a recording).
    wformat.save(w, tmp_path / "w.jsonl")
    assert "kvharness-recording" in (tmp_path / "w.jsonl").read_text().splitlines()[0]
    assert not is_recording(tmp_path / "w.jsonl")
    assert load_workload(str(tmp_path / "w.jsonl")).sessions == w.sessions
    assert wformat.load(tmp_path / "w.jsonl").sessions == w.sessions
    schema = json.loads(wformat.SCHEMA_PATH.read_text())
    defs = schema["$defs"]
    for line in (tmp_path / "w.jsonl").read_text().splitlines()[1:]:
        jsonschema.validate(json.loads(line), {**defs["Session"], "$defs": defs})


def test_an_empty_folder_is_not_a_recording(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no recording parts"):
        load_recording(tmp_path)


def test_workload_stats_reads_a_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _agent_traffic(RecordingWriter(tmp_path / "rec"))
    assert main(["workload", "stats", str(tmp_path / "rec"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["requests"] == 12 and stats["sessions"] == 3 and stats["block_size"] == BS


def test_the_simulator_runs_a_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _agent_traffic(RecordingWriter(tmp_path / "rec"))
    code = main(
        ["sim", "--workload", str(tmp_path / "rec"), "--cluster", "2xH100:llama-3.1-8b",
         "--policy", "round_robin,session", "--executor", "serial", "--out", str(tmp_path / "sim")]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "round_robin" in printed and "session" in printed
