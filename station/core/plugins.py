"""The plugins the engine uses without importing them: model providers and executors.

Their packages (station/models/, station/executors/, or a third party's) register into these
registries as they load; each is listed under the entry-point group `station.plugins` in its
pyproject.toml, and imported the first time a registry is asked for a name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from station.core.model_api import Model
from station.core.registry import PLUGINS, Registry

# Model providers by config name: each makes a Model from (config, stop=..., on_wait=...).
PROVIDERS: Registry[Callable[..., Model]] = Registry("model provider", plugins=PLUGINS)
# Executors by config name (`research.executor.kind`): each makes an Executor from (config, hide,
# scratch_base).
EXECUTORS: Registry[Callable[..., Any]] = Registry("executor", plugins=PLUGINS)
