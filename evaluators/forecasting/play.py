"""The offline scripted researcher's play on forecasting: it tunes the shared MLP, then makes it predict the change from the
last frame."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def submission(seen: Any, rng: random.Random) -> dict[str, str]:
    level = seen.notes["fc_level"] = seen.notes.get("fc_level", 0) + 1
    hidden, lr = rng.choice([32, 64, 128]), rng.choice([3e-4, 1e-3, 3e-3])
    code = (HERE / "baselines" / "shared_mlp.py").read_text(encoding="utf-8")
    code = code.replace('{"learning_rate": 1e-3, "hidden": 64}', f'{{"learning_rate": {lr}, "hidden": {hidden}}}')
    if level > 1:  # from the second try on: predict the change from the last frame, not the frames
        code = code.replace(
            "return jnp.swapaxes(h, 1, 2)  # (batch, 32, neurons)",
            "return jnp.swapaxes(h, 1, 2) + x[:, -1:, :]  # the change from the last frame",
        )
        title, tags = f"Shared MLP on top of persistence ({hidden} units, lr {lr:g})", "mlp, residual"
        abstract = "The shared-neuron MLP predicts the change from each neuron's last frame instead of the frames."
    else:
        title, tags = f"Shared-neuron MLP, {hidden} units, lr {lr:g}", "mlp, baseline-variant"
        abstract = "The baseline's per-neuron MLP with a different width and learning rate."
    return {"title": title, "tags": tags, "abstract": abstract, "content": code}
