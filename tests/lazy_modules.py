"""Modules imported on first use. Every parallel test worker imports every test module to collect
it, so a module-level `import jax` costs each worker about a CPU-second (Flax another half), even
where none of that module's tests run: a test module that needs JAX only in its tests imports it
through `Lazy` instead."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cached_property
from typing import Any


class Lazy:
    """The module `name`, imported when one of its public attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    @cached_property
    def _module(self) -> Any:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # introspection (pytest asks every module-level object for `_mock_name`): no import
            raise AttributeError(attr)
        return getattr(self._module, attr)


def made_on_first_call(make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A function that is `make()` (a compiled function, say), made when it is first called."""
    made: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not made:
            made.append(make())
        return made[0](*args, **kwargs)

    return call
