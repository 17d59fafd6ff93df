"""Configurations as data: every field says what it means, and there is one way to JSON and back.

A configuration is a frozen dataclass whose fields are declared with :func:`opt`: the field's
default, its help string (the one description of the field; ``--help`` shows it) and, where the
command line needs them, its flag, metavar, parse type and numeric bounds. The command line is built
from these fields (:mod:`kvharness.cli._config_args`), so no default or help string is written a
second time there.

:func:`to_json_dict` is the one way a configuration becomes JSON: ``config.json`` beside a run's
results, the gateway's ``/status``. A field marked ``secret`` shows only whether it is set
(``"set"`` or null). :func:`from_json` reads a configuration back, accepting the names its fields
had before they were renamed (``formerly``), so a run written by an older version still resumes.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass
from pathlib import PurePath
from typing import Any, TypeVar

import msgspec

__all__ = [
    "BLOCK_SIZE_MAX",
    "SECRET_SET",
    "Option",
    "from_json",
    "mib",
    "nested_config",
    "opt",
    "option",
    "to_json_dict",
    "zero_is_none",
]

T = TypeVar("T")

BLOCK_SIZE_MAX = 1 << 20
"""Largest KV block size (tokens) any option accepts."""

SECRET_SET = "set"
"""What :func:`to_json_dict` shows for a secret field that holds a value."""

_KEY = "kvharness"
"""The key of a field's :class:`Option` in ``dataclasses.Field.metadata``."""


@dataclass(frozen=True, slots=True)
class Option:
    """What a configuration field says about itself (see :func:`opt` for each attribute)."""

    help: str
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    lo: float | None = None
    hi: float | None = None
    above: bool = False
    default_means: str | None = None
    show: Callable[[Any], str] | None = None
    off_flag: str | None = None
    off_help: str | None = None
    negatable: bool = False
    cli: bool = True
    secret: bool = False
    formerly: tuple[str, ...] = ()


def opt(
    default: Any = MISSING,
    *,
    help: str,
    factory: Callable[[], Any] | None = None,
    flags: tuple[str, ...] = (),
    metavar: str | None = None,
    parse: Callable[[str], Any] | None = None,
    lo: float | None = None,
    hi: float | None = None,
    above: bool = False,
    default_means: str | None = None,
    show: Callable[[Any], str] | None = None,
    off_flag: str | None = None,
    off_help: str | None = None,
    negatable: bool = False,
    cli: bool = True,
    secret: bool = False,
    formerly: tuple[str, ...] = (),
) -> Any:
    """A dataclass field that describes itself.

    ``default`` (or ``factory``, for a mutable default; neither: a required field) as in
    :func:`dataclasses.field`. ``help``: what the field means, with its unit; the CLI adds the
    default. Command line: ``flags`` (default ``--field-name``; a bool whose default is True gets a
    flag that turns it off, such as ``--no-metrics``), ``metavar``, ``parse`` (a function of the
    option's text; default from the field's type), bounds ``lo``/``hi`` on a number (``above``:
    ``lo`` itself excluded) that the command line enforces, ``default_means`` (shown as the
    default instead of the value, e.g. what None stands for), ``show`` (formats the default, e.g.
    :func:`mib`), ``off_flag``/``off_help`` (a second flag that sets the field to None),
    ``negatable`` (a bool as ``--x/--no-x``; not given leaves the default), ``cli=False`` (not an
    option, or one the command handles itself). ``secret``: never shown (not in ``repr``, masked by
    :func:`to_json_dict`). ``formerly``: the names the field had in older ``config.json`` files.
    """
    meta = {
        _KEY: Option(
            help=help, flags=flags, metavar=metavar, parse=parse, lo=lo, hi=hi, above=above,
            default_means=default_means, show=show, off_flag=off_flag, off_help=off_help,
            negatable=negatable, cli=cli, secret=secret, formerly=formerly,
        )
    }  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta, repr=not secret)
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


def option(f: Field[Any]) -> Option | None:
    """The :class:`Option` of a dataclass field declared with :func:`opt`, else None."""
    found = f.metadata.get(_KEY)
    return found if isinstance(found, Option) else None


def nested_config(cls: type, name: str) -> type | None:
    """The dataclass type of field ``name`` of ``cls`` when it is itself a configuration."""
    tp = typing.get_type_hints(cls).get(name)
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def mib(value: int) -> str:
    """A byte count as ``"64 MiB"`` when it is a whole number of MiB, else as bytes."""
    return f"{value >> 20} MiB" if value and value % (1 << 20) == 0 else f"{value} bytes"


def zero_is_none(kind: Callable[[str], T]) -> Callable[[str], T | None]:
    """A parse type for an option where 0 stands for None (no limit)."""

    def parse(text: str) -> T | None:
        return kind(text) or None

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def _mask(config: Any, data: dict[str, Any]) -> None:
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        o = option(f)
        if o is not None and o.secret:
            data[f.name] = None if value is None else SECRET_SET
        elif dataclasses.is_dataclass(value) and isinstance(data.get(f.name), dict):
            _mask(value, data[f.name])


def _encode(value: Any) -> Any:
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"a configuration value cannot be {type(value).__name__}: {value!r}")


def to_json_dict(config: Any) -> dict[str, Any]:
    """``config`` (a configuration dataclass, a msgspec Struct or a mapping) as JSON-able values,
    in field order; secret fields show only whether they are set."""
    data = msgspec.to_builtins(config, enc_hook=_encode)
    if not isinstance(data, dict):
        raise TypeError(f"a configuration must be a dataclass, Struct or mapping, got {config!r}")
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        _mask(config, data)
    return data


def _rename(cls: type, data: dict[str, Any]) -> None:
    """Move values stored under a field's former names to its name (nested configs too)."""
    if not dataclasses.is_dataclass(cls):
        return
    for f in dataclasses.fields(cls):
        o = option(f)
        for old in o.formerly if o is not None else ():
            if old in data and f.name not in data:
                data[f.name] = data.pop(old)
        sub = nested_config(cls, f.name)
        if sub is not None and isinstance(data.get(f.name), dict):
            _rename(sub, data[f.name])


C = TypeVar("C")


def _decode(kind: type, value: Any) -> Any:
    if kind is object:
        return value
    if isinstance(kind, type) and issubclass(kind, PurePath) and isinstance(value, str):
        return kind(value)
    raise TypeError(f"expected {getattr(kind, '__name__', kind)}, got {value!r}")


def from_json(cls: type[C], data: bytes | str | Mapping[str, Any]) -> C:
    """The configuration of type ``cls`` in ``data`` (JSON text or decoded values); fields under
    their former names are taken, keys that are no field are ignored. Raises
    :class:`msgspec.DecodeError` (or its :class:`msgspec.ValidationError`) saying what is wrong."""
    raw = msgspec.json.decode(data if isinstance(data, bytes | str) else msgspec.json.encode(data))
    if not isinstance(raw, dict):
        raise msgspec.ValidationError(f"expected a JSON object, got {type(raw).__name__}")
    _rename(cls, raw)
    return msgspec.convert(raw, cls, dec_hook=_decode)
