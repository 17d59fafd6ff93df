"""Command-line options built from a configuration's fields, and the configuration built back.

Each field declared with :func:`kvharness.configs.opt` becomes one option: its flag (default
``--field-name``), its help with the default added, its parse type from the field's type (``int``,
``float``, ``str``, a ``Literal``'s choices, a bool as a flag, a tuple or mapping as a repeatable
option) and its bounds, checked by :func:`kvharness.cli._args.bounded` so that a bad value is one
line naming the option. A field whose type is itself a configuration dataclass contributes its own
fields. :func:`config_from_args` reads the parsed namespace back into the configuration; a
mapping's ``KEY=VALUE`` or ``URL=ENDPOINT`` strings are the command's to convert and pass in.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field
from types import NoneType, UnionType
from typing import Any, Literal, TypeVar, Union

from kvharness.cli._args import bounded
from kvharness.configs import Option, nested_config, option
from kvharness.errors import UserError

__all__ = ["add_option", "add_options", "config_from_args", "option_help"]

C = TypeVar("C")


def _field(cls: type, name: str) -> tuple[Field[Any], Option, Any]:
    """Field ``name`` of ``cls``, its Option and its type with None taken out of a union."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    o = option(f) if f is not None else None
    if f is None or o is None:
        raise TypeError(f"{cls.__name__}.{name} is no field declared with opt(help=...)")
    tp = typing.get_type_hints(cls)[name]
    if typing.get_origin(tp) in (Union, UnionType):
        rest = [a for a in typing.get_args(tp) if a is not NoneType]
        tp = rest[0] if len(rest) == 1 else tp
    return f, o, tp


def option_help(cls: type, name: str) -> str:
    """The help of field ``name`` of ``cls``, for an option a command adds in its own words."""
    return _field(cls, name)[1].help


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _repeated(tp: Any) -> bool:
    return typing.get_origin(tp) in (tuple, list, dict, Mapping)


def _shown(o: Option, default: Any) -> str | None:
    """The default as ``--help`` shows it; None shows none."""
    if o.default_means is not None:
        return o.default_means
    if default is MISSING or default is None or default in ("", (), {}):
        return None
    if o.show is not None:
        return o.show(default)
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, tuple):
        return ", ".join(map(str, default))
    return str(default)


def _parse(o: Option, tp: Any) -> Any:
    if o.parse is not None:
        return o.parse
    if o.lo is not None or o.hi is not None:
        if tp not in (int, float):
            raise TypeError(f"bounds need an int or float field, not {tp}")
        lo = None if o.lo is None else tp(o.lo)
        hi = None if o.hi is None else tp(o.hi)
        return bounded(tp, lo, hi, above=o.above)
    return tp if tp in (int, float) else None


def add_option(parser: Any, cls: type, name: str, **overrides: Any) -> argparse.Action:
    """Add field ``name`` of configuration ``cls`` to ``parser`` (an ArgumentParser or a group)
    as the option its :class:`~kvharness.configs.Option` describes; ``overrides`` are argparse
    keywords that replace the ones derived (``default=None`` to tell whether it was given,
    ``choices`` known only at run time, ``help`` to extend the field's). Works for ``cli=False``
    fields too: that flag only keeps :func:`add_options` from adding them."""
    f, o, tp = _field(cls, name)
    default = _default(f)
    kw: dict[str, Any] = {"dest": name}
    note = _shown(o, default)
    if tp is bool:
        if o.negatable:
            kw.update(action=argparse.BooleanOptionalAction, default=None)
            note = "on" if default else "off"
        elif default:
            kw.update(action="store_false")
            note = "on; this flag turns it off"
        else:
            kw.update(action="store_true")
            note = None
    elif _repeated(tp):
        args = typing.get_args(tp)
        item = args[0] if typing.get_origin(tp) is tuple else str
        kw.update(action="append", default=[], type=o.parse or (item if item is not str else None))
    else:
        kw["default"] = None if default is MISSING else default
        parse = _parse(o, tp)
        if parse is not None:
            kw["type"] = parse
        if typing.get_origin(tp) is Literal:
            kw["choices"] = typing.get_args(tp)
    if "default" in overrides:
        note = None if overrides["default"] is None else note
    text = overrides.pop("help", o.help)
    kw.update(overrides)
    flags = o.flags or (f"--{name.replace('_', '-')}",)
    if tp is not bool and (o.metavar is not None or "choices" not in kw):
        kw.setdefault("metavar", o.metavar or flags[0].lstrip("-").replace("-", "_").upper())
    kw["help"] = (text if note is None else f"{text} (default: {note})").replace("%", "%%")
    kw = {k: v for k, v in kw.items() if v is not None or k == "default"}
    if o.off_flag is None:
        action: argparse.Action = parser.add_argument(*flags, **kw)
        return action
    group = parser.add_mutually_exclusive_group()
    action = group.add_argument(*flags, **kw)
    group.add_argument(
        o.off_flag, dest=name, action="store_const", const=None, default=argparse.SUPPRESS,
        help=(o.off_help or "").replace("%", "%%"),
    )  # fmt: skip
    return action


def add_options(
    parser: Any, cls: type, *, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """Add an option for every field of ``cls`` declared with ``opt(cli=True)`` (the default),
    in field order, and for those of the configurations nested in it; ``overrides`` maps a field
    name to argparse keywords for :func:`add_option`."""
    for f in dataclasses.fields(cls):
        sub = nested_config(cls, f.name)
        if sub is not None:
            add_options(parser, sub, overrides=overrides)
            continue
        o = option(f)
        if o is not None and o.cli:
            add_option(parser, cls, f.name, **dict((overrides or {}).get(f.name, {})))


def _flag(cls: type, name: str) -> str:
    _, o, _ = _field(cls, name)
    flag = o.flags[0] if o.flags else f"--{name.replace('_', '-')}"
    return f"{flag} {o.metavar}" if o.metavar else flag


def config_from_args(cls: type[C], args: argparse.Namespace, **given: Any) -> C:
    """The configuration ``cls`` from options added by :func:`add_options`: ``given`` values
    first, then each option's value; a repeatable option given no value and a negatable flag not
    given leave the field's default. Raises :class:`UserError` for a required repeatable option
    not given and for what the configuration's own checks refuse (its ``ValueError``)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        sub = nested_config(cls, f.name)
        if sub is not None:
            values[f.name] = config_from_args(sub, args)
            continue
        o = option(f)
        if o is None or not o.cli or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if isinstance(value, list):
            if not value:
                if _default(f) is MISSING:
                    raise UserError(f"give at least one {_flag(cls, f.name)}")
                continue
            if typing.get_origin(typing.get_type_hints(cls)[f.name]) in (dict, Mapping):
                raise TypeError(f"{cls.__name__}.{f.name}: convert {value!r} and pass it in")
            value = tuple(value)
        if value is None and o.negatable:
            continue
        values[f.name] = value
    try:
        return cls(**values)
    except ValueError as err:
        raise UserError(str(err)) from None
