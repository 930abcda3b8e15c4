"""The offline scripted researcher's play on Sokoban: it tunes the actor-critic's learning rate and entropy bonus."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def submission(seen: Any, rng: random.Random) -> dict[str, str]:
    lr, entropy = rng.choice([2e-4, 4e-4, 8e-4]), rng.choice([0.005, 0.01, 0.02])
    code = (HERE / "baselines" / "cnn_pg.py").read_text(encoding="utf-8")
    code = code.replace(
        '{"learning_rate": 4e-4, "entropy_coef": 0.01, "value_coef": 0.5}',
        f'{{"learning_rate": {lr}, "entropy_coef": {entropy}, "value_coef": 0.5}}',
    )
    return {
        "title": f"CNN actor-critic, lr {lr:g}, entropy {entropy:g}",
        "tags": "cnn, a2c, tuning",
        "abstract": "The convolutional actor-critic with another learning rate and entropy bonus.",
        "content": code,
    }
