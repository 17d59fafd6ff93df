"""The field's trace formats: each read from a real public sample (tests/workload/samples, sources
in its SOURCES.md), told apart by detection, refusing bad input with file:line, and written out
and read back unchanged."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvharness.cli import main
from kvharness.errors import FormatError, UserError
from kvharness.workload import conversation, formats
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.load import load_workload
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.recording import Observed, RecordingWriter
from kvharness.workload.stats import workload_stats
from kvharness.workload.synthetic import SyntheticConfig, generate

SAMPLES = Path(__file__).parent / "samples"

# sample, the format detected, requests, sessions, how sharing is known
CASES = [
    ("azure/AzureLLMInferenceTrace_code.head200.csv", "azure", 200, 200, "none"),
    ("azure/AzureLLMInferenceTrace_conv_1week.head5tail5.csv", "azure", 10, 10, "none"),
    ("openhands/harbor-rfc-openhands_trajectory.json", "openhands", 2, 1, "content"),
    ("openhands/openhands-tests-runtime-trajs-basic.json", "openhands", 2, 1, "content"),
    ("mini-swe-agent/harbor-rfc-mini-swe-agent-trajectory.json", "mini-swe-agent", 3, 1, "content"),
    ("mini-swe-agent/mini-swe-agent-tests-local.traj.json", "mini-swe-agent", 2, 1, "content"),
    ("openai-log/litellm_standard_logging_payload.json", "openai-log", 1, 1, "content"),
    ("otel/genai-interlingua_openllmetry_in.json", "otel", 1, 1, "content"),
    ("otel/genai-interlingua_openinference_in.json", "otel", 1, 1, "content"),
    ("otel/inference-perf_prefix_sharing_example.json", "otel", 7, 1, "content"),
    ("dynamo-mooncake/dynamo_mooncake_sessions_doc_example.jsonl", "mooncake", 4, 2, "hashes"),
    ("dynamo-mooncake/dynamo_agentic_mooncake_test_rows.jsonl", "mooncake", 2, 1, "hashes"),
    ("dynamo-mooncake/mooncake_conversation_trace_excerpt.jsonl", "mooncake", 12, 12, "hashes"),
    ("atif/harbor-rfc-example.trajectory.json", "atif", 2, 1, "content"),
    (
        "atif/harbor-golden-terminus_2-hello-world-invalid-json.trajectory.json",
        "atif",
        4,
        1,
        "content",
    ),
]


@pytest.mark.parametrize(("sample", "name", "requests", "sessions", "sharing"), CASES)
def test_each_public_sample_loads_as_its_format(
    sample: str, name: str, requests: int, sessions: int, sharing: str
) -> None:
    path = SAMPLES / sample
    assert formats.detect(path).name == name
    w = load_workload(str(path))
    s = workload_stats(w)
    assert (s.format, s.requests, s.sessions, s.sharing) == (name, requests, sessions, sharing)
    assert s.total_input_tokens > 0 and s.total_output_tokens > 0
    named = load_workload(str(path), fmt=name)
    assert named.sessions == w.sessions


def test_openhands_gaps_are_the_tool_times_its_events_record() -> None:
    w = load_workload(str(SAMPLES / "openhands/harbor-rfc-openhands_trajectory.json"))
    (session,) = w.sessions
    # the run action at 06:10:38.391633 and its observation at 06:10:39.080817
    assert session.turns[1].gap == pytest.approx(0.689184, abs=1e-6)
    # per-call usage from model_response, not the accumulated llm_metrics
    assert [t.output_tokens for t in session.turns] == [1042, 44]


def test_agentic_rows_add_tool_wait_to_the_delay(tmp_path: Path) -> None:
    w = load_workload(
        str(SAMPLES / "dynamo-mooncake/dynamo_agentic_mooncake_test_rows.jsonl"), block_size=4
    )
    (session,) = w.sessions
    assert session.turns[1].gap == pytest.approx(0.005)  # delay 2 ms + tool_wait_ms 3 ms


def test_azure_says_sharing_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["workload", "stats", str(SAMPLES / "azure/AzureLLMInferenceTrace_code.head200.csv")])
        == 0
    )
    out = capsys.readouterr().out
    assert "azure" in out and "not recorded" in out and "n/a" in out


def test_a_format_name_overrides_detection_and_unknown_names_are_listed(tmp_path: Path) -> None:
    trace = SAMPLES / "dynamo-mooncake/mooncake_conversation_trace_excerpt.jsonl"
    with pytest.raises(FormatError, match=r"excerpt\.jsonl:\d+: "):
        load_workload(str(trace), fmt="otel")
    with pytest.raises(
        UserError, match="unknown format 'nope'; formats are: kvharness, recording, mooncake"
    ):
        load_workload(str(trace), fmt="nope")


def test_an_unknown_file_is_told_which_formats_kvharness_reads(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": 1}\n')
    with pytest.raises(FormatError) as info:
        load_workload(str(odd))
    message = str(info.value)
    assert message.startswith(f"{odd}: not a trace format kvharness knows")
    for f in formats.formats():
        assert f.name in message


# a malformed record of each format, and the line it is on
MALFORMED = {
    "azure": ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,48,1\n"
              "2023-11-16 18:17:04.0,x,2\n", 3),
    "mooncake": ("t.jsonl", '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n'
                 '{"timestamp": 1, "input_length": -4, "output_length": 1, "hash_ids": [1]}\n', 2),
    "openai-log": ("t.jsonl", '{"messages": [{"role": "user", "content": "hi"}], "timestamp": 1}\n'
                   '{"messages": [{"role": "user", "content": "hi"}], "timestamp": "soon"}\n', 2),
    "openai-log-role": ("t.jsonl", '{"messages": [{"role": "user", "content": "hi"}], "timestamp": 1}\n'
                        '{"messages": [{"role": 5, "content": "hi"}], "timestamp": 2}\n', 2),
    "otel": ("t.json", '{"spans": [\n {"start_time": "2026-01-01T00:00:00", "name": "chat a",'
             ' "attributes": {"gen_ai.input.messages": "[]", "gen_ai.usage.input_tokens": 3}},\n'
             ' {"start_time": "later", "name": "chat b", "attributes": {}}\n]}\n', 3),
    "atif": ("t.json", '{"schema_version": "ATIF-v1.5", "session_id": "s", "steps": [\n'
             ' {"source": "user", "message": "hi"},\n'
             ' {"source": "agent", "message": "ok", "metrics": {"prompt_tokens": "many"}}\n]}\n', 3),
    "openhands": ("t.json", '[\n {"id": 0, "source": "user", "action": "message", "args": {"content": "hi"}},\n'
                  ' {"id": 1, "source": "agent", "action": "run", "timestamp": 7}\n]\n', 3),
    "mini-swe-agent": ("t.traj.json", '{"trajectory_format": "mini-swe-agent-1.1", "messages": [\n'
                       ' {"role": "user", "content": "hi"},\n'
                       ' {"role": "assistant", "content": "ok", "extra": {"timestamp": -1}}\n]}\n', 3),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_record_is_named_by_file_and_line(tmp_path: Path, name: str) -> None:
    filename, text, line = MALFORMED[name]
    path = tmp_path / filename
    path.write_text(text)
    with pytest.raises(FormatError) as info:
        load_workload(str(path), fmt=name.removesuffix("-role"), block_size=4)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert "\n" not in str(info.value)


# --- writing out and reading back ---------------------------------------------------------------


def _shape(w: Workload) -> list[tuple[str, float, list[tuple[int, int, float, tuple[int, ...]]]]]:
    """Sessions as (id, start, turns), each turn (tokens, output, gap, its blocks numbered by
    first appearance over the workload): equal shapes mean equal lengths, gaps and sharing."""
    ids: dict[int, int] = {}
    starts = w.arrival.start_times(w.sessions)
    out = []
    for t0, s in sorted(
        zip(starts, w.sessions, strict=True), key=lambda x: (round(x[0], 4), x[1].id)
    ):
        turns = [
            (
                t.input.num_tokens,
                t.output_tokens,
                t.gap,
                tuple(ids.setdefault(h, len(ids)) for h in t.input.hashes),
            )
            for t in s.turns
        ]
        out.append((s.id, t0, turns))
    return out


def _same(a: Workload, b: Workload) -> None:
    sa, sb = _shape(a), _shape(b)
    assert [(i, [t[:2] + t[3:] for t in ts]) for i, _, ts in sa] == [
        (i, [t[:2] + t[3:] for t in ts]) for i, _, ts in sb
    ]
    for (_, ta, turns_a), (_, tb, turns_b) in zip(sa, sb, strict=True):
        assert tb == pytest.approx(ta, abs=1e-5)
        assert [t[2] for t in turns_b] == pytest.approx([t[2] for t in turns_a], abs=1e-5)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    """Small workloads whose prompts share blocks in arbitrary ways: each turn's prompt is a
    chain over a few content pieces drawn from a small pool, so prefixes repeat within and
    across sessions; gaps, tools, starts and block sizes vary."""
    block_size = draw(st.sampled_from([1, 4, 16]))
    sessions = []
    for n in range(draw(st.integers(1, 4))):
        turns = []
        for i in range(draw(st.integers(1, 4))):
            builder = ChainBuilder(block_size)
            for seed in draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)):
                builder.extend_segment(seed, draw(st.integers(0, 9)) + 1)
            gap = (
                0.0
                if i == 0
                else draw(st.floats(0, 500, allow_nan=False).map(lambda g: round(g, 3)))
            )
            tool = None if i == 0 else draw(st.sampled_from([None, "bash", "edit"]))
            turns.append(Turn(builder.chain(), draw(st.integers(0, 300)), gap, tool))
        start = draw(st.floats(0, 1000).map(lambda t: round(t, 3)))
        sessions.append(
            Session(f"s{n}:{draw(st.sampled_from(['a', 'b/c', 'd e']))}", tuple(turns), start)
        )
    return Workload(tuple(sessions), block_size, "w", Arrival("trace"))


_COUNT = itertools.count()
ROUND_TRIP = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("name", [f.name for f in formats.writable()])
@ROUND_TRIP
@given(workload=workloads())
def test_every_written_format_reads_back_the_same_workload(
    tmp_path: Path, name: str, workload: Workload
) -> None:
    out = tmp_path / f"out-{name}-{next(_COUNT)}"
    formats.save_as(workload, out, name)
    back = load_workload(str(out), block_size=workload.block_size)
    assert formats.detect(out).name == name
    _same(workload, back)


@pytest.mark.parametrize("name", [f.name for f in formats.writable()])
def test_a_synthetic_and_a_real_workload_survive_every_format(
    tmp_path: Path, name: str, traces: Path
) -> None:
    for source in (
        generate(SyntheticConfig(sessions=6, seed=3, steps_median=6.0, repo_tokens_median=3000.0)),
        load_workload(str(traces / "swe-agent")),
    ):
        out = tmp_path / f"{source.name}.{name}"
        assert main(["workload", "convert", "--to", name, _spec(source, tmp_path), str(out)]) == 0
        back = load_workload(str(out), block_size=source.block_size)
        _same(source, back)
        assert math.isclose(
            workload_stats(back).ideal_hit_ratio_tokens,
            workload_stats(source).ideal_hit_ratio_tokens,
        )


def _spec(w: Workload, folder: Path) -> str:
    """A workload saved in kvharness's own format, for the CLI to read."""
    path = folder / f"{w.name}.kvh.jsonl"
    formats.save_as(w, path, "kvharness")
    return str(path)


