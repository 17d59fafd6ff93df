"""The static scan of an agent's change: each forbidden construct is found with its file and line,
only on lines the agent added or changed; the per-task allow-list works; ordinary code passes."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest

from kvharness.env.scan import FORBIDDEN, scan_changes
from kvharness.env.workspace import Change

BEFORE = textwrap.dedent(
    """\
    import os
    import sys


    def add(a, b):
        return a - b
    """
)


def _scan(after: str, before: str | None = BEFORE, allow: tuple[str, ...] = ()) -> list[str]:
    old = before.encode() if before is not None else None
    return scan_changes([Change("pkg/mod.py", old, after.encode())], allow)


def _appended(code: str) -> str:
    """BEFORE with the bug fixed and ``code`` appended from line 7 on."""
    return BEFORE.replace("a - b", "a + b") + textwrap.dedent(code)


@pytest.mark.parametrize(
    ("code", "key"),
    [
        ("import pytest\n", "pytest"),
        ("import _pytest.reports as r\n", "_pytest"),
        ("from _pytest import junitxml\n", "_pytest"),
        ("from pluggy import HookimplMarker\n", "pluggy"),
        ("import atexit\n", "atexit"),
        ("from atexit import register\n", "atexit"),
        ("sys.modules['x'] = None\n", "sys.modules"),
        ("sys.meta_path.insert(0, object())\n", "sys.meta_path"),
        ("sys.path_hooks.append(len)\n", "sys.path_hooks"),
        ("import importlib\n", "importlib"),
        ("from importlib import import_module\n", "importlib"),
        ("import builtins\n", "builtins"),
        ("__builtins__['open'] = None\n", "__builtins__"),
        ("os._exit(0)\n", "os._exit"),
        ("from os import _exit\n", "os._exit"),
        ("f = sys._getframe(1)\n", "sys._getframe"),
        ("import inspect\n", "inspect"),
        ("import gc\n", "gc"),
        ("x = f.f_back.f_globals\n", ".f_back"),
        ("sys.settrace(None)\n", "sys.settrace"),
        ("sys.setprofile(None)\n", "sys.setprofile"),
        ("sys.exit(0)\n", "sys.exit"),
        ("__import__('pytest')\n", "__import__"),
        ("exec('x = 1')\n", "exec"),
        ("getattr(sys, 'mod' + 'ules')\n", "getattr(module)"),
        ("import threading\n", "threading"),
        ("pid = os.fork()\n", "os.fork"),
        ("subs = object.__subclasses__()\n", ".__subclasses__"),
        ("def __del__(self):\n    pass\n", "def __del__"),
        ("import weakref\n", "weakref"),
        ("import asyncio\n", "asyncio"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "concurrent"),
        ("cells = add.__closure__\n", ".__closure__"),
        ("code = add.__code__\n", ".__code__"),
        ("m = os.sys.modules\n", "sys.modules"),
        ("os.sched_setaffinity(0, {1})\n", "os.sched_setaffinity"),
        ("os.nice(-5)\n", "os.nice"),
    ],
)
def test_each_forbidden_construct_is_found_with_file_and_line(code: str, key: str) -> None:
    found = _scan(_appended(code))
    assert found, code
    assert found[0].startswith("pkg/mod.py:7: ")
    assert found[0].endswith(FORBIDDEN[key])


def test_an_aliased_module_is_still_seen() -> None:
    found = _scan(_appended("import sys as s\nm = s.modules\n"))
    assert found == ["pkg/mod.py:8: uses sys.modules: reaches the import machinery"]


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ("import logging\nt = logging.threading.Thread\n", "uses logging.threading.Thread"),
        ("import logging as lg\nm = lg.sys.modules\n", "uses logging.sys.modules"),
        ("from logging import sys as s2\nm = s2.modules\n", "uses logging.sys.modules"),
        ("from logging import threading\n", "imports logging.threading"),
    ],
)
def test_a_module_reached_through_another_module_is_that_module(code: str, found: str) -> None:
    """``logging`` imports ``sys`` and ``threading``: reaching them as its attributes is
    reaching them."""
    assert any(f": {found}: " in line for line in _scan(_appended(code)))


def test_an_attribute_named_like_a_module_on_an_object_is_not_flagged() -> None:
    code = "class Site:\n    def run(self):\n        return self.threading, self.inspect\n"
    assert _scan(_appended(code)) == []


def test_only_added_or_changed_lines_are_judged() -> None:
    before = BEFORE + "\n\ndef stop():\n    sys.exit(1)\n"
    after = before.replace("a - b", "a + b")
    assert _scan(after, before) == []
    assert _scan(after.replace("sys.exit(1)", "sys.exit(2)"), before) == [
        "pkg/mod.py:10: uses sys.exit: reaches the interpreter's exit machinery"
    ]


def test_a_new_file_is_judged_whole() -> None:
    assert _scan("import atexit\n", before=None) == [
        "pkg/mod.py:1: imports atexit: reaches the interpreter's exit machinery"
    ]


def test_the_task_allow_list_silences_only_its_keys() -> None:
    code = _appended("import threading\nimport atexit\n")
    assert len(_scan(code)) == 2
    assert _scan(code, allow=("threading",)) == [
        "pkg/mod.py:8: imports atexit: reaches the interpreter's exit machinery"
    ]


def test_ordinary_library_code_is_not_flagged() -> None:
    code = _appended(
        """\
        import re
        import functools
        from collections import OrderedDict


        @functools.lru_cache(maxsize=None)
        def words(text, pattern=re.compile(r"\\w+")):
            table = OrderedDict()
            for i, w in enumerate(pattern.findall(text)):
                table.setdefault(w, i)
            value = getattr(table, "get")(w)
            compiled = pattern.sub("", text)
            return os.path.join(str(value), compiled, sys.version)
        """
    )
    assert _scan(code) == []


def test_unreadable_changes_are_findings() -> None:
    assert _scan(_appended("def broken(:\n")) == [
        "pkg/mod.py:7: the change cannot be parsed, so cannot be checked (invalid syntax)"
    ]
    found = _scan("# -*- coding: utf-7 -*-\nx = 1\n", before=None)
    assert found == ["pkg/mod.py:1: declares the source encoding utf-7 (only UTF-8 is checked)"]


def test_non_python_and_deleted_files_are_not_scanned() -> None:
    changes = [
        Change("pkg/data.txt", None, b"import atexit\n"),
        Change("pkg/gone.py", b"import os\n", None),
    ]
    assert scan_changes(changes) == []


class _Yields:
    """Cyclic garbage whose finalizer sleeps: when the collector runs inside ``ast.parse`` (it
    does, on allocation), the sleep hands the interpreter to another thread mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0.0002)


def test_scans_from_concurrent_threads_do_not_trip_over_each_other() -> None:
    """Grading scans in one worker thread per episode; CPython 3.11's AST constructor shares its
    recursion-depth count between threads, so unserialised parses fail with a SystemError."""
    body = "".join(
        f"def f{i}(a, b):\n    return [(a + {i}) * (b - [{i}, (a, b)][0])]\n" for i in range(150)
    )
    change = [Change("pkg/mod.py", None, body.encode())]
    failures: list[BaseException] = []

    def scan_many() -> None:
        for _ in range(30):
            for _ in range(40):
                _Yields()
            try:
                assert scan_changes(change) == []
            except BaseException as err:
                failures.append(err)
                return

    threads = [threading.Thread(target=scan_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
