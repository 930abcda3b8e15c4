"""Model providers. The engine asks a ModelPool for the model of a config; it imports no SDK."""
from __future__ import annotations

from typing import Any

from ..config import ModelConfig
from .base import Message, Model, ModelError, Reply, Usage
from .replay import ReplayModel
from .scripted import ScriptedModel
from .scripted_debugger import ScriptedDebugger
from .scripted_grader import ScriptedGrader
from .scripted_reviewer import ScriptedReviewer

__all__ = ["Message", "Model", "ModelError", "ModelPool", "Reply", "Usage", "create_model"]


def create_model(config: ModelConfig) -> Model:
    if config.provider == "scripted":
        if config.name.startswith("scripted-grader"):
            return ScriptedGrader(config.name)
        if config.name.startswith("scripted-reviewer"):
            return ScriptedReviewer(config.name)
        if config.name.startswith("scripted-debugger"):
            return ScriptedDebugger(config.name)
        return ScriptedModel(config.name, config.seed)
    if config.provider == "replay":
        return ReplayModel(config.name, config.replay_file or "")
    raise ModelError(f"unknown model provider {config.provider!r}", permanent=True)


class ModelPool:
    """One model object per distinct config, shared by the agents that use it."""

    def __init__(self) -> None:
        self._models: dict[str, Model] = {}

    def get(self, config: ModelConfig | dict[str, Any]) -> Model:
        cfg = config if isinstance(config, ModelConfig) else ModelConfig.model_validate(config)
        key = cfg.model_dump_json()
        if key not in self._models:
            self._models[key] = create_model(cfg)
        return self._models[key]
