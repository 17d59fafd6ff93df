"""Choosing an implementation by name: one mechanism for routing policies, eviction policies and
agents.

A :class:`Registry` maps each name to a factory (a class, or any callable that returns an
object of the registry's kind). The same name means the same factory wherever it is used (the
simulator, the gateway, the CLI), and an unknown name is one error that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Mapping[str, Callable[..., T]], Generic[T]):
    """Name -> factory of a ``T``; ``kind`` names what is chosen (``"policy"``) in errors.

    A read-only mapping, plus :meth:`register` to add a name once; iteration is in
    registration order, :meth:`names` sorted.
    """

    __slots__ = ("_factories", "kind")

    def __init__(self, kind: str, factories: Mapping[str, Callable[..., T]] | None = None) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        for name, factory in (factories or {}).items():
            self.register(name, factory)

    def register(self, name: str, factory: Callable[..., T]) -> Callable[..., T]:
        """Make ``factory`` available as ``name``; ValueError when the name is taken."""
        if name in self._factories:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._factories[name] = factory
        return factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def make(self, name: str, /, *args: Any, **options: Any) -> T:
        """A new object by ``name``, its factory called with ``args`` and ``options``.

        Raises ValueError for an unknown name (``unknown policy 'x'; choose from a, b``).
        """
        try:
            factory = self._factories[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; choose from {', '.join(self.names())}"
            ) from None
        return factory(*args, **options)

    def __getitem__(self, name: str) -> Callable[..., T]:
        return self._factories[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)