def test_the_formats_listing_names_what_is_read_and_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["workload", "formats"]) == 0
    out = capsys.readouterr().out
    for f in formats.formats():
        assert f.name in out


def test_otel_output_is_otlp_json_with_genai_attributes(tmp_path: Path) -> None:
    w = generate(SyntheticConfig(sessions=2, seed=1, steps_median=3.0, repo_tokens_median=1000.0))
    out = tmp_path / "spans.jsonl"
    formats.save_as(w, out, "otel")
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == len(w.sessions)
    spans = [
        sp
        for line in lines
        for r in line["resourceSpans"]
        for s in r["scopeSpans"]
        for sp in s["spans"]
    ]
    attrs = [{a["key"]: a["value"] for a in sp["attributes"]} for sp in spans]
    chats = [a for a in attrs if a["gen_ai.operation.name"]["stringValue"] == "chat"]
    assert len(chats) == w.num_turns
    assert {a["gen_ai.conversation.id"]["stringValue"] for a in chats} == {s.id for s in w.sessions}
    tools = [a for a in attrs if a["gen_ai.operation.name"]["stringValue"] == "execute_tool"]
    assert len(tools) == sum(1 for s in w.sessions for t in s.turns[1:] if t.gap > 0 or t.tool)


# --- a peer tool reads what kvharness writes ----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
AIPERF = ROOT / ".venv-aiperf" / "bin" / "python"


