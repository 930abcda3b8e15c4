"""OpenEvolve's EvaluationResult: the metrics an evaluator hands back, with artifacts beside them
(texts such as stderr or a traceback, shown to the program's author with its result)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvaluationResult:
    metrics: dict[str, float]
    artifacts: dict[str, str | bytes] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, float]) -> EvaluationResult:
        """A plain metrics dict, as older evaluators return it."""
        return cls(metrics=dict(metrics))

    def to_dict(self) -> dict[str, float]:
        return dict(self.metrics)

    def has_artifacts(self) -> bool:
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list[str]:
        return list(self.artifacts)

    def get_artifact_size(self, key: str) -> int:
        value: Any = self.artifacts.get(key)
        if value is None:
            return 0
        return len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        return sum(self.get_artifact_size(key) for key in self.artifacts)
