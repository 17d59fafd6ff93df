"""Command-line options built from a configuration's fields: one per field, its default and help
from the field, bounds enforced as one line, and the namespace built back into the config."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

import pytest

from kvharness.cli._args import OneLineParser
from kvharness.cli._config_args import add_option, add_options, config_from_args
from kvharness.configs import mib, opt, zero_is_none
from kvharness.errors import UserError


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    attempts: int = opt(3, help="attempts per turn", metavar="N", lo=1, hi=10)
    wait_s: float = opt(0.5, help="seconds before a retry", flags=("--wait",), lo=0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    urls: tuple[str, ...] = opt(help="a server's URL (repeat for several)", flags=("--url",),
                                metavar="URL", parse=lambda s: s.rstrip("/"))  # fmt: skip
    model: str | None = opt(None, help="model name", default_means="the server's first")
    rate: float = opt(1.0, help="sessions per second", metavar="R", lo=0.0, above=True)
    mode: Literal["a", "b"] = opt("a", help="how to run")
    header: str | None = opt("x-session-id", help="session header", metavar="NAME",
                             off_flag="--no-header", off_help="send no session header")  # fmt: skip
    metrics: bool = opt(True, help="scrape /metrics", flags=("--no-metrics",))
    verbose: bool = opt(False, help="say more")
    ids: bool = opt(True, help="send token ids", negatable=True)
    body_bytes: int = opt(64 << 20, help="largest body, bytes", show=mib)
    timeout_s: float | None = opt(600.0, help="longest silence, seconds (0: forever)",
                                  flags=("--timeout",), parse=zero_is_none(float))  # fmt: skip
    tags: Mapping[str, str] = opt(factory=dict, help="KEY=VALUE tags", metavar="KEY=VALUE")
    hidden: int = opt(7, help="not an option", cli=False)
    inner: Inner = field(default_factory=Inner)
    started_at: float = 0.0

    def __post_init__(self) -> None:
        if self.model == "bad":
            raise ValueError("model 'bad' is refused")


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="t")
    add_options(p, Sample)
    return p


def _help() -> str:
    return " ".join(_parser().format_help().split())


def test_every_option_field_gets_an_option_with_its_help_and_default() -> None:
    text = _help()
    for fragment in [
        "--url URL a server's URL (repeat for several)",
        "--model MODEL model name (default: the server's first)",
        "--rate R sessions per second (default: 1)",
        "--mode {a,b} how to run (default: a)",
        "--header NAME session header (default: x-session-id)",
        "--no-header send no session header",
        "--no-metrics scrape /metrics (default: on; this flag turns it off)",
        "--verbose say more",
        "--ids, --no-ids send token ids (default: on)",
        "--body-bytes BODY_BYTES largest body, bytes (default: 64 MiB)",
        "--timeout TIMEOUT longest silence, seconds (0: forever) (default: 600)",
        "--tags KEY=VALUE KEY=VALUE tags",
        "--attempts N attempts per turn (default: 3)",
        "--wait WAIT seconds before a retry (default: 0.5)",
    ]:
        assert fragment in text, fragment
    assert "--hidden" not in text and "--started-at" not in text and "--inner" not in text


def test_each_flag_belongs_to_one_field() -> None:
    dests = {a.dest for a in _parser()._actions} - {"help"}
    names = {f.name for f in fields(Sample)} | {f.name for f in fields(Inner)}
    assert dests == names - {"hidden", "inner", "started_at"}


def test_the_namespace_builds_the_config_back() -> None:
    argv = ["--url", "http://a/", "--url", "http://b", "--rate", "2.5", "--mode", "b",
            "--no-header", "--no-metrics", "--verbose", "--no-ids", "--timeout", "0",
            "--attempts", "5", "--wait", "0"]  # fmt: skip
    cfg = config_from_args(Sample, _parser().parse_args(argv), tags={"k": "v"})
    assert cfg == Sample(
        urls=("http://a", "http://b"), rate=2.5, mode="b", header=None, metrics=False,
        verbose=True, ids=False, timeout_s=None, tags={"k": "v"},
        inner=Inner(attempts=5, wait_s=0.0),
    )  # fmt: skip


def test_options_not_given_leave_the_fields_defaults() -> None:
    cfg = config_from_args(Sample, _parser().parse_args(["--url", "http://a"]))
    assert cfg == Sample(urls=("http://a",))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "0"], "t: error: argument --rate: expected a number > 0, got '0' (see --help)"),
        (["--attempts", "11"],
         "t: error: argument --attempts: expected an integer >= 1 and <= 10, got '11' (see --help)"),
        (["--wait", "-1"], "t: error: argument --wait: expected a number >= 0, got '-1' (see --help)"),
        (["--mode", "c"], "t: error: argument --mode: invalid choice: 'c' (choose from 'a', 'b')"
                          " (see --help)"),
        (["--header", "h", "--no-header"],
         "t: error: argument --no-header: not allowed with argument --header (see --help)"),
    ],
)  # fmt: skip
def test_bounds_are_enforced_as_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["--url", "http://a", *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_a_required_list_given_no_value_says_which_option() -> None:
    with pytest.raises(UserError, match=r"^give at least one --url URL$"):
        config_from_args(Sample, _parser().parse_args([]))


def test_the_configs_own_checks_become_user_errors() -> None:
    args = _parser().parse_args(["--url", "http://a", "--model", "bad"])
    with pytest.raises(UserError, match=r"^model 'bad' is refused$"):
        config_from_args(Sample, args)


def test_a_mapping_must_be_given_converted() -> None:
    args = _parser().parse_args(["--url", "http://a", "--tags", "k=v"])
    with pytest.raises(TypeError, match="tags"):
        config_from_args(Sample, args)


def test_one_field_can_be_added_with_overrides() -> None:
    p = OneLineParser(prog="t")
    add_option(p, Sample, "rate", default=None)
    add_option(p, Sample, "mode", choices=("a", "b", "both"), help="how: a, b or both")
    add_option(p, Sample, "hidden")
    text = " ".join(p.format_help().split())
    assert "--rate R sessions per second --mode" in text  # no default shown for None
    assert "--mode {a,b,both} how: a, b or both (default: a)" in text
    assert "--hidden HIDDEN not an option (default: 7)" in text
    assert p.parse_args([]).rate is None
    assert p.parse_args(["--mode", "both"]).mode == "both"


def test_a_field_without_its_help_is_refused() -> None:
    with pytest.raises(TypeError, match="started_at"):
        add_option(OneLineParser(prog="t"), Sample, "started_at")


def test_percent_signs_in_help_are_shown_as_written() -> None:
    @dataclass(frozen=True)
    class P:
        share: float = opt(0.5, help="share of prompts, 0-100%")

    p = OneLineParser(prog="t")
    add_options(p, P)
    assert "share of prompts, 0-100% (default: 0.5)" in " ".join(p.format_help().split())