def _aiperf(trace: Path, block_size: int) -> dict[str, object]:
    """What NVIDIA AIPerf's own Mooncake loader makes of ``trace`` (tests/workload/aiperf_probe.py,
    in AIPerf's environment: `make aiperf`)."""
    assert AIPERF.exists(), f"no AIPerf environment at {AIPERF}: run `make aiperf`"
    probe = Path(__file__).with_name("aiperf_probe.py")
    done = subprocess.run(
        [str(AIPERF), str(probe), str(trace), "--block-size", str(block_size), "--turns"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_aiperf_reads_a_converted_recording_request_for_request(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    writer = RecordingWriter(rec)
    t = 1000.0
    for turn in range(3):
        for s in range(4):
            builder = ChainBuilder(16)
            builder.extend_tokens([7] * 40 + [s] * (10 * (turn + 1)))
            chain = builder.chain()
            writer.write(
                Observed(
                    f"agent-{s}",
                    False,
                    t,
                    t + 0.5,
                    chain,
                    200,
                    "/v1/chat/completions",
                    output_tokens=5 + s,
                )
            )
            t += 1.0 + s
    writer.close()
    workload = load_workload(str(rec))
    out = tmp_path / "rec.mooncake.jsonl"
    assert main(["workload", "convert", str(rec), str(out), "--to", "mooncake"]) == 0
    seen = _aiperf(out, workload.block_size)
    assert seen["requests"] == workload.num_turns == 12
    assert seen["sessions_turns"] == {s.id: len(s.turns) for s in workload.sessions}
    turns = seen["turns"]
    assert isinstance(turns, dict)
    for s in workload.sessions:
        assert [row[2] for row in turns[s.id]] == [t.output_tokens for t in s.turns]
        assert [row[1] for row in turns[s.id][1:]] == pytest.approx(
            [t.gap * 1000 for t in s.turns[1:]], abs=1e-3
        )


def test_a_log_without_session_ids_is_split_into_sessions_by_shared_prefix(tmp_path: Path) -> None:
    system = {"role": "system", "content": "You are a coding agent. " * 80}
    log = tmp_path / "proxy.jsonl"
    lines = []
    history = {
        a: [system, {"role": "user", "content": f"task {a}: " + "fix the bug " * 60}] for a in "ab"
    }
    t = 100.0
    for step in range(3):
        for agent in "ab":
            lines.append(
                {
                    "startTime": t,
                    "endTime": t + 1.0,
                    "model": "m",
                    "messages": list(history[agent]),
                    "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 7}},
                }
            )
            history[agent] += [
                {"role": "assistant", "content": f"step {step}"},
                {"role": "tool", "content": "output " * 50},
            ]
            t += 2.0
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    w = load_workload(str(log))
    assert workload_stats(w).format == "openai-log"
    assert sorted(len(s.turns) for s in w.sessions) == [3, 3]
    for s in w.sessions:
        assert [t.output_tokens for t in s.turns] == [7, 7, 7]
        # each call starts 4 s after its session's previous one, which took 1 s
        assert [t.gap for t in s.turns] == pytest.approx([0.0, 3.0, 3.0])
        assert s.turns[0].messages is not None and s.turns[1].messages is not None
        assert len(s.turns[1].messages) == 2  # the previous reply and the tool's output
    assert workload_stats(w).ideal_hit_ratio_tokens > 0.5


def test_atif_is_written_only_into_a_new_or_empty_folder(tmp_path: Path) -> None:
    w = generate(SyntheticConfig(sessions=2, seed=1, steps_median=2.0, repo_tokens_median=500.0))
    out = tmp_path / "atif"
    assert main(["workload", "convert", _spec(w, tmp_path), str(out), "--to", "atif"]) == 0
    assert len(list(out.iterdir())) == 2
    with pytest.raises(UserError, match="new folder"):
        formats.save_as(w, out, "atif")


def test_trajectories_without_content_share_nothing_across_files(tmp_path: Path) -> None:
    step = {
        "source": "agent",
        "message": "",
        "metrics": {"prompt_tokens": 300, "completion_tokens": 5},
    }
    for name in ("a", "b"):
        doc = {"schema_version": "ATIF-v1.5", "session_id": name, "steps": [step, step]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    w = load_workload(str(tmp_path))
    assert [len(s.turns) for s in w.sessions] == [2, 2]
    assert workload_stats(w).ideal_hit_ratio_tokens == 0.0


def test_a_folder_of_trajectories_loads_the_tokenizer_once(
    traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[object] = []
    real = conversation.load_tokenizer

    def counted(path: object = None) -> object:
        loads.append(path)
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(conversation, "load_tokenizer", counted)
    w = load_workload(str(traces / "swe-agent"))
    assert len(w.sessions) == 22
    assert loads == [None]
