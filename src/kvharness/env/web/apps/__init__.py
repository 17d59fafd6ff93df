"""The bundled task families: small local web apps, each with seeded variants (see ``task.py``).

:data:`FAMILIES` lists them by name; :func:`suite` builds ``seeds`` variants of each.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from kvharness.env.web.task import Family, WebTask
from kvharness.errors import UserError

__all__ = ["FAMILIES", "family", "suite", "task"]

_MODULES = (
    "signup_form",
    "settings_deep",
    "table_sort_filter",
    "file_manager",
    "spreadsheet_fix",
    "checkout",
    "kanban",
    "todo_list",
    "email_client",
    "calendar_booking",
    "contacts_edit",
    "permissions_matrix",
    "text_editor",
    "tree_select",
    "pagination",
    "bank_transfer",
    "sliders",
    "reorder_list",
    "cart",
    "wizard",
    "chat",
    "date_picker",
)

FAMILIES: dict[str, Family] = {}
for _name in _MODULES:
    _fam: Family = importlib.import_module(f"{__name__}.{_name}").FAMILY
    FAMILIES[_fam.name] = _fam


def family(name: str) -> Family:
    """The family called ``name``; a UserError listing the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UserError(
            f"unknown web task family {name!r}; known: {', '.join(sorted(FAMILIES))}"
        ) from None


def task(task_id: str) -> WebTask:
    """The task ``<family>/<seed>``."""
    name, _, seed = task_id.partition("/")
    if not seed.isdigit():
        raise UserError(f"a web task id is <family>/<seed>, e.g. signup-form/0; got {task_id!r}")
    return family(name).build(int(seed))


def suite(seeds: Sequence[int] = (0,), names: Iterable[str] | None = None) -> list[WebTask]:
    """Every family's variants for ``seeds`` (or only the families in ``names``)."""
    chosen = list(FAMILIES) if names is None else [family(n).name for n in names]
    return [FAMILIES[n].build(s) for n in chosen for s in seeds]
