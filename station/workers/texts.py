"""The texts a worker's model reads (codex/workers.yaml): its tools' descriptions and reminders."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from station.core.texts import CODEX_ROOT, fill

WORKER_TEXTS = CODEX_ROOT / "workers.yaml"


@functools.cache
def _texts() -> dict[str, str]:
    return dict(yaml.safe_load(WORKER_TEXTS.read_text(encoding="utf-8")))


def worker_text(name: str, /, **values: Any) -> str:
    """The text `name` with its $placeholders filled (a missing one is an error naming the text)."""
    return fill(_texts()[name], name, values)
