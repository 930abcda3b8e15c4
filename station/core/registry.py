"""Named plugins of one kind: rooms, model providers, executors, research tasks, scripted policies.

Every kind is registered the same way: `@REGISTRY.register("name")` on the class or factory,
or `REGISTRY.lazy("name", "package.module:attribute")` for one whose module pulls a heavy
dependency (a provider SDK, Ray), imported only when that name is used. An unknown name is an
error that lists the known ones. A leaf module: it imports nothing of the project.

A registry the engine asks without importing its plugins (the model providers, the executors)
names an entry-point group: the packages listed there (pyproject.toml) are imported the first
time the registry is asked, and register their plugins as they load.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

T = TypeVar("T")
PLUGINS = "station.plugins"  # the entry-point group of the packages that register plugins

# A thousand turn threads may ask for one provider at once: its SDK is imported by one thread
# while the others wait (two importing one package concurrently can see it half-initialised).
_IMPORTING = threading.RLock()  # reentrant: a plugin package that loads may ask a registry


class UnknownName(ValueError):
    """A name no plugin of this kind is registered under."""


class Registry(Generic[T]):
    def __init__(self, kind: str, plugins: str | None = None) -> None:
        self.kind = kind  # "model provider", "executor", ...: used in error messages
        self._entries: dict[str, T | str] = {}
        self._plugins = plugins  # the entry-point group of the packages that fill it, if any

    def register(self, name: str) -> Callable[[T], T]:
        def mark(entry: T) -> T:
            self._add(name, entry)
            return entry

        return mark

    def lazy(self, name: str, path: str) -> None:
        """Register `module:attribute`, imported the first time `name` is asked for."""
        self._add(name, path)

    def get(self, name: str) -> T:
        self._discover()
        if name not in self._entries:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        entry = self._entries[name]
        if isinstance(entry, str):
            with _IMPORTING:
                entry = self._entries[name]
                if isinstance(entry, str):
                    module, _, attribute = entry.partition(":")
                    entry = self._entries[name] = getattr(importlib.import_module(module), attribute)
        return entry

    def remove(self, name: str) -> None:
        """Take a plugin away again (a test that adds one to see what a new plugin changes)."""
        del self._entries[name]

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        self._discover()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def _discover(self) -> None:
        """Import the packages of this registry's entry-point group, once."""
        if self._plugins is None:
            return
        with _IMPORTING:
            group, self._plugins = self._plugins, None  # cleared first: a loading package registers here
            for point in installed_entry_points(tuple(sys.path)).get(group, ()):
                point.load()

    def _add(self, name: str, entry: T | str) -> None:
        if name in self._entries and _where(self._entries[name]) != _where(entry):
            raise ValueError(
                f"{self.kind} {name!r} is registered twice: {_where(self._entries[name])} and {_where(entry)}"
            )
        self._entries[name] = entry


@functools.lru_cache(maxsize=4)
def installed_entry_points(path: tuple[str, ...]) -> dict[str, tuple[EntryPoint, ...]]:
    """Every installed package's entry points by group, read once per search path: each read opens
    every distribution's metadata (about 6 ms here), and a station process has seven registries."""
    everything = entry_points()
    return {group: tuple(everything.select(group=group)) for group in everything.groups}


def _where(entry: object) -> str:
    """Where an entry is defined: a module reloaded in a test registers the same name again."""
    if isinstance(entry, str):
        return entry
    return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', repr(entry))}"
